"""The compatibility record: everything that gives a checkpoint's weights their meaning, and the
one comparison that every route makes before it uses a checkpoint.

A weight means something only with the token ids it was trained on (the data folder's
dictionaries, by content, and the task's dictionary with its language tokens), the languages
in their order (a language token's index, a language id), the way sentences are marked with
language tokens (``--encoder-langtok``, ``--decoder-langtok``, ...), the architecture and its
shape options, the pool and its routing options, the adapters' and skills' layout, and the
sentencepiece model that made the pieces. The record holds them, one field each:

    {"dictionaries": {"dict.de.txt": "<sha256>", ...},     # the binarized data's dictionaries
     "vocabulary": {"symbols": 8004, "sha256": "..."},    # the task's dictionary + language tokens
     "languages": ["en", "de", "fr"],                      # --langs / --lang-dict, in order
     "marking": {"--encoder-langtok": "tgt", ...},         # how languages are marked in the tokens
     "model": {"arch": "hltmt_transformer_tiny", "encoder_embed_dim": 128, ...},
     "spm": "<sha256 of the sentencepiece model>"}         # when known

A model built by ``--task hltmt_translation`` stores its record in its options
(``hltmt_compat``, saved in every checkpoint), and so does every checkpoint fairseq writes while
the plugin is loaded, whatever the task (``compat/checkpoint_record.py``), with the plugin's
version beside it (``hltmt_plugin_version``). Closed unless proven open: a record is complete
(:data:`REQUIRED`) or refused in one line, also when it is null or was removed from a checkpoint
of the plugin (its task, its model, its version or its older records say so); the plugin's
records from before this record (``hltmt_dict_fingerprint`` and ``hltmt_vocab_fingerprint``)
are read as one, complete or refused. Only a checkpoint written without the plugin (fairseq's
own, e.g. ``translation_multi_simple_epoch``) has no record: what its stored options say
(:data:`STOCK_FIELDS`) is compared, and :func:`check` serves it with one warning line naming the
data folder it was trained on and the one given, refused where the given folder's own
fingerprint (``dict_fingerprint.json``) says its dictionaries changed since binarization.
:func:`mismatches` compares two records field by field (a required field that one of them
lacks is a difference); :func:`check` turns the differences into one line that names each
field, the checkpoint's value and the given one. The routes that call it: fairseq-train's
resume, ``--restore-file`` and ``--finetune-from-model`` (``tasks/resume_check.py``), the task's
``build_model`` for a checkpoint (fairseq-generate, -interactive, -validate, fairseq's hub,
``hltmt-translate`` and the Python API), ``hltmt-average-checkpoints``, the sentencepiece
model of the translator, and the export.
"""

import hashlib
import os
import sys
from argparse import Namespace
from typing import Dict, List, Optional, Sequence

from hltmt_plugin import records
from hltmt_plugin.data_fingerprint import FINGERPRINT_FILE, check_dictionaries, dictionary_fingerprint, sha256_file
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError

RECORD_KEY = "hltmt_compat"  # the model options' attribute that holds the record in a checkpoint
VERSION_KEY = "hltmt_plugin_version"  # beside the record: the plugin's version that wrote the checkpoint
PLUGIN_TASK, PLUGIN_MODEL = (
    "hltmt_translation",
    "hltmt_transformer",
)  # (an architecture of the model: hltmt_transformer_*)
# every record holds these (the sentencepiece model where the data has one, the version where written since 0.2)
REQUIRED = ("dictionaries", "vocabulary", "languages", "marking", "model")
# what the options of a checkpoint written without the plugin say (it has no record)
STOCK_FIELDS = ("languages", "marking", "model")
NO_RECORD = "no_record"  # in the record read from such a checkpoint's options: {"trained_on": its data folder}
# the record's parts as the plugin stored them before the record (read from old checkpoints)
OLD_DICTS, OLD_VOCAB = "hltmt_dict_fingerprint", "hltmt_vocab_fingerprint"

# model options that decide the shape or the meaning of weights (read where present)
SHAPE_OPTIONS = (
    "encoder_embed_dim",
    "encoder_ffn_embed_dim",
    "encoder_layers",
    "encoder_attention_heads",
    "decoder_embed_dim",
    "decoder_ffn_embed_dim",
    "decoder_layers",
    "decoder_attention_heads",
    # (not --share-decoder-input-output-embed: fairseq's build sets it from --share-all-embeddings)
    "decoder_output_dim",
    "decoder_input_dim",
    "share_all_embeddings",
    "encoder_normalize_before",
    "decoder_normalize_before",
    "activation_fn",
    "layernorm_embedding",
    "no_scale_embedding",
    "encoder_learned_pos",
    "decoder_learned_pos",
    "no_token_positional_embeddings",
    "adaptive_softmax_cutoff",
    "encoder_layers_to_keep",
    "decoder_layers_to_keep",
    "quant_noise_pq",
)
# the plugin's options of the same kind: the pool, the adapters, the skills
FEATURE_OPTIONS = (
    "high_resource_langs",
    "slp_pool_size",
    "slp_hidden_dim",
    "slp_language_specific",
    "language_adapters",
    "shared_adapters",
    "decoder_adapters",
    "invertible_adapters",
    "adapter_placement",
    "adapter_reduction_factor",
    "adapter_dim",
    "shared_adapter_reduction_factor",
    "shared_adapter_dim",
    "invertible_adapter_reduction_factor",
    "adapter_layers",
    "decoder_adapter_layers",
    "adapter_langs",
    "skill_ffn",
    "skill_attention",
    "skill_layers",
    "skill_matrix",
)
# model options naming languages that a model built from them reads in any order: the pool's router
# reorders a checkpoint's routing map to the order given (pool.router.LanguageRouter.upgrade_state_dict_named)
ANY_ORDER = ("high_resource_langs",)


_NAME = records.Text(min_len=1, max_len=200)
DICTIONARIES = records.MapOf(
    records.SHA256, key=records.Text(pattern=r"dict\.[^/]{1,200}\.txt"), min_len=1, max_len=10_000
)
VOCABULARY = records.Record({"symbols": records.Int(low=1), "sha256": records.SHA256})
_SCALAR = (None, bool, records.Int(), records.Number(), str)  # an option's value as model_fields keeps it
_OPTION = records.OneOf(*_SCALAR, records.ListOf(records.OneOf(*_SCALAR, records.ListOf(records.OneOf(*_SCALAR)))))
# the record as a checkpoint stores it: every field but the sentencepiece model (where the data has
# none) and the version (records written before 0.2 lack it); the model's options are the known ones
SCHEMA = records.Record(
    {
        "marking": records.MapOf(_NAME, min_len=1, max_len=100),
        "model": records.Record({"arch": _NAME}, optional={name: _OPTION for name in SHAPE_OPTIONS + FEATURE_OPTIONS}),
        "dictionaries": DICTIONARIES,
        "vocabulary": VOCABULARY,
        "languages": records.ListOf(_NAME, min_len=1, max_len=10_000),
    },
    optional={"spm": records.SHA256, records.VERSION_FIELD: records.Text(min_len=1, max_len=40)},
)
WHERE = "the checkpoint's compatibility record"


def vocabulary_fingerprint(symbols: Sequence[str]) -> Dict[str, object]:
    """The task's dictionary (pieces and language tokens, in index order) as size and digest."""
    digest = hashlib.sha256("\n".join(symbols).encode("utf-8", "surrogatepass")).hexdigest()
    return {"symbols": len(symbols), "sha256": digest}


def _main_langtoks(options):
    """The (source, target) language-token specs of the main data, as fairseq's data manager
    derives them: ``--langtoks``'s ``main`` entry, else ``--encoder-langtok`` / ``--decoder-langtok``."""
    langtoks = getattr(options, "langtoks", None)
    if isinstance(langtoks, dict) and langtoks.get("main") is not None:
        src, tgt = tuple(langtoks["main"])
        return src or None, tgt or None
    return getattr(options, "encoder_langtok", None) or None, "tgt" if getattr(
        options, "decoder_langtok", False
    ) else None


def language_marking(options) -> List[tuple]:
    """Every option of fairseq's multilingual data manager that changes the token sequence a
    model sees (where the language tokens go, how they are written, which ones the dictionary
    holds), as (option, value). Not marking: ``--left-pad-*`` (the model reads either padding),
    ``--truncate-source`` (cuts only over-long input), ``--keep-inference-langtok`` (output only),
    ``--enable-lang-ids`` (a model that needs the ids says so per batch),
    ``--enable-reservsed-directions-shared-datasets`` (memory only)."""
    src, tgt = _main_langtoks(options)
    extra = getattr(options, "extra_data", None)
    return [
        ("--encoder-langtok", src or "none"),
        ("--decoder-langtok", {None: "off", "tgt": "on"}.get(tgt, tgt)),
        ("--lang-tok-replacing-bos-eos", "on" if getattr(options, "lang_tok_replacing_bos_eos", False) else "off"),
        ("--lang-tok-style", getattr(options, "lang_tok_style", None) or "multilingual"),
        ("--langtoks-specs", ",".join(getattr(options, "langtoks_specs", None) or ["main"])),
        ("--extra-data mono_dae", "on" if isinstance(extra, dict) and "mono_dae" in extra else "off"),
    ]


def _plain(value):
    """An option value as the record keeps it (plain types only: a checkpoint loads weights-only)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def model_fields(options) -> Dict[str, object]:
    """The architecture and every shape / feature option ``options`` holds."""
    fields = {"arch": getattr(options, "arch", None) or getattr(options, "_name", None)}
    for name in SHAPE_OPTIONS + FEATURE_OPTIONS:
        if hasattr(options, name):
            fields[name] = _plain(getattr(options, name))
    return fields


def build_record(
    options,
    data: Optional[str] = None,
    symbols: Optional[Sequence[str]] = None,
    languages: Optional[Sequence[str]] = None,
    spm: Optional[str] = None,
) -> Dict[str, object]:
    """The record of a model built from ``options`` on the data folder ``data`` (its
    dictionaries), with the task's dictionary ``symbols``, ``languages`` (default: ``--langs``)
    and the sentencepiece model file ``spm``: the parts that are given."""
    record: Dict[str, object] = {"marking": dict(language_marking(options)), "model": model_fields(options)}
    record[records.VERSION_FIELD] = records.plugin_version()
    if data:
        record["dictionaries"] = dictionary_fingerprint(data)
    if symbols is not None:
        record["vocabulary"] = vocabulary_fingerprint(symbols)
    langs = list(languages) if languages is not None else getattr(options, "langs", None)
    if langs:
        record["languages"] = [str(x) for x in langs]
    if spm:
        record["spm"] = sha256_file(spm)
    return record


def _option(options, name: str):
    return options.get(name) if isinstance(options, dict) else getattr(options, name, None)


def _has(options, name: str) -> bool:
    return name in options if isinstance(options, dict) else hasattr(options, name)


def written_by_plugin(options, task: Optional[str] = None) -> bool:
    """Whether a checkpoint's model options (stored under the task ``task``, else the one they
    name) were written by the plugin: its task, an architecture of its model, its version, its
    record or its older records (even null: a record set to null was there)."""
    arch = _option(options, "_name") or _option(options, "arch")
    return (
        (task or _option(options, "task")) == PLUGIN_TASK
        or (isinstance(arch, str) and (arch == PLUGIN_MODEL or arch.startswith(PLUGIN_MODEL + "_")))
        or any(_has(options, key) for key in (RECORD_KEY, VERSION_KEY, OLD_DICTS, OLD_VOCAB))
    )


def stored_record(options) -> Optional[Dict[str, object]]:
    """The record a checkpoint's model options hold (checked: an empty, partial, null or
    malformed record is one HltmtInputError line, never "no record"), or None when they hold none."""
    if not _has(options, RECORD_KEY):
        return None
    return dict(records.check(_option(options, RECORD_KEY), SCHEMA, WHERE))


def _older_record(options) -> Dict[str, object]:
    """The record of a checkpoint the plugin wrote before this record: its options, with the
    dictionaries and vocabulary it recorded (``hltmt_dict_fingerprint``, ``hltmt_vocab_fingerprint``), both
    there or refused."""
    record = build_record(options)
    del record[records.VERSION_FIELD]  # (not known: the version is never compared)
    for old, field, schema in ((OLD_DICTS, "dictionaries", DICTIONARIES), (OLD_VOCAB, "vocabulary", VOCABULARY)):
        if _has(options, old):
            record[field] = dict(
                records.check(_option(options, old), schema, f"the checkpoint's {field} record ({old})")
            )
    return dict(records.check(record, SCHEMA, "the checkpoint's older compatibility record (hltmt_plugin < 0.2)"))


def _stock_record(options, trained_on: Optional[str]) -> Dict[str, object]:
    """What the options of a checkpoint written without the plugin say (:data:`STOCK_FIELDS`), and
    the data folder it was trained on (:data:`NO_RECORD`)."""
    record = build_record(options)
    record = {field: record[field] for field in STOCK_FIELDS if field in record}
    record[NO_RECORD] = {"trained_on": str(trained_on or _option(options, "data") or "unknown")}
    return record


def no_record(record: Dict[str, object]) -> bool:
    """Whether ``record`` was read from the options of a checkpoint written without the plugin."""
    return NO_RECORD in record


def _arch_edits(stored: Dict[str, object], options) -> List[str]:
    """The architecture fairseq would build from ``options`` (``_name``, else ``arch``) where it
    is not the one the record was written for (another of the same shapes is another model)."""
    written = stored["model"]["arch"]
    names = [getattr(options, n, None) for n in ("_name", "arch")]
    now = next((n for n in names if n), None)
    if now is None or all(n in (None, written) for n in names):
        return []
    return [f"--arch: written {written}, now {now}"]


def record_of_options(
    options, edits: bool = True, task: Optional[str] = None, trained_on: Optional[str] = None
) -> Dict[str, object]:
    """What a checkpoint's stored model options say: the record stored with them (what training
    saw, whatever a command's overrides put in the options since), complete or refused; for the
    plugin's checkpoints from before the record, the older record; a checkpoint of the plugin
    (:func:`written_by_plugin`, ``task``: its stored task) without either is refused. Only a
    checkpoint written without the plugin gives what its options say, marked :func:`no_record`
    with the data folder it was trained on (``trained_on``, else the options' ``data``). With
    ``edits``, a stored record whose shape options or language-token marking differ from the
    options means the file's options were edited (or overridden) so that the weights no longer fit
    them or the model would read its languages otherwise: :class:`HltmtInputError` naming each
    difference."""
    if isinstance(options, dict):
        options = Namespace(**options)
    stored = stored_record(options)
    if stored is None:
        if _has(options, OLD_DICTS) or _has(options, OLD_VOCAB):
            return _older_record(options)
        if written_by_plugin(options, task):
            raise HltmtInputError(
                f"{WHERE} is missing: the checkpoint was written by hltmt_plugin (task "
                f"{task or _option(options, 'task') or 'unknown'}, architecture {_option(options, 'arch') or 'unknown'}) "
                f"and must hold its record ({RECORD_KEY}); use the checkpoint as its training run wrote it"
            )
        return _stock_record(options, trained_on)
    edited = _arch_edits(stored, options) + mismatches(
        stored,
        build_record(options),
        fields=("model", "marking"),
        model_options=SHAPE_OPTIONS,
        labels=("written", "now"),
    )
    if edited and edits:
        raise HltmtInputError(
            f"the checkpoint's stored options were changed after it was written "
            f"({'; '.join(edited)}): the weights no longer mean what the options say; use the "
            "checkpoint as its training run wrote it"
        )
    return stored


def _short(value, width: int = 60) -> str:
    text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _same_option(name: str, was, now, in_order: bool) -> bool:
    """Whether a model option has the same meaning in both records: the languages of an
    :data:`ANY_ORDER` option in any order (unless ``in_order``), every other option as it is."""
    if in_order or name not in ANY_ORDER or not isinstance(was, str) or not isinstance(now, str):
        return was == now
    languages = lambda value: sorted(x.strip() for x in value.split(",") if x.strip())  # noqa: E731
    return languages(was) == languages(now)


def _dict_mismatches(was: dict, now: dict, a: str, b: str) -> List[str]:
    differ = sorted(n for n in was if n in now and was[n] != now[n])
    gone = sorted(n for n in was if n not in now)
    return ([f"dictionaries: {', '.join(differ)} differ in content"] if differ else []) + (
        [f"dictionaries: {', '.join(gone)} in the {a}'s record, not in the {b}'s data"] if gone else []
    )


def mismatches(
    checkpoint: Dict[str, object],
    given: Dict[str, object],
    fields: Sequence[str] = ("dictionaries", "vocabulary", "languages", "marking", "model", "spm"),
    model_options: Optional[Sequence[str]] = None,
    labels=("checkpoint", "given"),
    in_order: bool = False,
) -> List[str]:
    """Each difference between the records ``checkpoint`` and ``given`` as ``FIELD: checkpoint X,
    given Y`` (``labels`` name the two sides), over ``fields`` (``model_options``: only these model
    options; a model option or marking only one side holds is not compared). A :data:`REQUIRED`
    field that one side holds and the other lacks is a difference; one that neither holds is not
    compared (two checkpoints written without the plugin). ``--high-resource-langs`` is compared as
    a model built from the options reads it, the same languages in any order (:data:`ANY_ORDER`);
    with ``in_order``, as written (stored states compared with each other, which no model reorders)."""
    a, b = labels
    out: List[str] = []
    for field in fields:
        was, now = checkpoint.get(field), given.get(field)
        if was is None or now is None:
            if field in REQUIRED and (was is None) != (now is None):
                out.append(f"{field}: none in the {a if was is None else b} record")
            continue
        if field == "dictionaries":
            out += _dict_mismatches(was, now, a, b)
        elif field == "vocabulary" and was != now:
            same = was.get("symbols") == now.get("symbols")
            out.append(
                f"vocabulary: {a} {was.get('symbols')} symbols, {b} {now.get('symbols')}"
                + (" (same size, other symbols)" if same else "")
            )
        elif field in ("marking", "model"):
            names = [n for n in was if n in now and (model_options is None or field != "model" or n in model_options)]
            out += [
                f"{n if field == 'marking' else '--' + n.replace('_', '-')}: {a} {_short(was[n])}, {b} {_short(now[n])}"
                for n in names
                if not (_same_option(n, was[n], now[n], in_order) if field == "model" else was[n] == now[n])
            ]
        elif field == "spm" and was != now:
            out.append(f"sentencepiece model: {a} {str(was)[:12]}, {b} {str(now)[:12]} (sha256)")
        elif was != now:
            out.append(f"{field}: {a} {_short(was)}, {b} {_short(now)}")
    return out


def warn(message: str) -> None:
    """One warning line on standard error (seen also where a command silences fairseq's log)."""
    print(f"hltmt_plugin: warning: {message}", file=sys.stderr, flush=True)


def _refuse_changed_data(checkpoint: Dict[str, object], what: str, data: Optional[str]) -> None:
    """A checkpoint without a record given a data folder whose fingerprint says its dictionaries
    changed since binarization: nothing else shows they are the ones the model learned."""
    problems = check_dictionaries(data) if data else []
    if problems:
        raise HltmtInputError(
            f"{what} carries no compatibility record (written without hltmt_plugin; trained on "
            f"{checkpoint[NO_RECORD]['trained_on']}) and the data folder {data} changed since it was binarized "
            f"({'; '.join(problems[:3])}{f'; {len(problems) - 3} more' if len(problems) > 3 else ''}, says its "
            f"{FINGERPRINT_FILE}): its token ids no longer mean what the model "
            "learned; give the data folder it was trained on, as it was binarized"
        )


def _warn_no_record(checkpoint: Dict[str, object], what: str, data: Optional[str]) -> None:
    fingerprint = (
        f"its dictionaries are unchanged since binarization (its {FINGERPRINT_FILE}), but nothing shows they are "
        "the ones the model learned: a folder rebuilt in another order and fingerprinted again passes too"
        if data and os.path.lexists(os.path.join(data, FINGERPRINT_FILE))
        else f"it has no {FINGERPRINT_FILE}, so nothing shows its dictionaries are the ones the model learned"
    )
    warn(
        f"{what} carries no compatibility record (written without hltmt_plugin), so only its stored options "
        f"are compared: trained on the data folder {checkpoint[NO_RECORD]['trained_on']}, given {data or 'none'}; "
        f"{fingerprint}"
    )


def check(
    checkpoint: Dict[str, object], given: Dict[str, object], what: str, fix: str, data: Optional[str] = None, **kwargs
) -> None:
    """Refuse, in one line, a checkpoint (``what``) whose record differs from ``given`` (the
    record of the data folder ``data`` and the options given now). A checkpoint without a record
    (:func:`no_record`) is refused where ``data``'s fingerprint says its dictionaries changed since
    binarization, compared on :data:`STOCK_FIELDS`, and served with one warning line naming the
    folder it was trained on and ``data``."""
    recordless = no_record(checkpoint)
    if recordless:
        _refuse_changed_data(checkpoint, what, data)
        kwargs["fields"] = [f for f in kwargs.get("fields", STOCK_FIELDS) if f in STOCK_FIELDS]
    differ = mismatches(checkpoint, given, **kwargs)
    if differ:
        raise HltmtConfigError(f"{what} does not fit: {'; '.join(differ)}: {fix}")
    if recordless:
        _warn_no_record(checkpoint, what, data)


def spm_coverage(spm_pieces: Sequence[str], symbols: Sequence[str]) -> float:
    """The share of the dictionary's pieces (language tokens and fairseq's specials left out) that
    the sentencepiece model can produce: about 1 for the model that made the pieces."""
    pieces = set(spm_pieces)
    words = [
        s
        for s in symbols
        if not (s.startswith("__") and s.endswith("__"))
        and not s.startswith("madeupword")
        and s not in ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
    ]
    return sum(1 for s in words if s in pieces) / max(1, len(words))


def stored_options(state) -> Namespace:
    """The model options a checkpoint's state stores (``cfg.model``, or a legacy ``args``)."""
    cfg = state.get("cfg") if isinstance(state, dict) else None
    model = cfg.get("model") if hasattr(cfg, "get") else None
    if model is None and isinstance(state, dict):
        model = state.get("args")
    if isinstance(model, Namespace):
        return model
    if hasattr(model, "items"):
        return Namespace(**{str(k): v for k, v in model.items()})
    return Namespace()


def record_of_state(state) -> Dict[str, object]:
    """The record of a checkpoint's state (see :func:`record_of_options`; its stored task and
    data folder from ``cfg.task``)."""
    cfg = state.get("cfg") if isinstance(state, dict) else None
    task = cfg.get("task") if hasattr(cfg, "get") else None
    return record_of_options(
        stored_options(state), task=_stored_text(task, "_name"), trained_on=_stored_text(task, "data")
    )


def _stored_text(section, name: str) -> Optional[str]:
    value = section.get(name) if isinstance(section, dict) else getattr(section, name, None)
    return value if isinstance(value, str) else None
