"""Safe checkpoint loading (torch >= 2.5): the plugin's one loader of torch files.

torch >= 2.6 unpickles with ``weights_only=True`` by default: tensors, plain containers and
an allowlist of types. fairseq 0.12 checkpoints also hold ``argparse.Namespace``, so stock
fairseq cannot read its own checkpoints under torch >= 2.6; and fairseq's main branch (after
fairseq issue 5610) passes ``weights_only=False``, which would unpickle anything.

So every file the plugin reads with torch is read here, weights-only, with the one type fairseq
checkpoints hold allowed for the length of that load only (:func:`allowlisted`: torch's own
allowlist is as it was after): checkpoints (:func:`load_state`, and :func:`load_checkpoint`,
fairseq's ``load_checkpoint_to_cpu`` done by this loader, which the hub hands to fairseq in a
program that imports the plugin), the plugin's adapter files (:func:`load_plugin_file`). A
missing, truncated or refused file is one clear error. A file the user trusts can still be read
with full pickle by naming it in ``HLTMT_TRUSTED_CHECKPOINTS`` (a path list); that is logged as
a warning with the reason.

In a command's process (fairseq's or the plugin's: ``hltmt_plugin.command_process``)
:func:`install` also gives fairseq's ``checkpoint_utils`` module a ``torch`` whose ``load`` is
this loader, whatever fairseq passes (every other attribute is torch's own), and wraps its
``load_checkpoint_to_cpu`` so that a missing, truncated or refused file is one clear error.
``tests/compat/test_safe_loading.py`` reads every Python file of the package, the scripts and
the examples and fails on any other call of ``torch.load``.
"""

import argparse
import contextlib
import functools
import logging
import os
import pickle
import re
import threading
import zipfile

import torch

from hltmt_plugin.compat.safe_eval import check_stored_options
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.model_check import check_loaded

logger = logging.getLogger(__name__)

SAFE_GLOBALS = [argparse.Namespace]  # the non-container types that fairseq / HLT-MT checkpoints hold
TRUST_ENV = "HLTMT_TRUSTED_CHECKPOINTS"
TORCH_FLOOR = "2.5"  # torch.serialization.safe_globals: an allowlist for one load
_ONE_LOAD = threading.Lock()  # the plugin's loads one at a time, so that each restores what it found


def _trusted(path) -> bool:
    listed = [p for p in os.environ.get(TRUST_ENV, "").split(os.pathsep) if p]
    return isinstance(path, str) and any(os.path.realpath(p) == os.path.realpath(path) for p in listed)


def _path_of(f) -> str:
    return f if isinstance(f, str) else getattr(f, "name", repr(f))


def _refused_global(error: Exception) -> str:
    found = re.search(r"GLOBAL ([\w.]+)", str(error))
    return found.group(1) if found else str(error).splitlines()[0]


@contextlib.contextmanager
def allowlisted():
    """torch's weights-only allowlist with :data:`SAFE_GLOBALS` added, for one load: what the
    process had before is restored after (the importing program's torch is left as it was)."""
    safe_globals = getattr(torch.serialization, "safe_globals", None)
    if safe_globals is None:
        raise HltmtConfigError(
            f"hltmt_plugin needs torch >= {TORCH_FLOOR} (safe checkpoint loading with an allowlist); "
            f"this is torch {torch.__version__}"
        )
    with _ONE_LOAD, safe_globals(SAFE_GLOBALS):
        yield


def _unpickle(f, args, kwargs, weights_only: bool, kind: str = "checkpoint"):
    """The plugin's one call of ``torch.load``; what it read passes the one check of a model
    (:func:`hltmt_plugin.model_check.check_loaded`: finite weights, a checkpoint's options
    within what fairseq accepts), whichever route asked."""
    with allowlisted():
        found = torch.load(f, *args, **{**kwargs, "weights_only": weights_only})
    check_loaded(f"{kind} {_path_of(f)}", found)
    return found


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
        raise refused("checkpoint", path, error, f" If you trust the file, list its path in {TRUST_ENV}.") from None


def refused(kind: str, path, error: Exception, advice: str = "") -> HltmtInputError:
    """The one line of a file whose unpickling the weights-only loader refused (a type outside
    the allowlist, which could run code): the file, the type, nothing run; torch's own advice
    (``weights_only=False``) is not repeated."""
    return HltmtInputError(
        f"refused to load {kind} {path}: it holds {_refused_global(error)}, which is outside the "
        "allowlist of types that fairseq checkpoints hold, and unpickling it could run "
        f"code (nothing was run).{advice}"
    )


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


def load_checkpoint(path: str, arg_overrides=None) -> dict:
    """What fairseq's ``checkpoint_utils.load_checkpoint_to_cpu(path, arg_overrides)`` returns
    (the stored options as fairseq's config with ``arg_overrides`` set, the state upgraded to
    fairseq's current form), read by this loader: the state to hand to fairseq's
    ``load_model_ensemble_and_task(..., state=...)`` wherever fairseq's own loader is left as
    fairseq has it (a program that imports the plugin)."""
    from fairseq import checkpoint_utils
    from fairseq.dataclass.utils import overwrite_args_by_name
    from omegaconf import OmegaConf

    state = guarded(path, lambda: fairseq_checkpoint_load(path, map_location="cpu"))
    if state.get("args") is not None and arg_overrides is not None:
        for name, value in arg_overrides.items():
            setattr(state["args"], name, value)
    if state.get("cfg") is not None:
        state["cfg"] = OmegaConf.create(state["cfg"], flags={"allow_objects": True})
        if arg_overrides is not None:
            overwrite_args_by_name(state["cfg"], arg_overrides)
    return checkpoint_utils._upgrade_state_dict(state)


def load_plugin_file(path: str):
    """A file the plugin writes for itself (a language's adapter file), on the CPU: weights-only
    always (``HLTMT_TRUSTED_CHECKPOINTS`` names checkpoints, not these); a file whose unpickling
    could run code is :func:`refused` in the line every route gives, what else torch raises for a
    file it cannot read is raised, for the caller to name the file."""
    try:
        found = _unpickle(path, (), {"map_location": "cpu"}, weights_only=True, kind="adapter file")
    except pickle.UnpicklingError as error:
        if "weights_only" not in str(error) and "Weights only" not in str(error):
            raise
        raise refused("adapter file", path, error) from None
    return found


_LOADING_LOCK = threading.Lock()
_loading = {"calls": 0, "saved": None}  # the calls of fairseq_loading under way, what the first one found


@contextlib.contextmanager
def fairseq_loading(checkpoint_utils):
    """fairseq's checkpoint loader reading through this loader for the duration of one call (the
    plugin model's ``from_pretrained`` in a program that is not a command), then restored: outside
    the commands, fairseq is left as fairseq has it. The module is the process's: calls in
    several threads share one change, made by the first call and undone by the last to end."""
    with _LOADING_LOCK:
        if _loading["calls"] == 0:
            _loading["saved"] = checkpoint_utils.torch, checkpoint_utils.load_checkpoint_to_cpu
            install(checkpoint_utils)
        _loading["calls"] += 1
    try:
        yield
    finally:
        with _LOADING_LOCK:
            _loading["calls"] -= 1
            if _loading["calls"] == 0:
                checkpoint_utils.torch, checkpoint_utils.load_checkpoint_to_cpu = _loading["saved"]
                _loading["saved"] = None


def install(checkpoint_utils) -> None:
    """Give ``checkpoint_utils`` the weights-only ``torch`` and wrap its loader (idempotent; a
    command's process only)."""
    if not isinstance(checkpoint_utils.torch, _WeightsOnlyTorch):
        checkpoint_utils.torch = _WeightsOnlyTorch()
    load = checkpoint_utils.load_checkpoint_to_cpu
    if not getattr(load, "hltmt_guarded", False):

        @functools.wraps(load)
        def load_checkpoint_to_cpu(path, *args, **kwargs):
            return guarded(path, lambda: load(path, *args, **kwargs))

        load_checkpoint_to_cpu.hltmt_guarded = True
        checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu
