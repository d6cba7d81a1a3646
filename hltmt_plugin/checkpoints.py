"""Safe checkpoint loading under torch >= 2.6.

torch >= 2.6 unpickles with ``weights_only=True``: only tensors, plain containers and an
allowlist of types. fairseq 0.12 checkpoints also hold ``argparse.Namespace`` (legacy
argparse configs), so stock fairseq cannot read its own checkpoints. Instead of switching the
protection off for every file, the plugin adds the few types fairseq checkpoints hold to
torch's allowlist and wraps ``fairseq.checkpoint_utils.load_checkpoint_to_cpu`` so that a
file that needs more is refused with a message naming the type (a crafted pickle runs
nothing). A file the user trusts can still be read with full pickle by naming it in
``HLTMT_TRUSTED_CHECKPOINTS`` (a path list); that is logged as a warning with the reason.
"""
import argparse
import functools
import logging
import os
import pickle
import re
import zipfile

import torch
from fairseq import checkpoint_utils
from fairseq.file_io import PathManager

from hltmt_plugin.errors import HltmtInputError

logger = logging.getLogger(__name__)

# The non-container types that fairseq / HLT-MT checkpoints hold.
SAFE_GLOBALS = [argparse.Namespace]
TRUST_ENV = "HLTMT_TRUSTED_CHECKPOINTS"


def _trusted(path: str) -> bool:
    listed = [p for p in os.environ.get(TRUST_ENV, "").split(os.pathsep) if p]
    return any(os.path.realpath(p) == os.path.realpath(path) for p in listed)


def _refused_global(error: Exception) -> str:
    found = re.search(r"GLOBAL ([\w.]+)", str(error))
    return found.group(1) if found else str(error).splitlines()[0]


def _guarded(path, load):
    """Run ``load()``, which unpickles ``path``, turning what can go wrong into clear errors."""
    if isinstance(path, str) and "://" not in path and not os.path.isfile(path):
        raise HltmtInputError(f"checkpoint {path} does not exist")
    try:
        return load()
    except pickle.UnpicklingError as error:
        if "weights_only" not in str(error) and "Weights only" not in str(error):
            raise HltmtInputError(f"checkpoint {path} is not a readable checkpoint: {error}") from None
        reason = _refused_global(error)
        if not _trusted(path):
            raise HltmtInputError(
                f"refused to load checkpoint {path}: it holds {reason}, which is outside the "
                "allowlist of types that fairseq checkpoints hold, and unpickling it could run "
                f"code. If you trust the file, list its path in {TRUST_ENV}.") from None
        logger.warning(f"loading {path} with full pickle (it holds {reason}; trusted through {TRUST_ENV})")
        original, torch.load = torch.load, functools.partial(torch.load, weights_only=False)
        try:
            return load()
        finally:
            torch.load = original
    except (EOFError, zipfile.BadZipFile, OSError) as error:
        raise HltmtInputError(f"checkpoint {path} is truncated or not a checkpoint ({error})") from None
    except RuntimeError as error:
        if "zip archive" in str(error) or "central directory" in str(error) or "file read failed" in str(error):
            raise HltmtInputError(f"checkpoint {path} is truncated or not a checkpoint ({error})") from None
        raise


def load_state(path: str) -> dict:
    """``torch.load`` of a checkpoint file to CPU, weights-only with the allowlist."""
    return _guarded(path, lambda: torch.load(path, map_location="cpu"))


def _wrap(load):
    @functools.wraps(load)
    def load_checkpoint_to_cpu(path, *args, **kwargs):
        return _guarded(path, lambda: load(path, *args, **kwargs))

    load_checkpoint_to_cpu.hltmt_wrapped = True
    return load_checkpoint_to_cpu


def _atomic(copy):
    """fairseq writes one checkpoint atomically (temp file + rename), then *copies* it to
    the others (checkpoint_last.pt, checkpoint_best.pt ...): a kill during that copy left a
    truncated checkpoint_last.pt. Copy to a temp file and rename instead."""

    @functools.wraps(copy)
    def atomic_copy(src_path, dst_path, overwrite=False):
        if not PathManager.supports_rename(dst_path):
            return copy(src_path, dst_path, overwrite=overwrite)
        tmp = dst_path + ".tmp"
        copy(src_path, tmp, overwrite=True)
        os.replace(tmp, dst_path)
        return True

    atomic_copy.hltmt_atomic = True
    return atomic_copy


def install_safe_loading() -> None:
    """Allowlist fairseq's checkpoint types, wrap fairseq's loader, and make its checkpoint
    copies atomic (idempotent)."""
    torch.serialization.add_safe_globals(SAFE_GLOBALS)
    if not getattr(checkpoint_utils.load_checkpoint_to_cpu, "hltmt_wrapped", False):
        checkpoint_utils.load_checkpoint_to_cpu = _wrap(checkpoint_utils.load_checkpoint_to_cpu)
    if not getattr(PathManager.copy, "hltmt_atomic", False):
        PathManager.copy = staticmethod(_atomic(PathManager.copy))
