"""fairseq-train on a save dir: one trainer at a time, stale temporary files removed, and a run
whose checkpoint_last.pt is missing or broken resumes from the newest checkpoint that opens."""

import subprocess
import time

from conftest import cli, run, train_args

COMMON = [
    "--criterion",
    "label_smoothed_cross_entropy",
    "--optimizer",
    "adam",
    "--lr",
    "1e-3",
    "--max-tokens",
    "1000",
    "--hlt-stage",
    "all",
    "--slp-language-specific",
    "--num-workers",
    "0",
    "--log-interval",
    "1",
]


def train(data_bin, save, *extra):
    return run(
        [cli("fairseq-train"), *train_args(data_bin, *COMMON, "--save-dir", str(save), *extra)],
        env_extra={"OMP_NUM_THREADS": "1"},
    )


def test_a_missing_or_broken_last_checkpoint_resumes_from_the_newest_that_opens(data_bin, tmp_path):
    save = tmp_path / "s"
    first = train(data_bin, save, "--max-update", "4", "--save-interval-updates", "2", "--keep-interval-updates", "5")
    assert first.returncode == 0, first.stderr[-2000:]
    assert (save / "checkpoint_1_4.pt").exists()
    (save / "checkpoint_last.pt").unlink()
    (save / "checkpoint_last.pt.tmp").write_bytes(b"half")  # fairseq's temp from a killed save
    (save / ".checkpoint_last.pt.x1.tmp").write_bytes(b"half")  # the plugin's
    again = train(data_bin, save, "--max-update", "6")
    log = again.stdout + again.stderr
    assert again.returncode == 0, log[-2000:]
    assert "checkpoint_last.pt is missing: resuming from checkpoint_1_4.pt" in log
    assert "Loaded checkpoint" in log and "num_updates=5" in log  # went on from update 4, not from scratch
    assert not (save / "checkpoint_last.pt.tmp").exists() and not (save / ".checkpoint_last.pt.x1.tmp").exists()
    (save / "checkpoint_last.pt").write_bytes(b"PK\x03\x04 cut")  # broken
    third = train(data_bin, save, "--max-update", "7")
    assert third.returncode == 0, third.stderr[-2000:]
    assert "checkpoint_last.pt is broken: resuming from" in third.stdout + third.stderr


def test_a_second_trainer_on_a_save_dir_in_use_is_refused_naming_the_holder(data_bin, tmp_path):
    save = tmp_path / "s"
    cmd = [cli("fairseq-train"), *train_args(data_bin, *COMMON, "--save-dir", str(save), "--max-update", "400")]
    first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (save / ".hltmt_train.lock").exists():
            time.sleep(0.2)
        assert (save / ".hltmt_train.lock").exists()
        second = train(data_bin, save, "--max-update", "1")
        assert second.returncode != 0
        assert f"is in use by another training process (pid {first.pid}" in second.stderr, second.stderr[-1500:]
    finally:
        first.kill()
        first.wait()
    third = train(data_bin, save, "--max-update", "1", "--restore-file", "x.pt")  # the holder is gone
    assert third.returncode == 0, third.stderr[-2000:]
    assert not (save / ".hltmt_train.lock").exists()  # released at exit
