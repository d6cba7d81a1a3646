"""The decoding options declared once (hltmt_plugin.hub.decoding): the commands' options, the
checks and every engine's arguments come from the declarations, so a field added or changed
there reaches each of them."""

import dataclasses

import pytest

from hltmt_plugin.errors import HltmtConfigError
from hltmt_plugin.hub import arguments, decoding

pytestmark = pytest.mark.fast


def test_every_field_says_how_every_engine_takes_it_or_the_module_is_refused(monkeypatch):
    broken = dict(decoding.FIELDS)
    field = dataclasses.field(default=0, metadata={**broken["beam"].metadata, "engines": {"fairseq": decoding.To("x")}})
    field.name = "planted"
    broken["planted"] = field
    monkeypatch.setattr(decoding, "FIELDS", broken)
    with pytest.raises(TypeError, match="planted does not say how ctranslate2, transformers takes it"):
        decoding._declared()


def test_hltmt_translate_takes_every_option_and_hltmt_serve_all_but_the_requests_own():
    from hltmt_plugin.cli import serve, translate

    flags = {option for action in translate.build_parser()._actions for option in action.option_strings}
    assert {decoding.flag_of(name) for name in decoding.FIELDS} <= flags
    served = {option for action in serve.build_parser()._actions for option in action.option_strings}
    assert {decoding.flag_of(name) for name in serve.SEARCH} <= served
    assert not {decoding.flag_of(name) for name in ("nbest", "sampling", *decoding.SAMPLING)} & served
    for name, field in decoding.FIELDS.items():  # the parsed default is the API's
        assert translate.parse_args(["--checkpoint", __file__]).__dict__[name] == field.default, name


def test_a_value_out_of_its_declared_range_is_refused_by_the_api_and_by_its_flag(capsys):
    from hltmt_plugin.cli import translate

    for name, field in decoding.FIELDS.items():
        meta = field.metadata
        if meta["high"] is None:
            continue
        with pytest.raises(HltmtConfigError, match=f"^{name} must be "):
            decoding.check_value(name, meta["high"] * 2)
        options = ["--sampling"] if meta["sampling"] and name != "sampling" else []
        with pytest.raises(SystemExit):
            translate.parse_args(["--checkpoint", __file__, *options, decoding.flag_of(name), str(meta["high"] * 2)])
        err = capsys.readouterr().err  # the declared range, or the parser's bound of every int option
        assert decoding.flag_of(name) in err and ("must be" in err or "out of range" in err), name
    with pytest.raises(HltmtConfigError, match="'bem' is not a search option"):
        arguments.search(bem=4)


def test_the_help_states_each_declared_range():
    from hltmt_plugin.cli import translate

    text = " ".join(translate.build_parser().format_help().split())
    assert "--temperature TEMPERATURE sampling temperature; from 0.01 to 100" in text
    assert "no n-gram of this size twice in a translation; 0: off, else at least 2" in text


def test_each_engine_gets_the_options_through_its_entries_only():
    search = arguments.search(beam=3, lenpen=0.5, max_len=20, no_repeat_ngram_size=3, min_len=2)
    assert decoding.engine_arguments(search, "fairseq") == {
        "beam": 3,
        "lenpen": 0.5,
        "max_len_a": 0,
        "max_len_b": 20,
        "sampling": False,
        "sampling_topk": -1,
        "sampling_topp": -1.0,
        "temperature": 1.0,
        "no_repeat_ngram_size": 3,
        "min_len": 2,
    }
    assert decoding.engine_arguments(search, "transformers") == {
        "num_beams": 3,
        "num_return_sequences": 3,
        "length_penalty": 0.5,
        "max_new_tokens": 21,
        "no_repeat_ngram_size": 3,
        "min_new_tokens": 2,
    }
    sampled = arguments.search(beam=2, sampling=True, sampling_topk=1, temperature=0.5)
    ct2 = decoding.engine_arguments(sampled, "ctranslate2", prefix=True)
    assert ct2["beam_size"] == 1 and ct2["num_hypotheses"] == 2 and ct2["min_decoding_length"] == 0
    assert (ct2["sampling_topk"], ct2["sampling_topp"]) == (0, decoding.MIN_TOPP)  # top-k 1 as CTranslate2 takes it


def test_an_engines_own_ranges_are_read_from_the_options_entries():
    from hltmt_plugin.hub.contract import Translator

    assert decoding.limits("transformers")["lenpen"].high == 1.0 and decoding.limits("fairseq") == {}
    assert set(decoding.differences("ctranslate2")) == {"min_len"}

    class Planted(Translator):
        engine = "transformers"

    assert Planted.search_limits == decoding.limits("transformers") and Planted.engine_name == "transformers"
