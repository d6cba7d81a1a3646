"""fairseq's checkpoint writes and copies under the plugin: whole or not at all, and a full disk
is one line naming the folder and what did not fit; then the same through fairseq-train, and a
copy interrupted midway.

Through fairseq-train a full disk is simulated with a file-size limit on the training process
(``RLIMIT_FSIZE``, with ``SIGXFSZ`` ignored): a write past the limit fails with ``EFBIG``
where a full disk fails with ``ENOSPC``; both are the ``OSError`` of ``write()`` inside
``torch.save``, and take the same way through the plugin's checkpoint writer (tested with
``ENOSPC`` itself in the first tests here). No root, no special file system."""

import errno
import os
import re
import shutil

import pytest
import torch
from fairseq import checkpoint_utils
from fairseq.file_io import PathManager

from conftest import digest, error_lines, file_size_limit, full_disk_open, losses, train_run
from hltmt_plugin.compat import atomic_copy
from hltmt_plugin.errors import HltmtInputError

# the workaround under test, as a command's process gets it (fairseq's commands with --user-dir, the plugin's own)
atomic_copy.install(PathManager, checkpoint_utils)

STATE = {"model": {"w": torch.zeros(1 << 18)}, "cfg": {}}  # 1 MB of weights


def test_a_checkpoint_that_does_not_fit_is_one_error_and_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint_last.pt"
    path.write_bytes(b"the previous checkpoint")
    import builtins

    monkeypatch.setattr(builtins, "open", full_disk_open(100_000))
    with pytest.raises(HltmtInputError) as raised:
        checkpoint_utils.torch_persistent_save(STATE, str(path))
    monkeypatch.undo()
    assert str(raised.value).startswith(
        f"could not write the checkpoint checkpoint_last.pt (1.0 MB) to the folder "
        f"{tmp_path}: No space left on device; "
    )
    assert "nothing partial was left" in str(raised.value) and "make room there" in str(raised.value)
    assert os.listdir(tmp_path) == ["checkpoint_last.pt"] and path.read_bytes() == b"the previous checkpoint"


def test_a_checkpoint_is_written_whole_with_the_usual_mode(tmp_path):
    path = tmp_path / "checkpoint_1_4.pt"
    checkpoint_utils.torch_persistent_save(STATE, str(path))
    assert torch.equal(torch.load(path, weights_only=True)["model"]["w"], STATE["model"]["w"])
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask and os.listdir(tmp_path) == ["checkpoint_1_4.pt"]


def test_a_copy_that_does_not_fit_is_one_error_and_leaves_the_old_file(tmp_path, monkeypatch):
    src, dst = tmp_path / "checkpoint_1_4.pt", tmp_path / "checkpoint_last.pt"
    src.write_bytes(b"n" * (3 << 20))
    dst.write_bytes(b"old")

    def copy_to_a_full_disk(a, b, *args, **kwargs):
        with open(b, "wb") as f:
            f.write(b"n" * 1000)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(shutil, "copyfile", copy_to_a_full_disk)
    with pytest.raises(
        HltmtInputError,
        match=r"could not write the checkpoint checkpoint_last.pt \(3.0 MB\) to the "
        r"folder .*: No space left on device",
    ):
        PathManager.copy(str(src), str(dst), overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_1_4.pt", "checkpoint_last.pt"] and dst.read_bytes() == b"old"


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


# ---- a full disk during a save of fairseq-train
def test_a_save_that_does_not_fit_is_one_line_leaves_nothing_partial_and_the_run_resumes(data_bin, tmp_path):
    save = tmp_path / "s"
    first = train_run(data_bin, save, "--max-update", "4", "--save-interval-updates", "4")
    assert first.returncode == 0, first.stderr[-2000:]
    before = sorted(os.listdir(save))
    last = digest(save / "checkpoint_last.pt")
    size = os.path.getsize(save / "checkpoint_last.pt")
    assert size > 4 << 20

    full = train_run(
        data_bin, save, "--max-update", "8", "--save-interval-updates", "4", preexec_fn=file_size_limit(2 << 20)
    )
    out = full.stdout + full.stderr
    assert full.returncode != 0 and "Traceback" not in out, out[-3000:]
    assert max(losses(out)) == 8  # it trained, then the save at update 8 did not fit
    said = re.fullmatch(
        rf"hltmt_plugin: error: could not write the checkpoint checkpoint_1_8\.pt \(([\d.]+) MB\) to the "
        rf"folder {re.escape(str(save))}: File too large; [\d.]+ MB free there; nothing partial was left and the "
        r"checkpoints already there are unchanged: make room there \(or give --save-dir on a disk with room\) and run "
        r"again: training resumes from the last checkpoint that was written",
        error_lines(full)[0],
    )
    assert said and len(error_lines(full)) == 1, out[-2000:]
    assert abs(float(said.group(1)) - size / 2**20) < 0.02 * size / 2**20  # the size of the checkpoint
    assert sorted(os.listdir(save)) == before  # no temporary file, no partial checkpoint
    assert digest(save / "checkpoint_last.pt") == last

    again = train_run(data_bin, save, "--max-update", "8", "--save-interval-updates", "4")
    out = again.stdout + again.stderr
    assert again.returncode == 0, out[-2000:]
    assert "Loaded checkpoint" in out and min(losses(out)) == 5  # from update 4, the last checkpoint written
    assert (save / "checkpoint_1_8.pt").exists() and digest(save / "checkpoint_last.pt") != last
