"""Checkpoint files written whole or not at all (fairseq 0.12 ``checkpoint_utils``).

fairseq writes one checkpoint (``torch_persistent_save``: to ``NAME.pt.tmp``, renamed), then
*copies* it to the others (``checkpoint_last.pt``, ``checkpoint_best.pt`` ...) with
``PathManager.copy``: a kill during that copy leaves a truncated ``checkpoint_last.pt``; and a
write that fails (a full disk) is retried twice, logged as a traceback each time, and leaves
``NAME.pt.tmp`` behind.

Here both are written whole or not at all by :mod:`hltmt_plugin.atomic_files` (a temporary file with
a unique name in the same folder, flushed to disk and renamed over the destination). A write
or copy that fails removes its temporary file and is one :class:`HltmtInputError` naming the
folder, the file and how large it is (and what room the folder has); the checkpoints already
there are unchanged, so the run can resume from the last one that was written.
"""

import errno
import functools
import os

import torch

from hltmt_plugin.atomic_files import TORCH_TEMP, os_error_behind, torch_writer, write_atomically
from hltmt_plugin.errors import HltmtInputError

MB = 1 << 20


def _state_bytes(obj, seen=None) -> int:
    """The bytes of the tensor storages in a checkpoint's state, each once (tied weights share
    one): about the size of its file."""
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        storage = obj.untyped_storage()
        if storage.data_ptr() in seen:
            return 0
        seen.add(storage.data_ptr())
        return storage.nbytes()
    if isinstance(obj, dict):
        return sum(_state_bytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_state_bytes(v, seen) for v in obj)
    return 0


def did_not_fit(path: str, error: OSError, size: int) -> HltmtInputError:
    """The one-line error of a checkpoint ``path`` (of about ``size`` bytes) that could not be written."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        room = os.statvfs(folder)
        free = f"; {room.f_bavail * room.f_frsize / MB:.1f} MB free there"
    except OSError:
        free = ""
    full = error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    advice = (
        "make room there (or give --save-dir on a disk with room) and run again: training resumes from the "
        "last checkpoint that was written"
        if full
        else "check the folder and run again"
    )
    return HltmtInputError(
        f"could not write the checkpoint {os.path.basename(path)} ({size / MB:.1f} MB) to the folder "
        f"{folder}: {error.strerror or error}{free}; nothing partial was left and the checkpoints "
        f"already there are unchanged: {advice}"
    )


def _write_atomically(path: str, write, size: int) -> None:
    """``write(tmp)`` to a temporary file beside ``path``, which then replaces it
    (:func:`hltmt_plugin.atomic_files.write_atomically`); a failure of the file system is
    :func:`did_not_fit`."""
    try:
        write_atomically(path, write, suffix=TORCH_TEMP)
    except BaseException as error:
        cause = os_error_behind(error)
        if cause is None or isinstance(error, KeyboardInterrupt):
            raise
        raise did_not_fit(path, cause, size) from None


def save_checkpoint_file(obj, path: str) -> None:
    """``torch.save(obj, path)``, atomically, with one clear line if it does not fit."""
    _write_atomically(path, torch_writer(obj), _state_bytes(obj))


def atomic_copy_file(copy, src_path: str, dst_path: str) -> None:
    _write_atomically(dst_path, lambda tmp: copy(src_path, tmp, overwrite=True), os.path.getsize(src_path))


def install(path_manager, checkpoint_utils) -> None:
    copy = path_manager.copy
    if not getattr(copy, "hltmt_atomic", False):

        @functools.wraps(copy)
        def atomic_copy(src_path, dst_path, overwrite=False):
            if "://" in str(src_path) or "://" in str(dst_path):
                return copy(src_path, dst_path, overwrite=overwrite)
            atomic_copy_file(copy, src_path, dst_path)
            return True

        atomic_copy.hltmt_atomic = True
        path_manager.copy = staticmethod(atomic_copy)

    save = checkpoint_utils.torch_persistent_save
    if not getattr(save, "hltmt_atomic", False):

        @functools.wraps(save)
        def torch_persistent_save(obj, filename, async_write: bool = False):
            if async_write or "://" in str(filename):
                return save(obj, filename, async_write=async_write)
            save_checkpoint_file(obj, filename)

        torch_persistent_save.hltmt_atomic = True
        checkpoint_utils.torch_persistent_save = torch_persistent_save
