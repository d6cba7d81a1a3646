"""hltmt_plugin/hub/loading.py's load_model: the one way a model is rebuilt from a checkpoint
(the translator, the exports, hltmt-adapters, hltmt-train-language-adapter, hltmt-report's
gate): the checkpoint's own weights and options, the data folder a user names, and its one-line
errors; load_for_translation: a checkpoint loaded for the translator and the exports."""

import os
import shutil

import pytest
import torch

from conftest import ROOT, assert_one_error_line, cli, run
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.hub.loading import LoadedCheckpoint, load_for_translation, load_model


@pytest.mark.fast
def test_a_missing_checkpoint_is_one_line_when_it_must_exist(tmp_path):
    path = str(tmp_path / "nowhere.pt")
    with pytest.raises(HltmtInputError, match=f"^checkpoint {path} does not exist$"):
        load_model(path, must_exist=True)


def test_the_rebuilt_model_is_the_checkpoints_own(trained):
    from hltmt_plugin.compat.safe_loading import load_state
    from hltmt_plugin.models.hltmt_transformer import plugin_model

    model, cfg, task = load_model(trained[0])
    assert plugin_model(model) is model and model.slp is not None
    assert cfg.task._name == "hltmt_translation" and list(task.langs) == ["en", "de", "fr", "gu", "hi"]
    stored = load_state(trained[0])["model"]
    mine = model.state_dict()
    assert sorted(stored) == sorted(mine)
    assert all(torch.equal(stored[k], mine[k]) for k in stored)


def test_the_data_folder_given_replaces_the_stored_one(trained, data_bin, tmp_path):
    moved = shutil.copytree(data_bin, tmp_path / "moved")
    _, cfg, _ = load_model(trained[0], str(moved))
    assert cfg.task.data == str(moved)


def test_a_data_folder_without_its_dictionaries_is_one_line(trained, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(HltmtConfigError, match=f"^{empty} has no dictionary for de,en,fr,gu,hi"):
        load_model(trained[0], str(empty))  # the plugin's task says so before fairseq looks


def missing_dictionary(*args, **kwargs):
    raise FileNotFoundError(2, "No such file or directory", "data/dict.en.txt")


@pytest.mark.fast
def test_a_file_fairseq_cannot_find_is_one_line_naming_data(tmp_path, monkeypatch):
    """Another task's model (e.g. translation_multi_simple_epoch) reads its dictionaries itself."""
    from fairseq import checkpoint_utils

    from hltmt_plugin.compat import safe_loading

    path = tmp_path / "checkpoint.pt"
    path.write_bytes(b"")
    monkeypatch.setattr(checkpoint_utils, "load_model_ensemble_and_task", missing_dictionary)
    monkeypatch.setattr(safe_loading, "load_checkpoint", lambda *args: {})  # (the state, read before)
    with pytest.raises(HltmtInputError) as error:
        load_model(str(path), must_exist=True)
    assert str(error.value) == (
        f"cannot rebuild the model of {path}: [Errno 2] No such file or directory: 'data/dict.en.txt' "
        "(give --data DIR, the binarized data folder with its dict.*.txt)"
    )
    with pytest.raises(FileNotFoundError):  # hltmt-report's gate: fairseq's own error
        load_model(str(path), explain_missing=False)


def test_a_checkpoint_loaded_for_translation_is_the_translators(translator, hltmt, data_bin):
    from conftest import spm_of

    loaded, folder = load_for_translation(hltmt)
    assert isinstance(loaded, LoadedCheckpoint) and loaded.path == hltmt and folder == data_bin
    assert loaded.spm == translator.spm == spm_of(data_bin)
    assert not loaded.model.training and loaded.ours is loaded.model
    assert loaded.langs == translator.langs == ["en", "de", "fr", "gu", "hi"]
    assert loaded.dictionary.symbols == translator.dictionary.symbols
    positions = (loaded.max_source_positions, loaded.max_target_positions)
    assert positions == (translator.max_source_positions, translator.max_target_positions)
    assert loaded.languages is loaded.model.encoder.languages
    assert [loaded.languages.token(lang) for lang in loaded.langs] == [
        translator.languages.token(lang) for lang in translator.langs
    ]
    mine, theirs = loaded.model.state_dict(), translator.model.state_dict()
    assert sorted(mine) == sorted(theirs) and all(torch.equal(mine[k], theirs[k]) for k in mine)


def test_what_is_not_a_checkpoint_path_is_one_line(tmp_path):
    with pytest.raises(HltmtConfigError, match="^checkpoint must be a path, got int$"):
        load_for_translation(3)
    with pytest.raises(HltmtInputError, match=f"^checkpoint {tmp_path} does not exist$"):
        load_for_translation(tmp_path)  # a folder (an export folder is the translator's to serve)


# ---- a checkpoint written without the plugin (the committed mnmt.pt: fairseq's transformer under
# translation_multi_simple_epoch): no record, so its data folder's own fingerprint decides
MODELS = os.path.join(ROOT, "docs", "results", "cpu-study", "models")
MNMT = os.path.join(MODELS, "mnmt.pt")


def data_copy(tmp_path, swap: bool):
    """The committed models' data folder (dictionaries, fingerprint, sentencepiece model), copied;
    with ``swap``, two rows of every dictionary swapped after binarization."""
    folder = tmp_path / ("swapped" if swap else "intact")
    folder.mkdir()
    for name in os.listdir(MODELS):
        if name.startswith("dict") or name == "spm.model":
            shutil.copyfile(os.path.join(MODELS, name), folder / name)
    if swap:
        for name in os.listdir(folder):
            if name.startswith("dict.") and name.endswith(".txt"):
                lines = (folder / name).read_text(encoding="utf-8").splitlines(keepends=True)
                lines[10], lines[11] = lines[11], lines[10]
                (folder / name).write_text("".join(lines), encoding="utf-8")
    return str(folder)


def translate_mnmt(data):
    return run(
        [cli("hltmt-translate"), "--checkpoint", MNMT, "--data", data, "--src", "en", "--tgt", "fr", "--beam", "1"],
        input="Open the file.\nSave the file.\n",
    )


def test_the_committed_mnmt_checkpoint_on_other_dictionaries_of_the_same_size_is_one_line(tmp_path):
    swapped = data_copy(tmp_path, swap=True)
    with pytest.raises(HltmtInputError) as refused:
        load_for_translation(MNMT, data=swapped)
    message = str(refused.value)
    assert message.startswith(f"checkpoint {MNMT} carries no compatibility record") and "\n" not in message
    assert "(written without hltmt_plugin; trained on " in message  # the folder the study stored
    assert f"the data folder {swapped} changed since it was binarized" in message
    assert "dict.cs.txt changed since the data was binarized" in message
    done = translate_mnmt(swapped)
    assert_one_error_line(done, "carries no compatibility record", "changed since it was binarized")
    assert done.stdout == "" and "warning" not in done.stderr


def test_the_committed_mnmt_checkpoint_on_its_own_dictionaries_is_one_warning_and_translations(tmp_path):
    intact = data_copy(tmp_path, swap=False)
    done = translate_mnmt(intact)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len([line for line in done.stdout.splitlines() if line.strip()]) == 2
    [warning] = [line for line in done.stderr.splitlines() if "warning" in line]
    assert warning.startswith(f"hltmt_plugin: warning: checkpoint {MNMT} carries no compatibility record")
    assert f", given {intact}; its dictionaries are unchanged since binarization (its dict_fingerprint.json)" in warning
    assert "but nothing shows they are the ones the model learned" in warning
    assert "trained on the data folder " in warning
    os.remove(os.path.join(intact, "dict_fingerprint.json"))
    done = translate_mnmt(intact)
    assert done.returncode == 0, done.stderr[-3000:]
    [warning] = [line for line in done.stderr.splitlines() if "warning" in line]
    assert (
        "it has no dict_fingerprint.json, so nothing shows its dictionaries are the ones the model learned" in warning
    )
