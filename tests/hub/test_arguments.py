"""The Python API's arguments (hltmt_plugin/hub/arguments.py): each bad argument of
``translate`` / ``translate_batch`` / ``generator`` / ``load`` is one error naming it, before
any search; a text the model cannot be given fails alone, with its line."""

import math
import re

import pytest

from hltmt_plugin.errors import HltmtError

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


def api_cases(mt):
    ok = ["The file is open."]
    return [
        ("items", lambda: mt.translate_batch(None)),
        ("items", lambda: mt.translate_batch("en\tde\tThe file is open.")),
        ("items", lambda: mt.translate_batch(42)),
        ("items", lambda: mt.translate_batch({"en": "de"})),
        ("texts", lambda: mt.translate(None, "en", "de")),
        ("texts", lambda: mt.translate(7, "en", "de")),
        ("texts", lambda: mt.translate(b"The file is open.", "en", "de")),
        ("src", lambda: mt.translate(ok, ["en"], "de")),
        ("tgt", lambda: mt.translate(ok, "en", None)),
        ("beam", lambda: mt.translate(ok, "en", "de", beam=0)),
        ("beam", lambda: mt.translate(ok, "en", "de", beam=2.5)),
        ("beam", lambda: mt.translate(ok, "en", "de", beam=None)),
        ("lenpen", lambda: mt.translate(ok, "en", "de", lenpen=math.nan)),
        ("lenpen", lambda: mt.translate(ok, "en", "de", lenpen=-math.inf)),
        ("lenpen", lambda: mt.translate(ok, "en", "de", lenpen="1.0")),
        ("max_len", lambda: mt.translate(ok, "en", "de", max_len=0)),
        ("max_len", lambda: mt.translate(ok, "en", "de", max_len=math.inf)),
        ("max_tokens", lambda: mt.translate(ok, "en", "de", max_tokens=0)),
        ("max_tokens", lambda: mt.translate(ok, "en", "de", max_tokens=1e9)),
        ("max_sentences", lambda: mt.translate(ok, "en", "de", max_sentences=-1)),
        ("errors", lambda: mt.translate(ok, "en", "de", errors="ignore")),
        ("first_line", lambda: mt.translate(ok, "en", "de", first_line="1")),
        ("progress", lambda: mt.translate(ok, "en", "de", progress="bar")),
        ("beam", lambda: mt.generator(beam=-3)),
    ]


def test_every_bad_argument_of_the_python_api_is_one_error_naming_it(translator):
    for name, call in api_cases(translator):
        with pytest.raises(HltmtError) as caught:
            call()
        assert isinstance(caught.value, ValueError)
        assert str(caught.value).startswith(name) or f" {name} " in str(caught.value), (name, str(caught.value))
        assert "\n" not in str(caught.value)


def test_bad_load_arguments_are_one_error_naming_them(hltmt):
    from hltmt_plugin.hub import HltmtTranslator

    for kwargs, name in (
        ({"device": "gpu7"}, "device"),
        ({"device": "cuda:3"}, "device"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_sentences": 0.5}, "max_sentences"),
    ):
        with pytest.raises(HltmtError, match=re.escape(name)):
            HltmtTranslator.load(hltmt, **kwargs)
    with pytest.raises(HltmtError, match="checkpoint must be a path"):
        HltmtTranslator.load(None)


def test_texts_the_model_cannot_be_given_fail_alone_with_their_line(translator):
    results = translator.translate(
        ["The file is open.", "nul\x00here", "lone \udcff surrogate", "Good morning."],
        "en",
        "de",
        beam=2,
        max_len=10,
        errors="keep",
        details=True,
    )
    assert [r.error is None for r in results] == [True, False, False, True]
    assert "NUL character at position 4" in results[1].error and "lone surrogate" in results[2].error
    alone = translator.translate(["The file is open.", "Good morning."], "en", "de", beam=2, max_len=10)
    assert [results[0].text, results[3].text] == alone


def test_search_bounds_are_the_same_for_every_engine():
    from hltmt_plugin.hub import arguments

    assert arguments.search_bounds(5, 200, vocab_size=100, max_positions=512) == (5, 200)
    assert arguments.search_bounds(100, 1000, vocab_size=100, max_positions=512) == (100, 511)
    for beam, max_len, name in (
        (101, 10, "beam 101 is more than one search of this model may cost"),
        (0, 10, "beam"),
        (2, 0, "max_len"),
    ):
        with pytest.raises(HltmtError, match=name):
            arguments.search_bounds(beam, max_len, vocab_size=100, max_positions=512)


def test_threads_and_the_length_penalty_are_bounded():
    from hltmt_plugin.hub import arguments

    assert arguments.threads(None) is None and arguments.threads(2) == 2
    for bad in (0, -1, 100000, 2.0, True):
        with pytest.raises(HltmtError, match="threads"):
            arguments.threads(bad)
    assert arguments.length_penalty(0.6) == 0.6
    for bad in (1e300, -11, math.nan, "1"):
        with pytest.raises(HltmtError, match="lenpen"):
            arguments.generation(5, bad, 200)
