"""The Python API's arguments (hltmt_plugin/hub/arguments.py): each bad argument of
``translate`` / ``translate_batch`` / ``generator`` / ``load`` is one error naming it, before
any search; a text the model cannot be given fails alone, with its line."""

import math
import re

import pytest

from hltmt_plugin.errors import HltmtError


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
