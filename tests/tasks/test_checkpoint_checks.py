"""The compatibility record on the task's routes (hltmt_plugin/tasks/checkpoint_checks.py) beyond
the route-by-hazard table of tests/test_hazards.py: a resume with another criterion, a resume
with the high-resource languages in another order (goes on) or other ones (refused), a beam
larger than the vocabulary, a sentencepiece model of other pieces, the record a new
checkpoint stores, and a checkpoint of the plugin whose record was removed."""

import shutil

import pytest
import torch

from conftest import DECODE_EN_DE, LIKE_TRAINED, assert_one_error_line, cli, run, spm_of, train_args, updates
from hltmt_plugin.compat.safe_loading import load_state
from hltmt_plugin.errors import HltmtInputError


def test_a_new_checkpoint_stores_the_record_of_its_data(data_bin, trained):
    from hltmt_plugin.compatibility import RECORD_KEY
    from hltmt_plugin.data_fingerprint import dictionary_fingerprint

    options = load_state(trained[0])["cfg"]["model"]
    record = getattr(options, RECORD_KEY)
    assert record["dictionaries"] == dictionary_fingerprint(data_bin)
    assert record["languages"] == ["en", "de", "fr", "gu", "hi"]
    assert record["marking"]["--encoder-langtok"] == "tgt" and record["model"]["high_resource_langs"] == "de,fr"
    assert len(record["spm"]) == 64


def test_resuming_with_another_criterion_is_one_line(data_bin, trained, tmp_path):
    save = tmp_path / "save"
    save.mkdir()
    shutil.copyfile(trained[0], save / "checkpoint_last.pt")
    args = train_args(data_bin, *LIKE_TRAINED, "--save-dir", str(save), "--max-update", "31")
    args[args.index("label_smoothed_cross_entropy")] = "cross_entropy"
    args.remove("--label-smoothing"), args.remove("0.1")
    done = run([cli("fairseq-train"), *args])
    assert_one_error_line(
        done, "does not fit: criterion: checkpoint LabelSmoothedCrossEntropyCriterion, given CrossEntropyCriterion"
    )


def test_resuming_with_the_high_resource_languages_in_another_order_goes_on_and_other_languages_are_one_line(
    data_bin, trained, tmp_path
):
    """The router reads the checkpoint's map by language name: a resume given the same languages
    in another order trains on; other languages are refused before fairseq reads the checkpoint."""
    save = tmp_path / "save"
    save.mkdir()
    shutil.copyfile(trained[0], save / "checkpoint_last.pt")
    args = train_args(data_bin, *LIKE_TRAINED, "--save-dir", str(save), "--max-update", "31")
    high = args.index("--high-resource-langs") + 1
    assert args[high] == "de,fr"
    args[high] = "fr,de"
    done = run([cli("fairseq-train"), *args])
    assert done.returncode == 0, done.stderr[-3000:]
    assert updates(done.stdout + done.stderr) == [31]
    other = tmp_path / "other"
    other.mkdir()
    shutil.copyfile(trained[0], other / "checkpoint_last.pt")
    args[args.index(str(save))] = str(other)
    args[high] = "de,gu"
    assert_one_error_line(
        run([cli("fairseq-train"), *args]), "does not fit: --high-resource-langs: checkpoint de,fr, given de,gu"
    )


def test_a_beam_larger_than_the_vocabulary_is_refused(data_bin, trained):
    done = run([cli("fairseq-generate"), data_bin, *DECODE_EN_DE[:-2], "--beam", "100000", "--path", trained[0]])
    assert_one_error_line(done, "--beam 100000 is larger than the model's vocabulary")


def test_a_sentencepiece_model_of_other_pieces_is_refused(data_bin, trained, tmp_path):
    import sentencepiece as spm

    text = tmp_path / "text.txt"
    text.write_text("".join(f"zq{i} xv{i % 7} kw{i % 13}\n" for i in range(3000)))
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(tmp_path / "other"), vocab_size=60, minloglevel=2)
    done = run(
        [
            cli("hltmt-translate"),
            "--checkpoint",
            trained[0],
            "--spm",
            str(tmp_path / "other.model"),
            "--src",
            "en",
            "--tgt",
            "de",
        ],
        input="The file is open.\n",
    )
    assert_one_error_line(done, "is not the one the checkpoint was trained with")
    assert spm_of(data_bin)


def _edited(path, out, edit):
    """A copy of checkpoint ``path`` at ``out`` whose stored model options ``edit`` changed."""
    import hltmt_plugin  # noqa: F401  (the weights-only allowlist of fairseq checkpoints)

    state = load_state(path)
    edit(state["cfg"]["model"])
    torch.save(state, out)
    return str(out)


def test_a_malformed_stored_record_is_one_line_on_every_route(data_bin, trained, tmp_path):
    empty = _edited(trained[0], tmp_path / "empty.pt", lambda m: setattr(m, "hltmt_compat", {}))
    wrong = _edited(trained[0], tmp_path / "wrong.pt", lambda m: m.hltmt_compat.__setitem__("vocabulary", 5))
    interactive = [cli("fairseq-interactive"), data_bin, *DECODE_EN_DE[:-4], "--path", wrong]
    for done, why in (
        (run([cli("fairseq-generate"), data_bin, *DECODE_EN_DE, "--path", empty]), "record is empty"),
        (run(interactive, input="Hello\n"), "field 'vocabulary' must be a map"),
        (run([cli("hltmt-export"), "--checkpoint", wrong, "--out", str(tmp_path / "x")]), "'vocabulary'"),
        (
            run([cli("hltmt-average-checkpoints"), "--inputs", trained[0], empty, "--output", str(tmp_path / "a.pt")]),
            "empty",
        ),
    ):
        assert_one_error_line(done, "the checkpoint's compatibility record", why)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.pt", "wrong.pt"]


def test_an_architecture_name_swapped_for_another_of_the_same_shapes_is_one_line(data_bin, trained, tmp_path):
    def swap(model, record=False):
        model.arch = model._name = "transformer_hltmt_tiny"  # fairseq's transformer of the same sizes
        if record:
            model.hltmt_compat["model"]["arch"] = "transformer_hltmt_tiny"

    options = _edited(trained[0], tmp_path / "options.pt", swap)
    done = run([cli("fairseq-generate"), data_bin, *DECODE_EN_DE, "--path", options])
    assert_one_error_line(done, "--arch: written hltmt_transformer_tiny, now transformer_hltmt_tiny")
    both = _edited(trained[0], tmp_path / "both.pt", lambda m: swap(m, record=True))
    done = run([cli("fairseq-generate"), data_bin, *DECODE_EN_DE, "--path", both])
    assert_one_error_line(done, "use --high-resource-langs (de,fr), which only hltmt_transformer models have")


@pytest.mark.parametrize("how", ["deleted", "null"])
def test_a_plugin_checkpoint_whose_record_was_removed_is_one_line_in_process_and_by_every_command(
    how, data_bin, trained, tmp_path
):
    """Not read as a checkpoint of fairseq's own (whose options alone would be compared): the
    plugin wrote it, so its record must be there."""
    from hltmt_plugin.compatibility import RECORD_KEY, VERSION_KEY
    from hltmt_plugin.hub.loading import load_for_translation

    def remove(model):
        delattr(model, VERSION_KEY)  # (no witness left but the task and the architecture)
        if how == "deleted":
            delattr(model, RECORD_KEY)
        else:
            setattr(model, RECORD_KEY, None)

    path = _edited(trained[0], tmp_path / f"{how}.pt", remove)
    why = "record is missing" if how == "deleted" else "record must be a map, got null"
    with pytest.raises(HltmtInputError, match=why):
        load_for_translation(path)
    translate = [cli("hltmt-translate"), "--checkpoint", path, "--src", "en", "--tgt", "de"]
    generate = [cli("fairseq-generate"), data_bin, *DECODE_EN_DE, "--path", path]
    average = [cli("hltmt-average-checkpoints"), "--inputs", trained[0], path, "--output", str(tmp_path / "a.pt")]
    for done in (run(translate, input="Hello.\n"), run(generate), run(average)):
        assert_one_error_line(done, "the checkpoint's compatibility record", why)
    assert "warning" not in run(translate, input="Hello.\n").stderr


def test_the_stamp_stores_the_record_of_a_translation_task_once_and_leaves_other_tasks(data_bin):
    from argparse import Namespace
    from types import SimpleNamespace

    from hltmt_plugin.compatibility import RECORD_KEY, VERSION_KEY, record_of_options
    from hltmt_plugin.tasks.checkpoint_checks import stamp_checkpoint

    dictionary = SimpleNamespace(symbols=["<s>", "<pad>", "</s>", "<unk>", "a"])
    bilingual = SimpleNamespace(cfg=Namespace(data=data_bin, source_lang="en", target_lang="de"))
    bilingual.source_dictionary = dictionary
    options = Namespace(arch="transformer", task="translation", encoder_layers=2)
    stamp_checkpoint(SimpleNamespace(cfg=SimpleNamespace(model=options), task=bilingual))
    record = getattr(options, RECORD_KEY)
    assert record["languages"] == ["en", "de"] and record["vocabulary"]["symbols"] == 5
    assert record_of_options(options) == record and getattr(options, VERSION_KEY)
    stamp_checkpoint(SimpleNamespace(cfg=SimpleNamespace(model=options), task=None))  # stored once: kept
    assert getattr(options, RECORD_KEY) is record
    language_model = SimpleNamespace(cfg=Namespace(data=data_bin), source_dictionary=dictionary)
    plain = Namespace(arch="transformer_lm")
    stamp_checkpoint(SimpleNamespace(cfg=SimpleNamespace(model=plain), task=language_model))  # names no languages
    assert not hasattr(plain, RECORD_KEY)
