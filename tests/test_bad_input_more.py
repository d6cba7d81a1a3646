"""More of the bad-input table (docs/bad-input.md), through the real command lines: the update
count after a reset, --train-only that trains nothing, broken binarized data, crafted
checkpoints, a checkpoint without --user-dir, over-long lines at decoding, and fairseq's
warning noise in the plugin's scripts."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import PAIRS, PLUGIN, ROOT, cli, run, train_args

TRAIN = ["--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--optimizer", "adam",
         "--lr", "2e-3", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "10", "--max-tokens", "1500",
         "--log-interval", "1", "--no-epoch-checkpoints", "--sampling-method", "temperature",
         "--sampling-temperature", "5", "--seed", "3", "--num-workers", "0"]
RESET = ["--reset-optimizer", "--reset-dataloader", "--reset-meters"]


def assert_clear(done, message, prefix="hltmt_plugin: error:"):
    """One line naming the problem, a non-zero exit, no traceback."""
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-2000:]
    assert prefix in done.stderr and message in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in out, out[-3000:]


def updates(log):
    return [int(m.group(1)) for m in re.finditer(r"train_inner .*?num_updates=(\d+)", log)]


# ---- 1. the stage line counts as fairseq counts after --reset-optimizer -------------------
def test_stage_line_counts_updates_as_fairseq_after_a_reset(data_bin, trained, tmp_path):
    ckpt, _ = trained  # saved after 30 updates of stage high
    done = run([cli("fairseq-train"), *train_args(
        data_bin, *TRAIN, "--save-dir", str(tmp_path / "s"), "--restore-file", ckpt, *RESET,
        "--high-stage-updates", "2", "--max-update", "3")])
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    assert "(epoch 1 @ 0 updates)" in log  # fairseq's own count restarts
    assert "HLT-MT stage high (epoch 1, update 0)" in log, log[-3000:]
    assert "fairseq's update count restarts at 0 (--reset-optimizer)" in log
    # --high-stage-updates counts fairseq's updates: stage all begins after update 2 of this run
    assert "HLT-MT stage all (epoch 2, update 2)" in log, log[-3000:]
    assert updates(log) == [1, 2, 3]


# ---- 2. --train-only that trains nothing: one line before the first update -------------------
def test_train_only_gate_on_a_stage_all_model_is_one_line(data_bin, trained, tmp_path):
    ckpt, _ = trained
    done = run([cli("fairseq-train"), *train_args(
        data_bin, *TRAIN, "--save-dir", str(tmp_path / "s"), "--restore-file", ckpt, *RESET, "--hlt-stage", "all",
        "--train-only", "gate", "--max-update", "3")])
    assert_clear(done, "--train-only gate trains nothing in this run: the gate learns only in stage high; in stage "
                       "all the routing map is fixed and the gate frozen")
    assert updates(done.stdout) == []


def test_train_only_gate_across_the_stage_switch_is_one_line(data_bin, tmp_path):
    done = run([cli("fairseq-train"), *train_args(
        data_bin, *TRAIN, "--save-dir", str(tmp_path / "s"), "--high-stage-updates", "2", "--train-only", "gate",
        "--max-update", "4")])
    assert_clear(done, "--train-only gate trains nothing in stage all, which this run enters at update 2 "
                       "(--high-stage-updates)")
    assert updates(done.stdout) == []


def test_train_only_adapters_of_a_language_stage_high_never_trains_is_one_line(data_bin, tmp_path):
    done = run([cli("fairseq-train"), *train_args(
        data_bin, *TRAIN, "--save-dir", str(tmp_path / "s"), "--language-adapters", "--enable-lang-ids",
        "--adapter-langs", "en,de,fr,gu,hi", "--train-only", "adapters:hi", "--max-update", "2")])
    assert_clear(done, "--train-only adapters:hi trains nothing in this run: no language of the directions of "
                       "stage high (en-de,en-fr,de-en) is hi")


def test_train_only_a_group_that_some_batches_do_not_reach_trains(data_bin, tmp_path):
    """The first batches of this run go to de and fr only (the pool): the universal layer is
    not in their graph, which was fairseq's `element 0 of tensors does not require grad`."""
    done = run([cli("fairseq-train"), *train_args(
        data_bin, *TRAIN, "--save-dir", str(tmp_path / "s"), "--hlt-stage", "high", "--train-only", "universal",
        "--max-update", "4")])
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    assert updates(log) == [1, 2, 3, 4]


# ---- 3. truncated or empty binarized files: one line naming the file ----------------------
def broken_copy(data_bin, tmp_path, name, cut):
    """A copy of the data folder whose file ``name`` is cut to ``cut`` bytes."""
    folder = tmp_path / "bin"
    shutil.copytree(data_bin, folder)
    with open(folder / name, "r+b") as f:
        f.truncate(cut)
    return str(folder)


GENERATE = ["--user-dir", PLUGIN, "--task", "hltmt_translation", "--langs", "en,de,fr,gu,hi", "--lang-pairs", PAIRS,
            "--encoder-langtok", "tgt", "-s", "en", "-t", "de", "--cpu", "--gen-subset", "test", "--beam", "1"]


@pytest.mark.parametrize("name, cut, message", [
    ("test.en-de.de.bin", 1000, "test.en-de.de.bin is truncated: its index lists 37 sentences in"),
    ("test.en-de.en.bin", 0, "test.en-de.en.bin is empty: its index lists 37 sentences"),
    ("test.en-de.de.idx", 0, "test.en-de.de.idx is empty (0 bytes), not a fairseq index"),
    ("test.en-de.en.idx", 100, "test.en-de.en.idx is truncated: an index of 37 sentences has 470 bytes, this one "
                               "100"),
])
def test_broken_binarized_files_are_one_line_naming_the_file(data_bin, trained, tmp_path, name, cut, message):
    folder = broken_copy(data_bin, tmp_path, name, cut)
    done = run([cli("fairseq-generate"), folder, *GENERATE, "--path", trained[0]])
    assert_clear(done, message)
    assert "binarize the data again" in done.stderr


def test_a_truncated_training_file_is_one_line_before_the_first_update(data_bin, tmp_path):
    folder = broken_copy(data_bin, tmp_path, "train.en-fr.fr.bin", 5000)
    done = run([cli("fairseq-train"), *train_args(folder, *TRAIN, "--save-dir", str(tmp_path / "s"),
                                                  "--max-update", "2")])
    assert_clear(done, "train.en-fr.fr.bin is truncated: its index lists")
    assert updates(done.stdout) == []
