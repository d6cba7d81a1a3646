"""Safe checkpoint loading (torch >= 2.4).

torch >= 2.6 unpickles with ``weights_only=True`` by default: tensors, plain containers and
an allowlist of types. fairseq 0.12 checkpoints also hold ``argparse.Namespace``, so stock
fairseq cannot read its own checkpoints under torch >= 2.6; and fairseq's main branch (after
fairseq issue 5610) passes ``weights_only=False``, which would unpickle anything.

So the plugin (a) adds the one type fairseq checkpoints hold to torch's allowlist, (b) gives
fairseq's ``checkpoint_utils`` module a ``torch`` whose ``load`` is always weights-only,
whatever fairseq passes (every other attribute is torch's own), and (c) wraps
``checkpoint_utils.load_checkpoint_to_cpu`` so that a missing, truncated or refused file is
one clear error. A file the user trusts can still be read with full pickle by naming it in
``HLTMT_TRUSTED_CHECKPOINTS`` (a path list); that is logged as a warning with the reason.

Every file the plugin reads with torch is read here: checkpoints (:func:`load_state`, and
fairseq's own loading) and the plugin's adapter files (:func:`load_plugin_file`).
"""

import argparse
import functools
import logging
import os
import pickle
import re
import zipfile

import torch

from hltmt_plugin.compat.safe_eval import check_stored_options
from hltmt_plugin.errors import HltmtInputError

logger = logging.getLogger(__name__)

SAFE_GLOBALS = [argparse.Namespace]  # the non-container types that fairseq / HLT-MT checkpoints hold
TRUST_ENV = "HLTMT_TRUSTED_CHECKPOINTS"


def _trusted(path) -> bool:
    listed = [p for p in os.environ.get(TRUST_ENV, "").split(os.pathsep) if p]
    return isinstance(path, str) and any(os.path.realpath(p) == os.path.realpath(path) for p in listed)


def _path_of(f) -> str:
    return f if isinstance(f, str) else getattr(f, "name", repr(f))


def _refused_global(error: Exception) -> str:
    found = re.search(r"GLOBAL ([\w.]+)", str(error))
    return found.group(1) if found else str(error).splitlines()[0]


def _unpickle(f, args, kwargs, weights_only: bool):
    """The plugin's one call of ``torch.load``."""
    return torch.load(f, *args, **{**kwargs, "weights_only": weights_only})


def weights_only_load(f, *args, **kwargs):
    """``torch.load`` with ``weights_only=True`` whatever the caller asked, unless the file is
    trusted; a refused file is an :class:`HltmtInputError` naming the type it holds."""
    path = _path_of(f)
    weights_only = not _trusted(path)
    if not weights_only:
        logger.warning(f"loading {path} with full pickle (trusted through {TRUST_ENV})")
    try:
        return _unpickle(f, args, kwargs, weights_only)
    except pickle.UnpicklingError as error:
        if "weights_only" not in str(error) and "Weights only" not in str(error):
            raise HltmtInputError(f"checkpoint {path} is not a readable checkpoint: {error}") from None
        raise HltmtInputError(
            f"refused to load checkpoint {path}: it holds {_refused_global(error)}, which is outside the "
            "allowlist of types that fairseq checkpoints hold, and unpickling it could run "
            f"code. If you trust the file, list its path in {TRUST_ENV}."
        ) from None


def check_fairseq_state(path: str, state) -> None:
    """A fairseq checkpoint is a dict with a ``model`` record (the weights) and a ``cfg`` or
    ``args`` record (the options they were trained with); anything else is refused by name here,
    before fairseq's code reads it (where it would be a ``KeyError`` or ``TypeError`` from deep
    inside fairseq). Stored options that fairseq evaluates as Python must be literals
    (:func:`hltmt_plugin.compat.safe_eval.check_stored_options`)."""
    if not isinstance(state, dict):
        raise HltmtInputError(
            f"checkpoint {path} is not a fairseq checkpoint (it holds a {type(state).__name__}, "
            "not fairseq's dict of records)"
        )
    if "model" not in state:
        raise HltmtInputError(f"checkpoint {path} is not a fairseq checkpoint (no 'model' record)")
    if not isinstance(state["model"], dict):
        raise HltmtInputError(
            f"checkpoint {path} is not a fairseq checkpoint (its 'model' record is a "
            f"{type(state['model']).__name__}, not the model's weights)"
        )
    if state.get("cfg") is None and state.get("args") is None:
        raise HltmtInputError(
            f"checkpoint {path} is not a fairseq checkpoint (no 'cfg' or 'args' record: the "
            "options the model was trained with)"
        )
    check_stored_options(path, state)


def fairseq_checkpoint_load(f, *args, **kwargs):
    """What fairseq's checkpoint code gets as ``torch.load``: weights-only, and only a fairseq
    checkpoint (:func:`check_fairseq_state`)."""
    state = weights_only_load(f, *args, **kwargs)
    check_fairseq_state(_path_of(f), state)
    return state


class _WeightsOnlyTorch:
    """The ``torch`` module as fairseq's checkpoint code sees it: ``load`` is weights-only and
    returns only fairseq checkpoints."""

    load = staticmethod(fairseq_checkpoint_load)

    def __getattr__(self, name):
        return getattr(torch, name)


# torch's zip reader (PyTorchStreamReader, miniz) on a file that is not a whole torch.save zip
ZIP_ERRORS = (
    "zip archive",
    "central directory",
    "file read failed",
    "PytorchStreamReader",
    "inline_container",
    "not in a subdirectory",
)


def guarded(path, load):
    """Run ``load()``, which reads the checkpoint ``path``, turning a missing or broken file into
    one clear error."""
    if isinstance(path, str) and "://" not in path and not os.path.isfile(path):
        raise HltmtInputError(f"checkpoint {path} does not exist")
    try:
        return load()
    except (EOFError, zipfile.BadZipFile, OSError) as error:
        raise HltmtInputError(f"checkpoint {path} is truncated or not a checkpoint ({error})") from None
    except RuntimeError as error:
        text = str(error)
        record = re.search(r'hasRecord\("([^"]+)"\)', text)
        if record:  # torch's zip reader: a zip without one of the records torch.save writes
            raise HltmtInputError(
                f"checkpoint {path} is truncated or not a checkpoint (its zip has no '{record.group(1)}' record)"
            ) from None
        if any(sign in text for sign in ZIP_ERRORS):
            first = re.sub(r"^\[enforce fail at [^\]]*\]\s*\.?\s*", "", text.splitlines()[0]).split(". This is")[0]
            raise HltmtInputError(f"checkpoint {path} is truncated or not a checkpoint ({first.strip()})") from None
        raise
    except KeyError as error:  # a zip without the records torch / fairseq expect
        raise HltmtInputError(f"checkpoint {path} is not a fairseq checkpoint (no {error} record)") from None


def load_state(path: str) -> dict:
    """A checkpoint file's content, on the CPU, weights-only."""
    return guarded(path, lambda: weights_only_load(path, map_location="cpu"))


def load_plugin_file(path: str):
    """A file the plugin writes for itself (a language's adapter file), on the CPU: weights-only
    always (``HLTMT_TRUSTED_CHECKPOINTS`` names checkpoints, not these); what torch raises for a
    file it refuses or cannot read is raised, for the caller to name the file."""
    return _unpickle(path, (), {"map_location": "cpu"}, weights_only=True)


def install(checkpoint_utils) -> None:
    """Allowlist fairseq's types, give ``checkpoint_utils`` the weights-only ``torch`` and wrap
    its loader (idempotent)."""
    torch.serialization.add_safe_globals(SAFE_GLOBALS)
    if not isinstance(checkpoint_utils.torch, _WeightsOnlyTorch):
        checkpoint_utils.torch = _WeightsOnlyTorch()
    load = checkpoint_utils.load_checkpoint_to_cpu
    if not getattr(load, "hltmt_guarded", False):

        @functools.wraps(load)
        def load_checkpoint_to_cpu(path, *args, **kwargs):
            return guarded(path, lambda: load(path, *args, **kwargs))

        load_checkpoint_to_cpu.hltmt_guarded = True
        checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu
