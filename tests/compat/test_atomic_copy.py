"""fairseq's checkpoint writes and copies under the plugin: whole or not at all, and a full disk
is one line naming the folder and what did not fit (tests/test_hostile_training.py runs it
through fairseq-train)."""
import errno
import os
import shutil

import pytest
import torch

from fairseq import checkpoint_utils
from fairseq.file_io import PathManager

import hltmt_plugin  # noqa: F401  (installs the atomic writer and copy)
from hltmt_plugin.errors import HltmtInputError

STATE = {"model": {"w": torch.zeros(1 << 18)}, "cfg": {}}  # 1 MB of weights


def full_disk_after(nbytes):
    """A file write that fails as a full disk does, after ``nbytes`` bytes."""
    real_open = open

    class FullFile:
        def __init__(self, path, mode="r", *args, **kwargs):
            self.f, self.written = real_open(path, mode, *args, **kwargs), 0

        def write(self, data):
            if self.written + len(data) > nbytes:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.written += len(data)
            return self.f.write(data)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    return FullFile


def test_a_checkpoint_that_does_not_fit_is_one_error_and_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint_last.pt"
    path.write_bytes(b"the previous checkpoint")
    import builtins

    monkeypatch.setattr(builtins, "open", full_disk_after(100_000))
    with pytest.raises(HltmtInputError) as raised:
        checkpoint_utils.torch_persistent_save(STATE, str(path))
    monkeypatch.undo()
    assert str(raised.value).startswith(f"could not write the checkpoint checkpoint_last.pt (1.0 MB) to the folder "
                                        f"{tmp_path}: No space left on device; ")
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
    with pytest.raises(HltmtInputError, match=r"could not write the checkpoint checkpoint_last.pt \(3.0 MB\) to the "
                                              r"folder .*: No space left on device"):
        PathManager.copy(str(src), str(dst), overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_1_4.pt", "checkpoint_last.pt"] and dst.read_bytes() == b"old"
