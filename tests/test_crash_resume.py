"""A training run killed with SIGKILL resumes from checkpoint_last.pt with its stage, map,
routing draws, sampler and LR schedule intact; checkpoint copies are atomic."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import cli, run, train_args
from fairseq.file_io import PathManager

import hltmt_plugin  # noqa: F401  (makes fairseq's checkpoint copies atomic)

COMMON = ["--criterion", "hltmt_cross_entropy", "--label-smoothing", "0.1", "--optimizer", "adam", "--lr", "2e-3",
          "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "5", "--max-tokens", "1000", "--log-interval", "1",
          "--no-epoch-checkpoints", "--sampling-method", "temperature", "--sampling-temperature", "5", "--seed", "4",
          "--num-workers", "0", "--high-stage-updates", "6", "--save-interval-updates", "4",
          "--keep-interval-updates", "1", "--slp-hard-prob", "0.5"]
ENV = {"OMP_NUM_THREADS": "1"}


def losses(text):
    return {int(m.group(2)): m.group(1) for m in re.finditer(r" loss=([\d.]+),.*?num_updates=(\d+)", text)}


def test_sigkill_then_resume_matches_an_uninterrupted_run(data_bin, tmp_path):
    straight = run([cli("fairseq-train"), *train_args(data_bin, *COMMON, "--save-dir", str(tmp_path / "a"),
                                                      "--max-update", "14")], env_extra=ENV)
    assert straight.returncode == 0, straight.stderr[-2000:]
    reference = losses(straight.stdout + straight.stderr)
    assert sorted(reference) == list(range(1, 15))

    save = tmp_path / "b"
    cmd = [cli("fairseq-train"), *train_args(data_bin, *COMMON, "--save-dir", str(save), "--max-update", "14")]
    log_path = tmp_path / "killed.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, **ENV))
        deadline = time.time() + 240
        # kill once update 8's checkpoint is written (past the stage switch at 6), mid-run
        while time.time() < deadline and not re.search(r"Saved checkpoint .*@ 8 updates", open(log_path).read()):
            time.sleep(0.05)
        time.sleep(0.3)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    killed_log = open(log_path).read()
    assert proc.returncode == -signal.SIGKILL and "@ 8 updates" in killed_log
    done_before = max(losses(killed_log))
    assert done_before < 14

    resumed = run(cmd, env_extra=ENV)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    out = resumed.stdout + resumed.stderr
    assert "Loaded checkpoint" in out
    after = losses(out)
    first = min(after)
    assert first >= 9  # resumed from a checkpoint at update 8 or later, not from scratch
    for update in range(first, 15):
        assert after[update] == reference[update], update
    # the map fixed at update 6 in the killed run is the map the resumed run trains with
    assert re.search(r"HLT-MT stage all \(epoch \d+, update \d+\): routing map \(fixed\)", out)


def test_a_copy_interrupted_midway_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    src, dst = tmp_path / "new.pt", tmp_path / "checkpoint_last.pt"
    src.write_bytes(b"new" * 1000)
    dst.write_bytes(b"old")
    import shutil

    def dying_copy(a, b, *args, **kwargs):
        with open(b, "wb") as f:
            f.write(b"ne")  # half-written
        raise KeyboardInterrupt  # the process dies here

    monkeypatch.setattr(shutil, "copyfile", dying_copy)
    with pytest.raises(KeyboardInterrupt):
        PathManager.copy(str(src), str(dst), overwrite=True)
    assert dst.read_bytes() == b"old"
