"""The compatibility record (hltmt_plugin/compatibility.py): what it holds of a model's options,
data and vocabulary, the comparison of two records field by field (:func:`mismatches`), the one
line that refuses a checkpoint (:func:`check`), and the record a checkpoint's stored options
give (:func:`record_of_options`: the stored record, one read from older options, or a refusal
when the stored options were edited after the record was written)."""

from argparse import Namespace

import pytest

from hltmt_plugin.compatibility import (
    NO_RECORD,
    OLD_DICTS,
    OLD_VOCAB,
    RECORD_KEY,
    VERSION_KEY,
    build_record,
    check,
    language_marking,
    mismatches,
    model_fields,
    no_record,
    record_of_options,
    record_of_state,
    spm_coverage,
    stored_options,
    vocabulary_fingerprint,
    written_by_plugin,
)
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


def options(**changes):
    """Model options as a checkpoint of the plugin stores them (no record)."""
    base = dict(
        arch="hltmt_transformer_tiny",
        encoder_embed_dim=128,
        encoder_layers=2,
        decoder_layers=2,
        high_resource_langs="de,fr",
        langs=["en", "de", "fr"],
        encoder_langtok="tgt",
        decoder_langtok=False,
        lang_tok_style="multilingual",
        dropout=0.1,
    )
    return Namespace(**{**base, **changes})


def test_the_record_holds_the_marking_the_model_options_and_the_languages():
    record = build_record(options(), symbols=["<s>", "x", "__en__"], languages=["en", "de"])
    assert record["marking"]["--encoder-langtok"] == "tgt" and record["marking"]["--decoder-langtok"] == "off"
    assert record["model"] == {
        "arch": "hltmt_transformer_tiny",
        "encoder_embed_dim": 128,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "high_resource_langs": "de,fr",
    }  # shape and feature options only: --dropout changes no weight's meaning
    assert record["languages"] == ["en", "de"] and record["vocabulary"]["symbols"] == 3
    assert "dictionaries" not in record and "spm" not in record  # not given: not recorded


def test_the_vocabulary_fingerprint_follows_the_symbols_in_their_order():
    one = vocabulary_fingerprint(["a", "b", "__en__"])
    assert one == vocabulary_fingerprint(["a", "b", "__en__"]) and one["symbols"] == 3
    assert one["sha256"] != vocabulary_fingerprint(["b", "a", "__en__"])["sha256"]


def test_the_marking_reads_langtoks_main_before_the_langtok_options():
    marking = dict(language_marking(Namespace(langtoks={"main": ("src", "tgt")}, encoder_langtok="tgt")))
    assert marking["--encoder-langtok"] == "src" and marking["--decoder-langtok"] == "on"
    marking = dict(language_marking(Namespace(encoder_langtok=None, extra_data={"mono_dae": "x"})))
    assert marking["--encoder-langtok"] == "none" and marking["--extra-data mono_dae"] == "on"


def test_model_fields_keep_plain_values_only():
    fields = model_fields(options(adapter_layers=(0, 1), encoder_layers_to_keep=object(), arch=None, _name="x"))
    assert fields["arch"] == "x" and fields["adapter_layers"] == [0, 1]
    assert isinstance(fields["encoder_layers_to_keep"], str)


RECORD = {
    "dictionaries": {"dict.en.txt": "a1", "dict.de.txt": "b1"},
    "vocabulary": {"symbols": 100, "sha256": "v1"},
    "languages": ["en", "de", "fr"],
    "marking": {"--encoder-langtok": "tgt", "--decoder-langtok": "off"},
    "model": {"arch": "hltmt_transformer_tiny", "encoder_layers": 2, "high_resource_langs": "de,fr"},
    "spm": "0123456789abcdef" * 4,
}


def changed(**fields):
    return {**RECORD, **fields}


@pytest.mark.parametrize(
    "given, line",
    [
        (
            changed(dictionaries={"dict.en.txt": "a1", "dict.de.txt": "b2"}),
            "dictionaries: dict.de.txt differ in content",
        ),
        (
            changed(vocabulary={"symbols": 100, "sha256": "v2"}),
            "vocabulary: checkpoint 100 symbols, given 100 (same size, other symbols)",
        ),
        (changed(vocabulary={"symbols": 90, "sha256": "v2"}), "vocabulary: checkpoint 100 symbols, given 90"),
        (changed(languages=["en", "fr", "de"]), "languages: checkpoint en,de,fr, given en,fr,de"),
        (
            changed(marking={"--encoder-langtok": "src", "--decoder-langtok": "off"}),
            "--encoder-langtok: checkpoint tgt, given src",
        ),
        (changed(model={**RECORD["model"], "encoder_layers": 3}), "--encoder-layers: checkpoint 2, given 3"),
        (changed(spm="f" * 64), "sentencepiece model: checkpoint 0123456789ab, given ffffffffffff (sha256)"),
    ],
)
def test_each_field_that_differs_is_one_difference_naming_both_values(given, line):
    assert mismatches(RECORD, given) == [line]


def test_the_fields_asked_for_are_compared_and_a_required_one_that_one_record_lacks_is_a_difference():
    assert mismatches(RECORD, dict(RECORD)) == []
    assert mismatches(RECORD, {"languages": ["en"]}, fields=("languages", "spm")) == [
        "languages: checkpoint en,de,fr, given en"
    ]  # spm is not required: a data folder without a sentencepiece model of hltmt-prepare-data's
    assert mismatches(RECORD, {"languages": ["en"]}, fields=("model", "vocabulary")) == [
        "model: none in the given record",
        "vocabulary: none in the given record",
    ]
    assert mismatches({"model": RECORD["model"]}, RECORD, fields=("dictionaries",)) == [
        "dictionaries: none in the checkpoint record"
    ]
    assert mismatches({}, {}, fields=("dictionaries", "vocabulary")) == []  # neither holds it: nothing to compare
    partial = {k: v for k, v in RECORD.items() if k != "spm"}
    # a model option or a marking only one side holds (a record of an older version) is not compared
    assert mismatches(RECORD, {**partial, "model": {"encoder_layers": 2, "decoder_layers": 9}}) == []


def test_a_dictionary_the_checkpoint_recorded_and_the_given_data_folder_lacks_is_a_difference():
    given = changed(dictionaries={"dict.en.txt": "a1", "dict.xx.txt": "c1"})  # one more: a language added
    assert mismatches(RECORD, given) == [
        "dictionaries: dict.de.txt in the checkpoint's record, not in the given's data"
    ]
    given = changed(model={**RECORD["model"], "encoder_layers": 3, "high_resource_langs": "de"})
    assert mismatches(RECORD, given, model_options=("encoder_layers",), labels=("was", "is")) == [
        "--encoder-layers: was 2, is 3"
    ]


def test_the_high_resource_languages_compare_in_any_order_as_the_router_reads_them():
    reordered = changed(model={**RECORD["model"], "high_resource_langs": "fr, de"})
    assert mismatches(RECORD, reordered) == []  # a resume: the router reorders the map's rows by name
    assert mismatches(RECORD, reordered, in_order=True) == ["--high-resource-langs: checkpoint de,fr, given fr, de"]
    other = changed(model={**RECORD["model"], "high_resource_langs": "de,gu"})
    assert mismatches(RECORD, other) == ["--high-resource-langs: checkpoint de,fr, given de,gu"]
    fewer = changed(model={**RECORD["model"], "high_resource_langs": "de"})
    with pytest.raises(
        HltmtConfigError,
        match=r"^the checkpoint x.pt does not fit: --high-resource-langs: checkpoint de,fr, given de: fix$",
    ):
        check(RECORD, fewer, "the checkpoint x.pt", "fix")


def test_a_long_value_is_cut_in_the_difference():
    given = changed(languages=[f"l{i}" for i in range(40)])
    [line] = mismatches(RECORD, given)
    assert line.endswith("...") and len(line.split("given ")[1]) == 60


def test_check_refuses_in_one_line_naming_every_difference_and_the_fix():
    check(RECORD, dict(RECORD), "the checkpoint x.pt", "use the training run's options")  # no difference, no error
    given = changed(languages=["en", "de"], model={**RECORD["model"], "encoder_layers": 3})
    with pytest.raises(HltmtConfigError) as refused:
        check(RECORD, given, "the checkpoint x.pt", "use the training run's options")
    message = str(refused.value)
    assert "\n" not in message
    assert message == (
        "the checkpoint x.pt does not fit: languages: checkpoint en,de,fr, given en,de; "
        "--encoder-layers: checkpoint 2, given 3: use the training run's options"
    )


def test_options_without_a_record_give_the_record_they_imply_with_the_older_fingerprints():
    old = options(**{OLD_DICTS: {"dict.en.txt": "a1" * 32}, OLD_VOCAB: {"symbols": 5, "sha256": "b2" * 32}})
    record = record_of_options(old)
    assert record["dictionaries"] == {"dict.en.txt": "a1" * 32} and record["vocabulary"]["symbols"] == 5
    assert record["model"]["encoder_layers"] == 2 and record["languages"] == ["en", "de", "fr"]
    assert record_of_options(vars(old)) == record  # the options as a dict (a checkpoint's cfg.model)


def complete(opts):
    """The record of ``opts`` as the plugin's task stores it (every required field)."""
    return {**build_record(opts, symbols=["<s>", "x", "__en__"]), "dictionaries": {"dict.en.txt": "a1" * 32}}


def test_the_stored_record_wins_and_edited_options_are_refused():
    written = complete(options())
    stored = options(**{RECORD_KEY: written})
    assert record_of_options(stored) == written
    overridden = options(dropout=0.3, **{RECORD_KEY: written})  # an option of no weight's meaning
    assert record_of_options(overridden) == written
    edited = options(encoder_layers=3, encoder_langtok="src", **{RECORD_KEY: written})
    with pytest.raises(HltmtInputError, match="changed after it was written") as refused:
        record_of_options(edited)
    assert "--encoder-layers: written 2, now 3" in str(refused.value)
    assert "--encoder-langtok: written tgt, now src" in str(refused.value)
    assert record_of_options(edited, edits=False) == written


def test_stored_options_are_read_from_cfg_model_or_legacy_args():
    model = options()
    assert stored_options({"cfg": {"model": model}}) is model
    assert stored_options({"cfg": {"model": {"encoder_layers": 4}}}).encoder_layers == 4
    assert stored_options({"args": model}) is model
    assert vars(stored_options({})) == {}
    stock = options(arch="transformer_hltmt_tiny", data="trained/bin")  # fairseq's transformer: no record
    record = record_of_state({"cfg": {"model": stock, "task": Namespace(_name="translation_multi_simple_epoch")}})
    assert record["model"]["encoder_layers"] == 2 and record[NO_RECORD] == {"trained_on": "trained/bin"}


def test_spm_coverage_is_the_share_of_the_dictionarys_pieces_the_model_makes():
    symbols = ["<s>", "<pad>", "</s>", "<unk>", "▁a", "▁b", "c", "d", "__en__", "madeupword0000"]
    assert spm_coverage(["▁a", "▁b", "c", "d", "e"], symbols) == 1.0
    assert spm_coverage(["▁a", "x"], symbols) == 0.25
    assert spm_coverage([], ["<s>"]) == 0.0


def test_the_record_of_a_data_folder_holds_its_dictionaries_and_the_sentencepiece_model(data_bin):
    from conftest import spm_of
    from hltmt_plugin.data_fingerprint import dictionary_fingerprint, sha256_file

    record = build_record(options(), data=data_bin, spm=spm_of(data_bin))
    assert record["dictionaries"] == dictionary_fingerprint(data_bin) and record["dictionaries"]
    assert record["spm"] == sha256_file(spm_of(data_bin)) and len(record["spm"]) == 64


VALID = {**RECORD, "dictionaries": {"dict.en.txt": "a1" * 32}, "vocabulary": {"symbols": 100, "sha256": "b2" * 32}}


@pytest.mark.parametrize(
    "stored, why",
    [
        ({}, "compatibility record is empty: a partial record"),
        ({**VALID, "marking": {}}, "field 'marking' must hold"),
        ({**VALID, "marking": {"--encoder-langtok": None}}, "field 'marking.--encoder-langtok' must be a string"),
        ({**VALID, "dictionaries": None}, "field 'dictionaries' must be a map, got null"),
        ({**VALID, "dictionaries": {}}, "field 'dictionaries' must hold at least 1"),
        ({**VALID, "dictionaries": {"../x": "a1" * 32}}, "is not of the expected form"),
        ({**VALID, "model": {"arch": None}}, "field 'model.arch' must be a string, got null"),
        ({**VALID, "model": {"arch": "x", "what": 1}}, "holds an unknown field 'what'"),
        ({**VALID, "model": {"arch": "x", "encoder_layers": {"a": 1}}}, "field 'model.encoder_layers' must be"),
        ({k: v for k, v in VALID.items() if k != "languages"}, "lacks 'languages'"),
        ({k: v for k, v in VALID.items() if k != "vocabulary"}, "lacks 'vocabulary'"),
        (None, "compatibility record must be a map, got null"),
        ({"marking": {"--encoder-langtok": "tgt"}}, "lacks 'model'"),
        ({**VALID, "vocabulary": 5}, "field 'vocabulary' must be a map, got a whole number"),
        ({**VALID, "model": "x"}, "field 'model' must be a map, got a string"),
        ({**VALID, "model": {"encoder_layers": 2}}, "field 'model' lacks 'arch'"),
        ({**VALID, "languages": "en,de"}, "field 'languages' must be a list"),
        ({**VALID, "spm": 7, "plugin_version": "0.3.0"}, "(written by hltmt_plugin 0.3.0): field 'spm' must be"),
        (["marking"], "must be a map, got a list"),
        ("x", "must be a map, got a string"),
    ],
)
def test_a_stored_record_empty_partial_or_of_wrong_types_is_one_line(stored, why):
    assert record_of_options(options(**{RECORD_KEY: VALID}), edits=False) == VALID
    with pytest.raises(HltmtInputError) as refused:
        record_of_options(options(**{RECORD_KEY: stored}))
    assert why in str(refused.value) and "\n" not in str(refused.value)
    assert str(refused.value).startswith("the checkpoint's compatibility record")


def test_older_records_of_wrong_types_are_one_line():
    with pytest.raises(HltmtInputError, match="vocabulary record"):
        record_of_options(options(**{OLD_VOCAB: {"symbols": "5", "sha256": "0" * 64}}))
    with pytest.raises(HltmtInputError, match="dictionaries record"):
        record_of_options(options(**{OLD_DICTS: ["dict.en.txt"]}))


def test_a_swapped_architecture_name_is_an_edit_of_the_stored_options():
    written = complete(options())
    for swapped in ({"arch": "transformer_hltmt_tiny"}, {"_name": "transformer_hltmt_tiny"}):
        with pytest.raises(HltmtInputError, match="--arch: written hltmt_transformer_tiny, now transformer_hltmt_tiny"):
            record_of_options(options(**swapped, **{RECORD_KEY: written}))
    assert record_of_options(options(_name="hltmt_transformer_tiny", **{RECORD_KEY: written})) == written


def test_the_record_names_the_plugin_version_that_wrote_it_and_never_compares_it():
    import hltmt_plugin

    record = build_record(options())
    assert record["plugin_version"] == hltmt_plugin.__version__
    assert mismatches(record, {**record, "plugin_version": "0.0.1"}) == []


# ---- closed unless proven open: a record complete or refused; only fairseq's own checkpoints have none
@pytest.mark.parametrize(
    "edit",
    [
        {"task": "hltmt_translation", "arch": "transformer_hltmt_tiny"},  # the plugin's task
        {},  # an architecture of the plugin's model (hltmt_transformer_tiny)
        {"arch": "transformer", VERSION_KEY: "0.2.0"},  # the plugin's version beside a removed record
        {"arch": "transformer", RECORD_KEY: None},  # a record set to null
    ],
)
def test_a_checkpoint_of_the_plugin_without_its_record_is_one_line(edit):
    opts = options(**edit)
    assert written_by_plugin(opts)
    with pytest.raises(HltmtInputError) as refused:
        record_of_options(opts, edits=False)
    message = str(refused.value)
    assert message.startswith("the checkpoint's compatibility record") and "\n" not in message
    assert ("is missing" in message) or ("must be a map, got null" in message)


def test_a_plugin_checkpoint_is_known_by_its_stored_task_too():
    stock = options(arch="transformer_hltmt_tiny")
    assert not written_by_plugin(stock) and no_record(record_of_options(stock))
    assert written_by_plugin(stock, task="hltmt_translation")
    with pytest.raises(HltmtInputError, match="is missing"):
        record_of_state({"cfg": {"model": stock, "task": {"_name": "hltmt_translation"}}})


def test_an_older_record_of_the_plugin_is_complete_or_one_line():
    with pytest.raises(HltmtInputError, match=r"older compatibility record \(hltmt_plugin < 0.2\) lacks 'vocabulary'"):
        record_of_options(options(**{OLD_DICTS: {"dict.en.txt": "a1" * 32}}))
    with pytest.raises(HltmtInputError, match="lacks 'languages'"):
        record_of_options(
            options(
                langs=None, **{OLD_DICTS: {"dict.en.txt": "a1" * 32}, OLD_VOCAB: {"symbols": 5, "sha256": "b" * 64}}
            )
        )


def stock_options():
    return options(arch="transformer_hltmt_tiny", task="translation_multi_simple_epoch", data="/trained/bin")


def test_a_checkpoint_without_a_record_is_served_with_one_warning_naming_both_data_folders(tmp_path, capsys):
    from hltmt_plugin.data_fingerprint import write_fingerprint

    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "dict.en.txt").write_text("a 1\nb 1\n", encoding="utf-8")
    record = record_of_options(stock_options())
    assert no_record(record) and "dictionaries" not in record and "vocabulary" not in record
    given = complete(options(arch="transformer_hltmt_tiny"))
    check(record, given, "checkpoint m.pt", "fix", data=str(folder))  # the fields its options give agree
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("hltmt_plugin: warning: checkpoint m.pt carries no compatibility record")
    assert f"trained on the data folder /trained/bin, given {folder}" in line
    assert "it has no dict_fingerprint.json, so nothing shows" in line
    write_fingerprint(str(folder))
    check(record, given, "checkpoint m.pt", "fix", data=str(folder))
    assert (
        capsys.readouterr().err.count(
            "its dictionaries are unchanged since binarization (its dict_fingerprint.json), but nothing shows"
        )
        == 1
    )
    with pytest.raises(HltmtConfigError, match="languages: checkpoint en,de,fr, given en"):
        check(record, {**given, "languages": ["en"]}, "checkpoint m.pt", "fix", data=str(folder))
    assert capsys.readouterr().err == ""  # refused: no warning before the error line


def test_a_checkpoint_without_a_record_is_refused_where_the_data_folders_fingerprint_says_it_changed(tmp_path, capsys):
    from hltmt_plugin.data_fingerprint import write_fingerprint

    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "dict.en.txt").write_text("a 1\nb 1\n", encoding="utf-8")
    write_fingerprint(str(folder))
    (folder / "dict.en.txt").write_text("b 1\na 1\n", encoding="utf-8")  # two rows swapped after binarizing
    with pytest.raises(HltmtInputError) as refused:
        check(record_of_options(stock_options()), complete(options()), "checkpoint m.pt", "fix", data=str(folder))
    message = str(refused.value)
    assert message.startswith("checkpoint m.pt carries no compatibility record") and "\n" not in message
    assert "trained on /trained/bin" in message and "dict.en.txt changed since the data was binarized" in message
    assert capsys.readouterr().err == ""


def test_a_checkpoint_with_a_record_is_compared_on_every_required_field():
    record = complete(options())
    with pytest.raises(HltmtConfigError, match="vocabulary: none in the given record"):
        check(record, {k: v for k, v in record.items() if k != "vocabulary"}, "the checkpoint", "fix")
