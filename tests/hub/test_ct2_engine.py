"""hltmt_plugin.hub.ct2_engine: an exported model served with the translator's contract: any
mix of directions in one call, results in input order, per-line errors, the same refusals."""

import pytest

from hub_common import DIRECTIONS, sentences

pytest.importorskip("ctranslate2")

from hltmt_plugin.errors import HltmtConfigError  # noqa: E402
from hltmt_plugin.export.ctranslate2 import export  # noqa: E402
from hltmt_plugin.hub import HltmtTranslator, TranslationErrors  # noqa: E402


@pytest.fixture(scope="module")
def exported(hltmt, tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("ct2") / "hltmt")
    export(hltmt, folder)
    return folder


@pytest.fixture(scope="module")
def served(exported):
    return HltmtTranslator.load(exported, threads=1)


def test_mixed_directions_come_back_in_input_order_as_the_checkpoint_gives_them(served, translator):
    items = [(s, t, text) for s, t in DIRECTIONS for text in sentences(s, t, 4)][::-1]
    done = []
    found = served.translate_batch(items, beam=4, max_len=20, max_sentences=3, progress=done.append)
    assert found == translator.translate_batch(items, beam=4, max_len=20)
    assert sum(done) == len(items)
    first = sentences("en", "de", 1)
    one = served.translate(first, "en", "de", beam=4, max_len=20)
    assert one == [found[items.index(("en", "de", first[0]))]]


def test_bad_lines_fail_alone_with_their_line_numbers(served, translator):
    items = [
        ("en", "de", "The file is open."),
        ("xx", "de", "x"),
        ("en", "de", "   "),
        ("en", "de", "a\x00b"),
        ("en", "de", "word " * 2000),
        ("gu", "de", "x"),
        "not a tuple",
    ]
    found = served.translate_batch(items, details=True, errors="keep", first_line=10)
    expected = translator.translate_batch(items, details=True, errors="keep", first_line=10)
    assert [r.error for r in found] == [r.error for r in expected]
    assert [r.line for r in found] == list(range(10, 17))
    assert found[0].text == expected[0].text and found[0].routing == expected[0].routing
    with pytest.raises(TranslationErrors, match="6 of 7 sentence.s. not translated: line 2: unknown language"):
        served.translate_batch(items)


def test_a_zero_shot_direction_is_served_only_when_asked(served, translator):
    item = [("de", "gu", "Die Datei ist offen.")]
    with pytest.raises(TranslationErrors, match="zero-shot"):
        served.translate_batch(item)
    found = served.translate_batch(item, zero_shot=True, details=True)[0]
    assert found.zero_shot and found.text == translator.translate_batch(item, zero_shot=True)[0]


def test_options_that_do_not_apply_to_an_export_are_refused(exported):
    with pytest.raises(HltmtConfigError, match="carries its own sentencepiece model"):
        HltmtTranslator.load(exported, spm="x.model")
    with pytest.raises(HltmtConfigError, match="compute type 'int3'"):
        HltmtTranslator.load(exported, compute_type="int3")
    with pytest.raises(HltmtConfigError, match="threads must"):
        HltmtTranslator.load(exported, threads=0)
    with pytest.raises(HltmtConfigError, match="an exported model runs on cpu or cuda"):
        HltmtTranslator.load(exported, device="mps")
