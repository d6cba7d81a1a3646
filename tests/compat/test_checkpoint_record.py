"""Every checkpoint fairseq writes while the plugin is loaded carries the compatibility record,
whatever the task (hltmt_plugin/compat/checkpoint_record.py): the stamp runs before each of
fairseq's checkpoint writes, and fairseq's own multilingual task trained with ``--user-dir`` (the
MNMT baseline) stores the record the plugin's task stores, compared by every route as the
plugin's."""

import os
import shutil
from types import SimpleNamespace

import pytest
import torch

from conftest import LANGS, PAIRS, PLUGIN, assert_one_error_line, cli, run, spm_of
from hltmt_plugin.compat import checkpoint_record


def test_the_stamp_runs_before_every_checkpoint_write_and_is_installed_once(monkeypatch):
    calls = []
    utils = SimpleNamespace(save_checkpoint=lambda cfg, trainer, epoch_itr, val_loss: calls.append(("save", trainer)))
    monkeypatch.setattr(checkpoint_record, "_stamp", None)
    checkpoint_record.install(utils)
    first = utils.save_checkpoint
    checkpoint_record.install(utils)
    assert utils.save_checkpoint is first and first.hltmt_record
    checkpoint_record.stamp_with(lambda trainer: calls.append(("stamp", trainer)))
    utils.save_checkpoint("cfg", "trainer", None, None)
    assert calls == [("stamp", "trainer"), ("save", "trainer")]


@pytest.fixture(scope="module")
def baseline(data_bin, tmp_path_factory):
    """fairseq's transformer under fairseq's own translation_multi_simple_epoch, with --user-dir
    (the MNMT baseline), one update."""
    save = tmp_path_factory.mktemp("mnmt")
    done = run(
        [
            cli("fairseq-train"),
            data_bin,
            "--user-dir",
            PLUGIN,
            "--task",
            "translation_multi_simple_epoch",
            "--arch",
            "transformer_hltmt_tiny",
            "--langs",
            LANGS,
            "--lang-pairs",
            PAIRS,
            "--encoder-langtok",
            "tgt",
            "--cpu",
            "--optimizer",
            "adam",
            "--lr",
            "1e-3",
            "--max-tokens",
            "1500",
            "--max-update",
            "1",
            "--disable-validation",
            "--no-save-optimizer-state",
            "--no-epoch-checkpoints",
            "--save-dir",
            str(save),
        ]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return str(save / "checkpoint_last.pt")


def test_the_mnmt_baseline_trained_with_the_plugin_carries_the_record_the_plugins_task_stores(baseline, trained):
    from hltmt_plugin.compat.safe_loading import load_state
    from hltmt_plugin.compatibility import RECORD_KEY, VERSION_KEY, record_of_state

    mine, plugins = load_state(baseline), load_state(trained[0])
    record, theirs = getattr(mine["cfg"]["model"], RECORD_KEY), getattr(plugins["cfg"]["model"], RECORD_KEY)
    for field in ("dictionaries", "vocabulary", "languages", "marking", "spm", "plugin_version"):
        assert record[field] == theirs[field], field
    assert record["model"]["arch"] == "transformer_hltmt_tiny"
    assert getattr(mine["cfg"]["model"], VERSION_KEY) == record["plugin_version"]
    assert record_of_state(mine) == record  # read back complete, as the plugin's


def swapped_copy(data_bin, tmp_path):
    """A copy of the data folder with two rows swapped in every dictionary, after binarizing (its
    fingerprint left as it was), and the sentencepiece model where hltmt-prepare-data puts it."""
    folder = tmp_path / "copy" / "bin"
    shutil.copytree(data_bin, folder)
    shutil.copytree(os.path.dirname(spm_of(data_bin)), tmp_path / "copy" / "spm")
    for name in os.listdir(folder):
        if name.startswith("dict.") and name.endswith(".txt"):
            lines = (folder / name).read_text(encoding="utf-8").splitlines(keepends=True)
            lines[10], lines[11] = lines[11], lines[10]
            (folder / name).write_text("".join(lines), encoding="utf-8")
    return folder


def test_the_mnmt_baselines_record_is_compared_as_the_plugins(baseline, data_bin, tmp_path):
    """Its record, not the fingerprint alone: the dictionaries by content, also with the data
    folder's fingerprint made anew after the swap."""
    from hltmt_plugin.data_fingerprint import write_fingerprint

    folder = swapped_copy(data_bin, tmp_path)
    write_fingerprint(str(folder))
    done = run(
        [cli("hltmt-translate"), "--checkpoint", baseline, "--data", str(folder), "--src", "en", "--tgt", "de"],
        input="Hello.\n",
    )
    assert_one_error_line(done, f"checkpoint {baseline} does not fit: dictionaries: dict.de.txt")
    assert "warning" not in done.stderr


def test_the_mnmt_baseline_with_its_record_removed_is_refused(baseline, tmp_path):
    from hltmt_plugin.compat.safe_loading import load_state
    from hltmt_plugin.compatibility import RECORD_KEY

    state = load_state(baseline)
    delattr(state["cfg"]["model"], RECORD_KEY)  # the plugin's version stays beside it
    torch.save(state, tmp_path / "removed.pt")
    done = run(
        [cli("hltmt-translate"), "--checkpoint", str(tmp_path / "removed.pt"), "--src", "en", "--tgt", "de"],
        input="Hello.\n",
    )
    assert_one_error_line(done, "the checkpoint's compatibility record is missing", "written by hltmt_plugin")
