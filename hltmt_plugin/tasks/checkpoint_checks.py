"""The compatibility record (:mod:`hltmt_plugin.compatibility`) on the task's routes.

- :func:`stamp_record` / :func:`check_record` (the task's ``build_model``): a new model stores
  the record of what it is built on in its options (so in every checkpoint); a model built from a checkpoint
  (fairseq-generate, -interactive, -validate, fairseq's hub, ``hltmt-translate``, the Python API)
  is checked against the data, dictionary, languages and language-token options given now.
- :func:`stamp_checkpoint` (every checkpoint fairseq-train writes while the plugin is loaded,
  ``compat/checkpoint_record.py``): a model built by another task (fairseq's own
  ``translation_multi_simple_epoch``: the MNMT baseline) stores the same record.
- :func:`check_checkpoint_to_load` (the task's set-up, in fairseq-train): the checkpoint that
  fairseq-train is about to load (``checkpoint_last.pt`` of ``--save-dir``, ``--restore-file``,
  ``--finetune-from-model``) against the run's options, before fairseq reads it, so that a
  resumed or fine-tuned run never trains on data or options its weights do not mean, and never
  stores the new options' record over the old one. A resume without ``--reset-optimizer`` also
  needs the same criterion and optimizer (fairseq's "Criterion does not match").
"""

import contextlib
import os
from argparse import Namespace

from fairseq import utils

from hltmt_plugin import records
from hltmt_plugin.compat import checkpoint_record
from hltmt_plugin.compat.safe_loading import check_fairseq_state, load_state
from hltmt_plugin.compatibility import (
    RECORD_KEY,
    SHAPE_OPTIONS,
    VERSION_KEY,
    build_record,
    check,
    record_of_options,
    record_of_state,
)
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.process import running_fairseq

LAST = "checkpoint_last.pt"
DECODE_FIX = (
    "decode with the training run's data folder, dictionaries, --langs and language-token options "
    "(they change what the model's token ids mean)"
)


def data_folder(task) -> str:
    """The (first) data folder of ``task``'s options."""
    options = getattr(task, "args", None) or getattr(task, "cfg", None)
    return utils.split_paths(str(getattr(options, "data", "") or ""))[0]


def task_languages(task):
    """The languages of ``task``: a multilingual task's ``--langs`` in order, a bilingual task's
    source and target; None when it names none."""
    langs = getattr(task, "langs", None)
    if langs:
        return list(langs)
    options = getattr(task, "cfg", None) or getattr(task, "args", None)
    pair = [getattr(options, n, None) for n in ("source_lang", "target_lang")]
    return pair if all(isinstance(x, str) and x for x in pair) else None


def given_record(task, options, languages=None):
    """The record of a model built from ``options`` by ``task`` (its data, dictionary, languages)."""
    folder = data_folder(task)
    spm = os.path.join(os.path.dirname(os.path.abspath(folder)), "spm", "spm.model")  # hltmt-prepare-data's
    return build_record(
        options,
        data=folder if os.path.isdir(folder) else None,
        symbols=list(task.source_dictionary.symbols),
        languages=languages if languages is not None else task.langs,
        spm=spm if os.path.isfile(spm) else None,
    )


PLUGIN_MODEL = "hltmt_transformer"  # the plugin's model as fairseq registers it
# options that only the plugin's model reads: a checkpoint using one was built by it
PLUGIN_FEATURES = ("high_resource_langs", "language_adapters", "shared_adapters", "skill_ffn", "skill_attention")


def check_architecture(model_args) -> None:
    """The architecture fairseq would build from a checkpoint's options (``_name``, else
    ``arch``) is one fairseq knows, and the plugin's model when the options use one of its
    features: an architecture name swapped for another of the same shapes is one line here,
    not fairseq's strict-load traceback over the weights the other model lacks."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY, MODEL_REGISTRY

    arch = getattr(model_args, "_name", None) or getattr(model_args, "arch", None)
    if not isinstance(arch, str) or not arch:
        return
    model = ARCH_MODEL_NAME_REGISTRY.get(arch) or (arch if arch in MODEL_REGISTRY else None)
    if model is None:
        raise HltmtInputError(
            f"the checkpoint's architecture {arch[:60]!r} is not one fairseq knows (with --user-dir hltmt_plugin): "
            "use the checkpoint as its training run wrote it"
        )
    used = [n for n in PLUGIN_FEATURES if getattr(model_args, n, None)]
    if used and model != PLUGIN_MODEL:
        option = "--" + used[0].replace("_", "-")
        raise HltmtInputError(
            f"the checkpoint's options use {option} ({_short_value(getattr(model_args, used[0]))}), which only "
            f"{PLUGIN_MODEL} models have, but name the architecture {arch} ({model}): its stored architecture was "
            "changed; use the checkpoint as its training run wrote it"
        )


def _short_value(value) -> str:
    return str(value)[:40]


def check_record(model_args, task) -> None:
    """A model about to be built from a checkpoint's options: its architecture, and its record
    against ``task``."""
    check(
        record_of_options(model_args, edits=False),
        given_record(task, task.args),
        "the checkpoint",
        DECODE_FIX,
        data=data_folder(task),
        fields=("dictionaries", "vocabulary", "languages", "marking"),
    )
    record_of_options(model_args)  # then the options against the record (edited in the file, or overridden)
    check_architecture(model_args)  # (a checkpoint without a record, or with its record edited too)


def stamp_record(model_args, task) -> None:
    """A new model (built, so that its options are final): its record stored in its options, and
    the plugin's version beside it (a checkpoint whose record is removed still says who wrote it)."""
    setattr(model_args, RECORD_KEY, given_record(task, model_args))
    setattr(model_args, VERSION_KEY, records.plugin_version())


def stamp_checkpoint(trainer) -> None:
    """The record stored in the model options of the checkpoint ``trainer`` is about to write,
    where its task did not store one (fairseq's own tasks): the record the plugin's task stores,
    made from the trainer's task (its data folder, dictionary and languages). A task that names
    no languages or has no data folder and dictionary (not a translation task) gets none."""
    options, task = getattr(trainer.cfg, "model", None), trainer.task
    if options is None or getattr(options, RECORD_KEY, None) is not None:
        return
    languages = task_languages(task)
    if languages is None or getattr(task, "source_dictionary", None) is None or not os.path.isdir(data_folder(task)):
        return
    from omegaconf import open_dict

    record = given_record(task, options, languages)
    with open_dict(options) if not isinstance(options, Namespace) else contextlib.nullcontext():
        setattr(options, RECORD_KEY, record)
        setattr(options, VERSION_KEY, records.plugin_version())


checkpoint_record.stamp_with(stamp_checkpoint)


RESUME, RESTORE, FINETUNE = "resume", "restore", "finetune"


def checkpoint_to_load(args):
    """(the file fairseq-train loads at start, how: resume / restore / finetune) as fairseq
    0.12's ``checkpoint_utils.load_checkpoint`` picks it; (None, None) when it starts from scratch."""
    restore = getattr(args, "restore_file", LAST) or LAST
    if restore != LAST:
        return (restore, RESTORE) if os.path.isfile(restore) else (None, None)
    path = os.path.join(getattr(args, "save_dir", "checkpoints"), LAST)
    if os.path.isfile(path):
        return path, RESUME
    finetune = getattr(args, "finetune_from_model", None)
    return (finetune, FINETUNE) if finetune and os.path.isfile(finetune) else (None, None)


def check_checkpoint_to_load(args, task):
    """Refuse, in one line, a checkpoint that fairseq-train would load but whose weights mean
    something else under these options; its state (None when none is loaded, or on a rank other
    than the first, which writes no checkpoint). A resumed run keeps every model option; a run that starts
    from another run's checkpoint (``--restore-file``, ``--finetune-from-model``) may change the
    architecture's name and the plugin's features (a dense model turned into HLT-MT, adapters of a
    new language added: their weights are new), but not the shapes of the weights it takes over."""
    if not running_fairseq("train") or getattr(args, "distributed_rank", 0) != 0:
        return
    path, how = checkpoint_to_load(args)
    if path is None:
        return
    state = load_state(path)
    check_fairseq_state(path, state)
    fix = (
        "fine-tune on the data and options the model was trained with"
        if how == FINETUNE
        else "give this run its own --save-dir, or the training run's data and options"
    )
    check(
        record_of_state(state),
        given_record(task, args),
        f"checkpoint {path}",
        fix,
        data=data_folder(task),
        model_options=None if how == RESUME else list(SHAPE_OPTIONS),
    )
    if how != FINETUNE and not getattr(args, "reset_optimizer", False):
        _check_training_state(path, state, args)
    return state


def _check_training_state(path: str, state, args) -> None:
    """A resume keeps the criterion (fairseq checks it after building everything, with a traceback)."""
    from fairseq.criterions import CRITERION_REGISTRY

    history = state.get("optimizer_history") or []
    last = history[-1] if history and isinstance(history[-1], dict) else {}
    stored = last.get("criterion_name")
    given = getattr(CRITERION_REGISTRY.get(getattr(args, "criterion", None)), "__name__", None)
    if stored and given and stored != given:
        raise HltmtConfigError(
            f"checkpoint {path} does not fit: criterion: checkpoint {stored}, given {given}: "
            "resume with the training run's --criterion, or add --reset-optimizer to start its "
            "training state afresh"
        )
