"""The training run's ``--save-dir``, made safe before fairseq-train looks at it.

- **One trainer per save dir**: a lock file (``.hltmt_train.lock``, holding the trainer's pid)
  is taken by rank 0; a second trainer on the same folder is refused naming the holder (two
  trainers would overwrite each other's ``*.tmp`` files and checkpoints). A lock whose process
  is gone is taken over.
- **Stale temporary files** of an interrupted save (fairseq's ``NAME.pt.tmp``, the plugin's
  ``.NAME.pt.*.tmp``) are removed.
- **Resume from the newest loadable checkpoint**: when ``checkpoint_last.pt`` (the default
  ``--restore-file``) is missing or broken but other checkpoints are there, the newest one that
  opens is copied to ``checkpoint_last.pt``, saying which; fairseq would otherwise start from
  scratch (missing) or stop with a traceback (broken).
"""

import atexit
import glob
import logging
import os
import shutil
import zipfile
from typing import Optional

from hltmt_plugin.compat.atomic_copy import atomic_copy_file
from hltmt_plugin.errors import HltmtConfigError
from hltmt_plugin.process import running_fairseq

logger = logging.getLogger(__name__)

LOCK = ".hltmt_train.lock"
LAST = "checkpoint_last.pt"


def opens(path: str) -> bool:
    """A checkpoint file whose archive is whole (its central directory, at the end, reads)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return bool(archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def take_lock(save_dir: str) -> None:
    path = os.path.join(save_dir, LOCK)
    try:
        with open(path, encoding="utf-8") as f:
            holder = int(f.read().strip() or 0)
    except (OSError, ValueError):
        holder = 0
    if holder and holder != os.getpid() and _alive(holder):
        raise HltmtConfigError(
            f"--save-dir {save_dir} is in use by another training process (pid {holder}, lock "
            f"file {path}): give this run its own --save-dir, or stop that process"
        )
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"{os.getpid()}\n")
    atexit.register(_release, path, os.getpid())


def _release(path: str, pid: int) -> None:
    try:
        with open(path, encoding="utf-8") as f:
            if int(f.read().strip() or 0) == pid:
                os.remove(path)
    except (OSError, ValueError):
        pass


def remove_stale_temps(save_dir: str) -> None:
    for path in glob.glob(os.path.join(save_dir, "*.pt.tmp")) + glob.glob(os.path.join(save_dir, ".*.pt.*.tmp")):
        os.remove(path)
        logger.info(f"removed {path}, left by an interrupted save")


def newest_loadable(save_dir: str) -> Optional[str]:
    """The newest checkpoint that opens; checkpoint_best.pt (a copy of an older one) last."""
    found = [p for p in glob.glob(os.path.join(save_dir, "checkpoint*.pt")) if os.path.basename(p) != LAST]
    for path in sorted(found, key=lambda p: ("best" not in os.path.basename(p), os.path.getmtime(p)), reverse=True):
        if opens(path):
            return path
    return None


def restore_last(save_dir: str) -> None:
    last = os.path.join(save_dir, LAST)
    if os.path.exists(last) and opens(last):
        return
    fallback = newest_loadable(save_dir)
    if fallback is None:
        if os.path.exists(last):
            raise HltmtConfigError(
                f"{last} is truncated or not a checkpoint (not a whole file) and no other checkpoint in "
                f"{save_dir} opens: remove it to start from scratch"
            )
        return
    what = "is broken" if os.path.exists(last) else "is missing"
    atomic_copy_file(lambda src, dst, overwrite=True: shutil.copyfile(src, dst), fallback, last)
    logger.warning(f"{last} {what}: resuming from {os.path.basename(fallback)}, the newest checkpoint that opens")


def prepare(args) -> None:
    """Everything above, for a fairseq-train run (rank 0 only)."""
    save_dir = getattr(args, "save_dir", None)
    if not save_dir or not running_fairseq("train") or getattr(args, "distributed_rank", 0) != 0:
        return
    os.makedirs(save_dir, exist_ok=True)
    take_lock(save_dir)
    remove_stale_temps(save_dir)
    if getattr(args, "restore_file", LAST) == LAST:
        restore_last(save_dir)
