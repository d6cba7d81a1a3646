"""hltmt_plugin.hub.contract: what both engines share: a sentence's refusals in one order, the
per-line errors of a call, its result, the engines' imports, and the contract every translator
keeps (one translate_batch)."""

import sys

import pytest

from hltmt_plugin.directions import TrainedDirections
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.hub import contract
from hltmt_plugin.hub.results import TranslationErrors

LANGS = ["en", "de", "fr", "gu"]
DIRECTIONS = TrainedDirections(["en-de", "en-fr", "en-gu", "de-en"])


def routing(src, tgt):
    contract.check_languages(LANGS, src, tgt)
    return {"slp": tgt}


def admit(src, tgt, text, zero_shot=False):
    return contract.admit(text, src, tgt, routing, DIRECTIONS, zero_shot)


def test_refusals_come_in_one_order():
    assert admit("en", "de", "The file.") == ({"slp": "de"}, "trained")
    assert admit("de", "fr", "Die Datei.", zero_shot=True) == ({"slp": "fr"}, "zero-shot")
    for args, why in (
        (("xx", "de", ""), "unknown language 'xx' \\(this model knows en,de,fr,gu\\)"),  # the language before the text
        (("en", "de", None), "expected text, got NoneType"),
        (("de", "fr", "x"), "is zero-shot"),
        (("gu", "de", "x"), "direction gu-de refused"),
        (("en", "de", "a\x00b"), "NUL character at position 2"),
        (("en", "de", "\ud800"), "lone surrogate"),
        (("en", "de", " \t "), "empty line"),
    ):
        with pytest.raises(HltmtInputError, match=why):
            admit(*args)
    with pytest.raises(HltmtInputError, match="unknown language 3"):
        contract.check_languages(LANGS, "en", 3)


def test_a_line_longer_than_the_source_positions_is_refused_not_cut():
    contract.check_length(1023, 1024)  # with the language token: 1024 positions
    with pytest.raises(HltmtInputError, match="1025 tokens .* more than the model's 1024 source positions"):
        contract.check_length(1024, 1024)


def test_each_item_is_admitted_or_failed_with_its_line_number():
    items = [("en", "de", "a"), "nope", ("en", "xx", "b"), ("de", "fr", "c"), ("en", "gu", "d")]
    results, admitted = contract.admit_items(items, 10, lambda s, t, x: admit(s, t, x))
    assert [r.line for r in results] == [10, 11, 12, 13, 14]
    assert [i for i, *_ in admitted] == [0, 4] and admitted[1] == (4, "en", "gu", "d")
    assert results[1].error.startswith("expected (src, tgt, text), got 'nope'") and results[1].src == ""
    assert "unknown language 'xx'" in results[2].error and results[2].routing is None
    assert results[0].routing == {"slp": "de"} and not results[0].zero_shot
    contract.refuse(results[4], HltmtInputError("too long"))
    assert (results[4].error, results[4].routing, results[4].zero_shot) == ("too long", None, False)
    assert contract.outcome(results, details=False, errors="keep") == [None] * 5
    assert contract.outcome(results, details=True, errors="keep") is results
    with pytest.raises(TranslationErrors, match="4 of 5 sentence.s. not translated: line 11: expected") as caught:
        contract.outcome(results, details=False, errors="raise")
    assert caught.value.results == [None] * 5 and len(caught.value.failed) == 4
    many = contract.admit_items([("xx", "de", "a")] * 7, 1, lambda s, t, x: admit(s, t, x))[0]
    with pytest.raises(TranslationErrors, match="; and 2 more$"):
        contract.outcome(many, details=False, errors="raise")


def test_without_ctranslate2_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # what an environment without it gives
    with pytest.raises(
        HltmtConfigError, match='^this is an exported model and CTranslate2 is not installed: pip install "ctr'
    ):
        contract.import_ctranslate2("this is an exported model and ")


def test_without_transformers_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(
        HltmtConfigError, match="^this is an export to transformers and transformers is not installed: pip"
    ):
        contract.import_transformers("this is an export to transformers and ")  # serving an export
    with pytest.raises(
        HltmtConfigError, match='^transformers is not installed: pip install "transformers>=5.25,<6" sa'
    ):
        contract.import_transformers(writes=True)  # exporting


def test_an_export_to_transformers_needs_safetensors_too(monkeypatch):
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)
    with pytest.raises(
        HltmtConfigError, match=r"^transformers is not installed: .*\(or pip install -e \"\.\[transformers\]\"\)$"
    ):
        contract.import_transformers(writes=True)


def test_every_translator_keeps_one_contract():
    from hltmt_plugin.hub.ct2_engine import Ct2Translator
    from hltmt_plugin.hub.hf_engine import HfTranslator
    from hltmt_plugin.hub.translator import HltmtTranslator

    shared = ("translate", "translate_batch", "direction", "_prepare_items")
    for engine in (HltmtTranslator, Ct2Translator, HfTranslator):
        assert issubclass(engine, contract.Translator)
        assert all(getattr(engine, name) is getattr(contract.Translator, name) for name in shared), engine
