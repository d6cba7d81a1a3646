"""Atomic checkpoint copies (fairseq 0.12 ``checkpoint_utils.save_checkpoint``).

fairseq writes one checkpoint atomically, then *copies* it to the others
(``checkpoint_last.pt``, ``checkpoint_best.pt`` ...) with ``PathManager.copy``: a kill during
that copy leaves a truncated ``checkpoint_last.pt``. fairseq's copy goes to a temporary file
with a unique name in the same folder (two processes never share one), which is flushed to
disk and renamed over the destination; a failed copy removes its temporary file.
"""
import functools
import os
import tempfile


def atomic_copy_file(copy, src_path: str, dst_path: str) -> None:
    folder = os.path.dirname(os.path.abspath(dst_path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(dst_path)}.", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        copy(src_path, tmp, overwrite=True)
        with open(tmp, "rb+") as written:
            os.fsync(written.fileno())
        os.replace(tmp, dst_path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def install(path_manager) -> None:
    copy = path_manager.copy
    if getattr(copy, "hltmt_atomic", False):
        return

    @functools.wraps(copy)
    def atomic_copy(src_path, dst_path, overwrite=False):
        if "://" in str(src_path) or "://" in str(dst_path):
            return copy(src_path, dst_path, overwrite=overwrite)
        atomic_copy_file(copy, src_path, dst_path)
        return True

    atomic_copy.hltmt_atomic = True
    path_manager.copy = staticmethod(atomic_copy)
