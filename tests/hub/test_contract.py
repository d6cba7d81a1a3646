"""hltmt_plugin.hub.contract: what every engine shares: a sentence's refusals in one order, the
per-line errors of a call, its result, the engines' imports, and the contract every translator
keeps (one load, one translate_batch): every engine class of the hub, found by walking it, gets
the same bounds table."""

import contextlib
import inspect
import sys

import pytest

from hltmt_plugin.directions import TrainedDirections
from hltmt_plugin.errors import HltmtConfigError, HltmtError, HltmtInputError
from hltmt_plugin.hub import contract
from hltmt_plugin.hub.arguments import Search
from hltmt_plugin.hub.results import Hypothesis, Translation, TranslationErrors

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

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


def test_a_sentences_nbest_best_come_back_best_first_and_as_fairseq_orders_equal_scores():
    result = Translation(1, "en", "de", "a")
    hypotheses = [("b", -2.0, 3), ("a", -1.0, 2), ("c", -1.0, 4), ("d", -3.0, 5)]
    contract.ranked(result, hypotheses, 1)
    assert (result.text, result.score, result.tokens, result.hypotheses) == ("a", -1.0, 2, None)
    contract.ranked(result, hypotheses, 3)
    assert result.hypotheses == [Hypothesis("a", -1.0, 2), Hypothesis("c", -1.0, 4), Hypothesis("b", -2.0, 3)]
    assert result.to_dict()["hypotheses"][1] == {"text": "c", "score": -1.0, "tokens": 4}
    failed = Translation(2, "en", "xx", "b", error="unknown language 'xx'")
    assert contract.outcome([result, failed], details=False, errors="keep", nbest=3) == [["a", "c", "b"], None]
    assert "hypotheses" not in failed.to_dict()


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
        HltmtConfigError, match='^transformers is not installed: pip install "transformers>=5.25,<6" "sa'
    ):
        contract.import_transformers(writes=True)  # exporting


def test_an_export_to_transformers_needs_safetensors_too(monkeypatch):
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)
    with pytest.raises(
        HltmtConfigError, match=r"^transformers is not installed: .*\(or pip install -e \"\.\[transformers\]\"\)$"
    ):
        contract.import_transformers(writes=True)


# ---- the bounds every engine inherits from the contract ------------------------------------


def engine_classes():
    """Every translator class of the package: the hub's modules imported, then
    ``Translator.__subclasses__()`` walked (an engine written later is found by itself)."""
    import importlib
    import pkgutil

    import hltmt_plugin.hub as hub

    for info in pkgutil.iter_modules(hub.__path__, "hltmt_plugin.hub."):
        importlib.import_module(info.name)
    found, todo = [], [contract.Translator]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("hltmt_plugin.") and sub not in found:
                found.append(sub)
                todo.append(sub)
    return found


def contract_broken(engine) -> list:
    """The contract's calls that ``engine`` does not take from the contract (it must take all)."""
    own = inspect.getattr_static
    return [name for name in contract.Translator.SEALED if own(engine, name) is not own(contract.Translator, name)]


def recording(engine):
    """A subclass of ``engine`` whose engine methods record their calls and run nothing (no
    line about bounds of its own: whatever it gets, the contract let through)."""
    calls = []

    class Recording(engine):
        def __init__(self):
            self.langs, self.directions, self.dictionary = LANGS, DIRECTIONS, [None] * 100  # 100 symbols
            self.max_source_positions = self.max_target_positions = 64
            self.max_tokens, self.max_sentences = 4000, None

        @classmethod
        def _load(cls, checkpoint, spm, data, **options):
            calls.append(("load", options))
            return cls()

        def routing(self, src, tgt):
            return routing(src, tgt)

        def _tokens(self, texts):
            return [[5] * len(text.split()) + [2] for text in texts]

        def _prepared(self, index, src, tgt, tokens):
            return index

        def _translate_prepared(self, prepared, results, search, max_tokens, max_sentences, progress):
            calls.append(("translate", search, max_tokens, max_sentences, list(prepared)))
            for index in prepared:
                contract.ranked(results[index], [("x", -1.0, 2)] * search.beam, search.nbest)

        def _seeded(self, seed):
            calls.append(("seeded", seed))
            return contextlib.nullcontext()  # the engine's generators are not this test's

    return Recording, calls


LOAD_BOUNDS = [
    ({"threads": 0}, "threads"),
    ({"threads": -1}, "threads"),
    ({"threads": 100000}, "threads must be at most"),
    ({"threads": 2.5}, "threads"),
    ({"threads": True}, "threads"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 1e9}, "max_tokens"),
    ({"max_tokens": None}, "max_tokens"),
    ({"max_sentences": 0.5}, "max_sentences"),
    ({"fp16": "yes"}, "fp16"),
]
OK = [("en", "de", "The file is open.")]
TRANSLATE_BOUNDS = [
    ({"beam": 0}, "beam"),
    ({"beam": 2.5}, "beam"),
    ({"beam": 101}, "beam 101 is more than one search of this model may cost"),
    ({"lenpen": float("nan")}, "lenpen"),
    ({"lenpen": 11}, "lenpen must be from"),
    ({"lenpen": "1"}, "lenpen"),
    ({"max_len": 0}, "max_len"),
    ({"max_len": float("inf")}, "max_len"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_sentences": -1}, "max_sentences"),
    ({"errors": "ignore"}, "errors"),
    ({"first_line": "1"}, "first_line"),
    ({"progress": "bar"}, "progress"),
    ({"zero_shot": "yes"}, "zero_shot"),
    ({"items": None}, "items is None"),
    ({"nbest": 0}, "nbest"),
    ({"nbest": 6}, "nbest 6 is more than the beam \\(5\\)"),
    ({"nbest": 2.0}, "nbest"),
    ({"sampling": 1}, "sampling must be True or False"),
    ({"sampling_topk": 5}, "sampling_topk applies to sampling"),
    ({"sampling_topp": 0.9}, "sampling_topp applies to sampling"),
    ({"temperature": 0.5}, "temperature applies to sampling"),
    ({"seed": 1}, "seed applies to sampling"),
    ({"sampling": True, "sampling_topk": 0}, "sampling_topk must be at least 1"),
    ({"sampling": True, "sampling_topk": 101}, "sampling_topk 101 is more than the model's vocabulary"),
    ({"sampling": True, "sampling_topp": 0}, "sampling_topp must be from 1.175e-38"),
    ({"sampling": True, "sampling_topp": 1.5}, "sampling_topp must be from 1.175e-38"),
    ({"sampling": True, "sampling_topp": float("nan")}, "sampling_topp must be a finite number"),
    ({"sampling": True, "sampling_topk": 5, "sampling_topp": 0.9}, "sampling_topk or sampling_topp, not both"),
    ({"sampling": True, "temperature": 0}, "temperature must be from 0.01 to 100"),
    ({"sampling": True, "temperature": -1}, "temperature must be from 0.01 to 100"),
    ({"sampling": True, "temperature": 1e9}, "temperature must be from 0.01 to 100"),
    ({"sampling": True, "temperature": float("inf")}, "temperature must be a finite number"),
    ({"sampling": True, "seed": -1}, "seed must be from 0 to 2147483647"),
    ({"sampling": True, "seed": 2**31}, "seed must be from 0 to 2147483647"),
    ({"sampling": True, "seed": "1"}, "seed must be a whole number"),
    ({"no_repeat_ngram_size": -1}, "no_repeat_ngram_size must be 0 \\(off\\) or at least 2"),
    ({"no_repeat_ngram_size": 1}, "no_repeat_ngram_size must be 0 \\(off\\) or at least 2"),
    ({"no_repeat_ngram_size": 65}, "no_repeat_ngram_size 65 is longer than any translation"),
    ({"no_repeat_ngram_size": 2.5}, "no_repeat_ngram_size must be a whole number"),
]
# sentences each engine refuses alone, with its line: the text rule, the line and position bounds
LINE_BOUNDS = [
    ("a\x00b", "NUL character at position 2"),
    ("a\x1bb", "control character U\\+001B at position 2"),
    ("a\ud800", "lone surrogate"),
    ("x" * 201, "is longer than 200 bytes"),
    (" w" * 63, "65 tokens .* more than the model's 64 source positions"),
]


def test_every_engine_class_takes_the_contracts_calls_and_bounds(monkeypatch):
    engines = engine_classes()
    names = {engine.__name__ for engine in engines}
    assert {"HltmtTranslator", "ExportedTranslator", "Ct2Translator", "HfTranslator"} <= names, names
    monkeypatch.setattr("hltmt_plugin.text.MAX_LINE_BYTES", 200)
    for engine in engines:
        assert contract_broken(engine) == [], engine
        Engine, calls = recording(engine)
        for options, why in LOAD_BOUNDS:
            with pytest.raises(HltmtConfigError, match=why):
                Engine.load("model", **options)
        assert calls == [], (engine, calls)
        mt = Engine.load("model", threads=2)
        assert calls.pop() == ("load", dict(NONE_OF_LOAD, threads=2))
        for options, why in TRANSLATE_BOUNDS:
            with pytest.raises(HltmtError, match=why):
                mt.translate_batch(**{"items": OK, **options})
        assert calls == [], (engine, calls)
        for text, why in LINE_BOUNDS:
            with pytest.raises(TranslationErrors, match=f"line 1: .*{why}"):
                mt.translate_batch([("en", "de", text)])
        assert calls == [], (engine, calls)
        lowest = engine.search_limits["lenpen"].low if "lenpen" in engine.search_limits else -10.0
        if lowest > -10.0:  # the engine's own range, applied by the contract before the engine runs
            with pytest.raises(HltmtConfigError, match=f"lenpen -10 is refused on {engine.engine_name}"):
                mt.translate_batch(OK, lenpen=-10)
            assert calls == [], (engine, calls)
        assert mt.translate_batch(OK, beam=100, lenpen=lowest, max_len=10**9) == ["x"]
        search = Search(100, float(lowest), 63)  # max_len: the positions' bound
        assert calls.pop() == ("translate", search, 4000, None, [0])
        sampled = dict(sampling=True, sampling_topp=1, temperature=100, seed=2**31 - 1, no_repeat_ngram_size=64)
        assert mt.translate_batch(OK, beam=4, nbest=4, **sampled) == [["x"] * 4]
        search = Search(4, 1.0, 63, 4, True, None, 1.0, 100.0, 2**31 - 1, 64)
        assert calls[-2:] == [("seeded", 2**31 - 1), ("translate", search, 4000, None, [0])]
        del calls[:]


def test_a_seeded_call_gives_its_turn_back_however_it_ends():
    """contract.SEEDED_CALLS: taken by a seeded call, given back when the search raises and when
    the engine refuses the seed (CTranslate2's: a folder changed since its load), so the next
    seeded call of the process does not wait for ever."""

    class Refusing(contract.Translator):
        def _seeded(self, seed):
            raise HltmtInputError("the folder has changed since it was loaded")

    mt = Refusing.__new__(Refusing)
    with pytest.raises(HltmtInputError, match="changed"):
        with mt._seeded_call(3):
            pass
    assert not contract.SEEDED_CALLS.locked()

    class Seeding(contract.Translator):
        def _seeded(self, seed):
            return contextlib.nullcontext()

    with pytest.raises(ZeroDivisionError):
        with Seeding.__new__(Seeding)._seeded_call(3):
            assert contract.SEEDED_CALLS.locked()
            1 / 0  # the search raises
    assert not contract.SEEDED_CALLS.locked()


def test_a_call_holding_more_sentences_than_a_reader_reads_is_refused(monkeypatch):
    Engine, calls = recording(contract.ExportedTranslator)
    monkeypatch.setattr("hltmt_plugin.text.MAX_LINES", 3)
    with pytest.raises(HltmtInputError, match="items holds 4 sentences, more than 3 in one call"):
        Engine.load("model").translate_batch(OK * 4)
    assert [call[0] for call in calls] == ["load"]


NONE_OF_LOAD = {
    "device": None,
    "compute_type": None,
    "record": None,
    "max_tokens": 4000,
    "max_sentences": None,
    "threads": None,
    "fp16": False,
}


def test_an_engine_that_overrides_the_contracts_calls_is_refused_when_defined():
    for name in contract.Translator.SEALED:
        with pytest.raises(TypeError, match=f"Planted overrides {name} of the translator's contract"):
            type("Planted", (contract.ExportedTranslator,), {name: lambda *args, **kwargs: []})


def test_an_engine_patched_after_its_definition_is_caught():
    Engine, _ = recording(contract.ExportedTranslator)
    assert contract_broken(Engine) == []
    Engine.translate_batch = lambda self, items, **options: ["unchecked"]  # past the class statement's check
    assert contract_broken(Engine) == ["translate_batch"]
