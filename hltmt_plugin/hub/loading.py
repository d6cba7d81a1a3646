"""Loading a checkpoint: :func:`load_model`, the one way the plugin rebuilds a model from a
checkpoint (the translator, the exports, hltmt-adapters, hltmt-train-language-adapter,
hltmt-report's gate); for translation (:func:`load_for_translation`: the translator and the
exports) also the options and data folder it stores, where its sentencepiece model lies, and
what is read from the loaded model (:class:`LoadedCheckpoint`)."""

import functools
import glob
import os
from argparse import Namespace
from typing import TYPE_CHECKING, Optional

import hltmt_plugin
from hltmt_plugin.compatibility import check, record_of_options, record_of_state, spm_coverage
from hltmt_plugin.data_fingerprint import sha256_file
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError

hltmt_plugin.register()  # the task, model and safe loading, before this module's functions import fairseq

if TYPE_CHECKING:
    from hltmt_plugin.languages import LanguageTable

SPM_COVERAGE = 0.9  # the least share of the dictionary's pieces that the sentencepiece model must make


TASK_NAME, MODEL_NAME = "hltmt_translation", "hltmt_transformer"
# the multilingual tasks whose checkpoints the translator serves (any model of theirs; the plugin's
# model only with its own task)
TASK_NAMES = (TASK_NAME, "translation_multi_simple_epoch")

SPM_NAMES = ("spm.model", "sentencepiece.bpe.model")


def _stored(cfg, section: str, name: str, default=None):
    part = cfg.get(section) if hasattr(cfg, "get") else getattr(cfg, section, None)
    if part is None:
        return default
    return (
        part.get(name, default)
        if hasattr(part, "get") and not isinstance(part, Namespace)
        else getattr(part, name, default)
    )


def _find_spm(spm: Optional[str], data: str, checkpoint: str, stored: Optional[str]) -> str:
    if spm:
        if not os.path.isfile(spm):
            raise HltmtConfigError(f"sentencepiece model {spm} does not exist")
        return spm
    data = data.split(os.pathsep)[0]
    places = ([stored] if stored else []) + [
        os.path.join(os.path.dirname(os.path.abspath(data)), "spm", "spm.model"),  # hltmt-prepare-data
        *(os.path.join(data, n) for n in SPM_NAMES),
        *(os.path.join(os.path.dirname(os.path.abspath(checkpoint)), n) for n in SPM_NAMES),
    ]
    for path in places:
        if os.path.isfile(path):
            return path
    raise HltmtConfigError(
        f"no sentencepiece model found (looked for {', '.join(places)}): give it with "
        "spm=PATH / --spm PATH (hltmt-prepare-data writes OUT/spm/spm.model)"
    )


def load_model(path: str, data: Optional[str] = None, *, state=None, must_exist=False, explain_missing=True):
    """(model, cfg, task) of the checkpoint ``path``, rebuilt by fairseq from its own options,
    weights-only (the plugin's safe loading, :mod:`hltmt_plugin.compat.safe_loading`).

    ``data``: the binarized data folder to read the dictionaries from instead of the stored one;
    ``state``: the checkpoint's state already read (:func:`_read_checkpoint`), options set;
    ``must_exist``: a missing ``path`` is one :class:`HltmtInputError` line; ``explain_missing``:
    a file that rebuilding the model needs and cannot find (a dictionary of the data folder) is one
    :class:`HltmtInputError` line naming ``--data``, else fairseq's own error."""
    from fairseq import checkpoint_utils

    from hltmt_plugin.compat.safe_loading import load_checkpoint

    if must_exist and not os.path.isfile(path):
        raise HltmtInputError(f"checkpoint {path} does not exist")
    if state is None:  # read by the plugin's loader: fairseq's own is left as it is in a program
        state = load_checkpoint(path, {"data": data} if data else None)
    try:
        models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], state=state)
    except FileNotFoundError as error:
        if not explain_missing:
            raise
        raise HltmtInputError(
            f"cannot rebuild the model of {path}: {error} (give --data DIR, the binarized data "
            "folder with its dict.*.txt)"
        ) from None
    return models[0], cfg, task


def _read_checkpoint(path: str, data: Optional[str]):
    """The checkpoint's state with its stored options, checked and with ``data`` set, its data
    folder and its compatibility record (read before ``data`` is set: a checkpoint without one
    names the folder it was trained on)."""
    from fairseq.dataclass.utils import overwrite_args_by_name
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    from hltmt_plugin.compat.safe_loading import load_checkpoint

    if not os.path.isfile(path):
        raise HltmtInputError(f"checkpoint {path} does not exist")
    try:
        state = load_checkpoint(path)
    except (KeyError, AttributeError, TypeError, ValueError) as error:
        if isinstance(error, HltmtInputError):
            raise
        raise HltmtInputError(
            f"{path} is not a checkpoint fairseq can read ({type(error).__name__}: "
            f"{str(error).strip().splitlines()[0] if str(error).strip() else ''})"
        ) from None
    # (a state without weights or options was refused by the loader: compat.safe_loading.check_fairseq_state)
    record = record_of_state(state)  # complete, or refused in one line; none only where written without the plugin
    cfg = state["cfg"]
    task_name = _stored(cfg, "task", "_name") or _stored(cfg, "task", "task")
    arch = _stored(cfg, "model", "arch") or _stored(cfg, "model", "_name")
    model_name = ARCH_MODEL_NAME_REGISTRY.get(arch, arch)
    routes = model_name == MODEL_NAME
    if task_name not in TASK_NAMES or (routes and task_name != TASK_NAME):
        raise HltmtInputError(
            f"checkpoint {path} holds a {arch or 'unknown'} model of task {task_name or 'unknown'}, not a multilingual "
            f"model of --task {' / '.join(TASK_NAMES)}; translate it with fairseq-generate / "
            "fairseq-interactive -s SRC -t TGT"
        )
    if _stored(cfg, "task", "lang_tok_replacing_bos_eos"):
        raise HltmtConfigError(
            f"checkpoint {path} was trained with --lang-tok-replacing-bos-eos; the translator "
            "serves models trained without it (translate this one with fairseq-generate)"
        )
    stored_data = _stored(cfg, "task", "data")
    folder = data or stored_data
    beside = os.path.dirname(os.path.abspath(path))
    if (
        not data
        and not os.path.isdir(str(stored_data or "").split(os.pathsep)[0])
        and glob.glob(os.path.join(glob.escape(beside), "dict.*.txt"))
    ):
        folder = beside  # a model shipped with its dictionaries beside it (e.g. the study's models)
    first = str(folder or "").split(os.pathsep)[0]
    if not first or not os.path.isdir(first):
        raise HltmtConfigError(
            f"the data folder {'given' if data else 'stored in the checkpoint'} ({first or 'none'}) does not exist: "
            "give data=DIR / --data DIR, the binarized folder with the dict.*.txt the model was trained with"
        )
    overrides = {"data": folder, "distributed_world_size": 1}
    if routes:  # the plugin's adapters and skills read each row's source-language id
        overrides["enable_lang_ids"] = True
    overwrite_args_by_name(cfg, overrides)
    if state.get("args") is not None:  # a legacy checkpoint: fairseq rebuilds cfg from these
        for key, value in overrides.items():
            setattr(state["args"], key, value)
    return state, folder, record


def check_spm(spm_path: str, symbols, model_options) -> None:
    """The sentencepiece model is the one that made the checkpoint's pieces: the one its record
    names (by content), and in any case one that makes nearly all of the dictionary's pieces
    (another model's pieces would be read as ``<unk>``)."""
    import sentencepiece

    recorded = record_of_options(model_options).get("spm")
    if recorded and recorded != sha256_file(spm_path):
        raise HltmtConfigError(
            f"sentencepiece model {spm_path} is not the one the checkpoint was trained with "
            f"(sha256 {sha256_file(spm_path)[:12]}, recorded {recorded[:12]}): give the training "
            "data's model (hltmt-prepare-data writes OUT/spm/spm.model)"
        )
    try:
        model = sentencepiece.SentencePieceProcessor(model_file=spm_path)
    except (OSError, RuntimeError) as error:
        raise HltmtInputError(f"{spm_path} is not a sentencepiece model ({str(error).strip()[:200]})") from None
    share = spm_coverage([model.id_to_piece(i) for i in range(model.get_piece_size())], symbols)
    if share < SPM_COVERAGE:
        raise HltmtConfigError(
            f"sentencepiece model {spm_path} does not fit the checkpoint's dictionary: it makes "
            f"only {share:.0%} of the dictionary's pieces (the rest would be read as <unk>): give "
            "the sentencepiece model of the training data"
        )


def check_record_of(path: str, record, task) -> None:
    """The record of the checkpoint ``path`` against the data folder, dictionary, languages and
    language-token options of ``task`` (fairseq's own multilingual task, which compares nothing):
    the comparison the plugin's task makes (:func:`hltmt_plugin.tasks.checkpoint_checks.check_record`)."""
    from hltmt_plugin.tasks.checkpoint_checks import DECODE_FIX, data_folder, given_record

    check(
        record,
        given_record(task, task.args),
        f"checkpoint {path}",
        DECODE_FIX,
        data=data_folder(task),
        fields=("dictionaries", "vocabulary", "languages", "marking"),
    )


class LoadedCheckpoint:
    """A checkpoint loaded for translation (:func:`load_for_translation`): its model, options
    and task, the sentencepiece model of its data, and what they give: the languages (in the
    order of ``--langs``), the shared dictionary, the plugin's model (or None), the source and
    target positions, the language table."""

    def __init__(self, path: str, model, cfg, task, spm: str):
        from fairseq import utils

        from hltmt_plugin.models.hltmt_transformer import plugin_model

        self.path, self.model, self.cfg, self.task, self.spm = path, model, cfg, task, spm
        self.dictionary = task.source_dictionary
        self.history: list = []  # the checkpoint's optimizer_history (load_for_translation)
        self.langs = list(task.langs)
        self.ours = plugin_model(model)  # the plugin's model (routing, language table), or None
        self.max_source_positions, self.max_target_positions = utils.resolve_max_positions(
            task.max_positions(), model.max_positions()
        )

    @functools.cached_property
    def languages(self) -> "LanguageTable":
        """The languages' tokens and ids: the model's own table, or one made from the task the
        same way for a model without one (fairseq's transformer)."""
        from hltmt_plugin.languages import LanguageTable

        ours = self.ours
        return ours.encoder.languages if ours is not None else LanguageTable.from_task(self.task, self.dictionary)


def load_for_translation(checkpoint, spm: Optional[str] = None, data: Optional[str] = None):
    """``(the loaded checkpoint, its data folder)``: the checkpoint of a multilingual task
    (:data:`TASK_NAMES`) read and checked (:func:`_read_checkpoint`), its sentencepiece model
    found (``spm``, else where the data and checkpoint lie) and checked against its dictionary,
    its model rebuilt (:func:`load_model`) and prepared as fairseq-generate prepares it (eval
    mode, generation-fast), on the CPU. ``data``: the binarized data folder, when not the
    stored one."""
    if not isinstance(checkpoint, (str, os.PathLike)):
        raise HltmtConfigError(f"checkpoint must be a path, got {type(checkpoint).__name__}")
    checkpoint = os.fspath(checkpoint)
    state, folder, record = _read_checkpoint(checkpoint, data)
    spm_path = _find_spm(spm, folder, checkpoint, _stored(state["cfg"], "bpe", "sentencepiece_model"))
    model, cfg, task = load_model(checkpoint, state=state, explain_missing=False)
    if _stored(cfg, "task", "_name") != TASK_NAME:  # (the plugin's task compares it as it builds the model)
        check_record_of(checkpoint, record, task)
    check_spm(spm_path, task.source_dictionary.symbols, cfg.model)
    model.prepare_for_inference_(cfg)  # what fairseq-generate does: eval mode, generation-fast
    loaded = LoadedCheckpoint(checkpoint, model, cfg, task, spm_path)
    loaded.history = list(state.get("optimizer_history") or [])  # the runs that made it (an import's record first)
    return loaded, folder
