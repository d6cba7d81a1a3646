"""One language's adapters as a file of their own (AdapterHub's save / load of an adapter).

``export_language`` writes a language's adapters and its language-token rows to a small file
that records a fingerprint of the base model (every parameter that is not an adapter or a
language token row), the adapter sizes and the directions naming the language that the model was
trained on; ``import_language`` puts them into a model of the same base and sizes, taking only
that language's own tensors, with the model's names, shapes and dtype and finite values, and
refuses anything else with one line; the model keeps the directions it was trained on and adds
the file's (:func:`hltmt_plugin.directions.extend_trained`). ``add_language`` gives
a trained model a new language (identity-initialised adapters). ``hltmt-adapters`` is
the command line for all three. Every file is written whole or not at all
(:func:`hltmt_plugin.atomic_files.save_torch`) and read weights-only
(:func:`hltmt_plugin.compat.safe_loading.load_plugin_file`).
"""

import hashlib
import logging
import os
import re
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from hltmt_plugin import records
from hltmt_plugin.adapters.feature import add_language as add_adapter_language
from hltmt_plugin.adapters.report import adapter_language, is_adapter_parameter
from hltmt_plugin.atomic_files import save_torch
from hltmt_plugin.compat.safe_loading import load_plugin_file
from hltmt_plugin.compatibility import RECORD_KEY, build_record, stored_options, stored_record
from hltmt_plugin.directions import TRAINED_KEY, extend_trained, trained_pairs
from hltmt_plugin.errors import HltmtInputError
from hltmt_plugin.languages import names_of, names_tensor

logger = logging.getLogger(__name__)

FILE_FORMAT = "hltmt_plugin.language_adapters"
FILE_VERSION = 2  # version 1 recorded no trained directions: read as none


def check_adapters(model) -> None:
    """``model`` has adapters, or one :class:`HltmtInputError` line."""
    _layout(model)


def _layout(model):
    layout = getattr(model.encoder, "adapter_layout", None)
    if layout is None:
        raise HltmtInputError(
            "this model has no adapters (it was built without --language-adapters / --invertible-adapters)"
        )
    return layout


def base_fingerprint(model) -> str:
    """sha256 over every parameter that is not an adapter, with the language token rows zeroed."""
    all_rows = {}
    for lang in model.encoder.languages.langs:
        for name, (_, index) in model.language_token_rows(lang).items():
            all_rows.setdefault(name, []).append(index)
    h = hashlib.sha256()
    for name, p in sorted(model.named_parameters()):
        if is_adapter_parameter(name):
            continue
        t = p.detach().to("cpu", torch.float32).contiguous()
        if name in all_rows:
            t = t.clone()
            t[all_rows[name]] = 0
        h.update(name.encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()


def language_parameters(model, lang: str) -> Dict[str, Tensor]:
    """The parameters of ``lang``'s language and invertible adapters, by state-dict name."""
    return {
        name: p for name, p in model.named_parameters() if is_adapter_parameter(name) and adapter_language(name) == lang
    }


def export_language(model, lang: str, path: str) -> Dict[str, object]:
    """Write ``lang``'s adapters and token rows to ``path`` (atomically); returns what was written."""
    layout = _layout(model)
    if lang not in layout.adapter_langs:
        raise HltmtInputError(f"this model has no adapters for {lang!r} (it has {','.join(layout.adapter_langs)})")
    tensors = {n: p.detach().cpu().clone() for n, p in language_parameters(model, lang).items()}
    directions = [pair for pair in trained_directions(model) if lang in pair.split("-", 1)]
    rows = {}
    for name, (p, index) in model.language_token_rows(lang).items():
        rows[name] = {"index": index, "row": p.detach()[index].cpu().clone()}
    blob = {
        "format": FILE_FORMAT,
        "version": FILE_VERSION,
        "lang": lang,
        "base": base_fingerprint(model),
        "sizes": layout.sizes(),
        "directions": directions,
        "tensors": tensors,
        "token_rows": rows,
    }
    save_torch(blob, path)
    logger.info(
        f"exported the adapters of {lang} ({sum(t.numel() for t in tensors.values()):,} parameters "
        f"+ {len(rows)} token row(s)) to {path}"
    )
    return blob


def trained_directions(model):
    """The directions ``model`` was trained on, from the options it was built with
    (:func:`hltmt_plugin.directions.trained_pairs`)."""
    return trained_pairs(getattr(model, "args", None))


_TENSOR = records.Instance(Tensor, "a tensor")
_FIELDS = {
    "format": records.Text(choices=[FILE_FORMAT]),
    "lang": records.Text(min_len=1, max_len=64, pattern=r"[\w-]+"),
    "base": records.SHA256,
    "sizes": records.MapOf(records.ANYTHING, max_len=100),
    "tensors": records.MapOf(_TENSOR, max_len=100_000),
    "token_rows": records.MapOf(records.Record({"index": records.Int(low=0), "row": _TENSOR}), max_len=100),
}
_DIRECTION = records.Text(min_len=3, max_len=129, pattern=r"[^\s,-]+-[^\s,-]+")
# each version's record: version 2 adds the trained directions naming the language (possibly none)
SCHEMAS = {
    1: records.Record({**_FIELDS, "version": records.Int(low=1, high=1)}),
    FILE_VERSION: records.Record(
        {**_FIELDS, "version": records.Int(low=2, high=2), "directions": records.ListOf(_DIRECTION, max_len=10_000)}
    ),
}
SCHEMA = SCHEMAS[FILE_VERSION]
MAX_ABS = 1e4  # trained adapter weights and embedding rows are O(1); larger values are not a trained adapter


def read_language_file(path: str) -> Dict[str, object]:
    """Read an adapter file written by ``export_language`` and check its structure
    (:data:`SCHEMA`: every entry present with its type, tensors that are tensors, token rows
    with an index and a row);
    what fits which model is checked by ``import_language``. Every problem is one
    HltmtInputError naming the file."""
    if not os.path.isfile(path):
        raise HltmtInputError(f"adapter file {path} does not exist")
    try:
        blob = load_plugin_file(path)
    except HltmtInputError:  # refused by the loader, in the line every route gives
        raise
    except Exception as error:  # noqa: BLE001 (any unreadable file is the same user error)
        raise HltmtInputError(f"adapter file {path} is not readable ({str(error).splitlines()[0]})") from None
    if not isinstance(blob, dict) or blob.get("format") != FILE_FORMAT:
        raise HltmtInputError(
            f"{path} is not an adapter file written by hltmt_plugin (export_language / hltmt-adapters export)"
        )
    version = blob.get("version")
    if type(version) is not int or version not in SCHEMAS:
        raise HltmtInputError(
            f"adapter file {path} has version {str(version)[:20]}; this plugin reads versions "
            f"{','.join(map(str, SCHEMAS))}"
        )
    blob = dict(records.check(blob, SCHEMAS[version], f"adapter file {path}"))
    blob.setdefault("directions", [])  # (version 1 recorded none)
    return blob


def _check_tensor(path: str, name: str, t: Tensor, shape: Tuple[int, ...], dtype: torch.dtype) -> None:
    """One tensor of an adapter file against the model's: shape, dtype, finite, plausible size."""
    if t.layout != torch.strided or t.dtype != dtype:
        raise HltmtInputError(
            f"adapter file {path}: {name} is {str(t.dtype).replace('torch.', '')}"
            f"{'' if t.layout == torch.strided else ' ' + str(t.layout)}, this model's is "
            f"{str(dtype).replace('torch.', '')}"
        )
    if tuple(t.shape) != tuple(shape):
        raise HltmtInputError(f"adapter file {path}: {name} has shape {tuple(t.shape)}, this model's is {tuple(shape)}")
    if not bool(torch.isfinite(t).all()):
        raise HltmtInputError(f"adapter file {path}: {name} holds NaN or infinite values")
    largest = float(t.abs().max()) if t.numel() else 0.0
    if largest > MAX_ABS:
        raise HltmtInputError(
            f"adapter file {path}: {name} holds values up to {largest:.3g} in absolute value "
            f"(more than {MAX_ABS:g}: not a trained adapter)"
        )


def _language_slots(model, lang: str) -> Dict[str, Tuple[Tuple[int, ...], torch.dtype]]:
    """name -> (shape, dtype) of every tensor ``lang``'s language and invertible adapters have
    (or would have once added: the names of another language's adapters, renamed), without
    changing the model."""
    params = dict(model.named_parameters())
    own = {
        n: (tuple(p.shape), p.dtype)
        for n, p in params.items()
        if is_adapter_parameter(n) and adapter_language(n) == lang
    }
    if own:
        return own
    ref = next((other for other in _layout(model).adapter_langs if other != lang), None)
    slots = {}
    for name, p in params.items():
        if ref is None or not is_adapter_parameter(name) or adapter_language(name) != ref:
            continue
        parts = name.split(".")
        at = next(
            i
            for i, part in enumerate(parts)
            if part == ref and adapter_language(".".join(parts[:i] + ["\0"] + parts[i + 1 :])) == "\0"
        )
        slots[".".join(parts[:at] + [lang] + parts[at + 1 :])] = (tuple(p.shape), p.dtype)
    return slots


def add_language(model, lang: str) -> None:
    """Give ``lang`` (a language of --langs) fresh identity adapters in a built model."""
    layout = _layout(model)
    if lang not in layout.langs:
        raise HltmtInputError(
            f"{lang!r} is not in this model's language list ({','.join(layout.langs)}): its "
            "vocabulary has no __" + lang + "__ token; give the checkpoint one with hltmt-adapters add-language"
        )
    if lang in layout.adapter_langs:
        return
    add_adapter_language(model.encoder, lang)
    if model.decoder.adapter_layout is not None:
        add_adapter_language(model.decoder, lang)
    layout.adapter_langs.append(lang)


def _check_fits(model, path: str, blob) -> str:
    """The file's language is one of the model's, its sizes and base are the model's; its language."""
    layout = _layout(model)
    lang = blob["lang"]
    if lang not in layout.langs:
        raise HltmtInputError(
            f"adapter file {path} is for {lang!r}, which is not in this model's language list "
            f"({','.join(layout.langs)}): its vocabulary has no __{lang}__ token"
        )
    mine = layout.sizes()
    diff = [
        f"{k} {blob['sizes'].get(k)!r} in the file, {v!r} in this model"
        for k, v in mine.items()
        if blob["sizes"].get(k) != v
    ]
    if diff:
        raise HltmtInputError(f"adapter file {path} ({lang}) does not fit this model's adapters: " + "; ".join(diff))
    base = base_fingerprint(model)
    if blob["base"] != base:
        raise HltmtInputError(
            f"adapter file {path} ({lang}) was exported from another base model "
            f"(fingerprint {blob['base'][:12]}, this model {base[:12]}): adapters only fit the "
            "base they were trained on"
        )
    return lang


def _check_adapter_tensors(model, path: str, lang: str, blob) -> Dict[str, tuple]:
    """Exactly the language's adapter tensors, each of this model's shape and dtype, finite."""
    slots = _language_slots(model, lang)
    foreign = sorted(n for n in blob["tensors"] if n not in slots)
    if foreign:
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise HltmtInputError(
            f"adapter file {path} is for {lang} but holds {foreign[0]}{more}, not one of {lang}'s "
            f"adapter tensors: an adapter file holds only its language's language and "
            f"invertible adapters"
        )
    missing = sorted(n for n in slots if n not in blob["tensors"])
    if missing:
        raise HltmtInputError(
            f"adapter file {path} ({lang}) lacks {len(missing)} of the {len(slots)} adapter "
            f"tensors of {lang}, e.g. {missing[0]}"
        )
    for name, t in blob["tensors"].items():
        _check_tensor(path, name, t, *slots[name])
    return slots


def _check_token_rows(model, path: str, lang: str, blob):
    """The ``__xx__`` rows of this model's token tables, at this vocabulary's index; the
    model's rows of ``lang`` (name -> (table, index))."""
    tables = model.language_token_rows(lang)
    if set(blob["token_rows"]) != set(tables):
        raise HltmtInputError(
            f"adapter file {path} ({lang}) has token rows for "
            f"{','.join(sorted(blob['token_rows'])) or 'no table'}; this model's language tokens "
            f"live in {','.join(sorted(tables))}"
        )
    for name, row in blob["token_rows"].items():
        p, index = tables[name]
        if row["index"] != index:
            raise HltmtInputError(
                f"adapter file {path}: __{lang}__ is row {row['index']} there and {index} here (another vocabulary)"
            )
        _check_tensor(path, f"the __{lang}__ row of {name}", row["row"], (p.size(1),), p.dtype)
    return tables


def import_language(model, path: str) -> str:
    """Load a file of ``export_language`` into ``model`` (same base and sizes); returns its language.

    The file is trusted for nothing: it must hold exactly its language's language and
    invertible adapter tensors and its ``__xx__`` token rows, with the names, shapes and
    dtype of this model's, finite and of plausible size (``MAX_ABS``); anything else (another
    language's tensors, a base weight such as the gate, NaN, int64 or float16 tensors) is
    refused with one HltmtInputError before the model is changed."""
    blob = read_language_file(path)
    lang = _check_fits(model, path, blob)
    slots = _check_adapter_tensors(model, path, lang, blob)
    tables = _check_token_rows(model, path, lang, blob)

    add_language(model, lang)
    params = dict(model.named_parameters())
    if set(language_parameters(model, lang)) != set(slots):  # the renamed slots must be what was added
        raise HltmtInputError(f"the adapters added for {lang} do not match the ones expected; nothing was imported")
    with torch.no_grad():
        for name, t in blob["tensors"].items():
            params[name].copy_(t)
        for name, row in blob["token_rows"].items():
            p, _ = tables[name]
            p[row["index"]] = row["row"].to(p)
    _note_import(model, blob["directions"])
    logger.info(f"imported the adapters of {lang} from {path}")
    return lang


def _note_import(model, directions) -> None:
    """The model's options after an import: its adapter languages, and the directions it was
    trained on extended by the file's whose languages all have adapters here (the rule:
    :func:`hltmt_plugin.directions.extend_trained`)."""
    layout, args = _layout(model), getattr(model, "args", None)
    if args is None:
        return
    served = [pair for pair in directions if all(side in layout.adapter_langs for side in pair.split("-", 1))]
    setattr(args, TRAINED_KEY, ",".join(extend_trained(trained_directions(model), served)))
    setattr(args, "adapter_langs", ",".join(layout.adapter_langs))


# ---- a language outside the base's --langs ---------------------------------------------------

TOKEN_TABLES = ("embed_tokens.weight", "output_projection.weight")  # the tables with a row per symbol
_LANG_NAME = re.compile(r"[A-Za-z0-9_]{1,64}")


def _unfit(options, task, tokens) -> Optional[str]:
    """Why a model cannot be given a language token row (None when it can)."""
    if getattr(options, "lang_dict", None):
        return "--lang-dict (a file lists its languages)"
    if getattr(options, "extra_data", None):
        return "--extra-data (its dictionary holds more tokens after the language tokens)"
    if getattr(options, "skill_ffn", False) or getattr(options, "skill_attention", False):
        return "skills (its --skill-matrix names its languages)"
    if list(task.source_dictionary.symbols)[-len(tokens) :] != tokens:
        return "a dictionary that does not end with the language tokens of --langs"
    return None


def _check_new_language(options, task, lang: str) -> str:
    """``lang`` can be given a token row: a new name, a model whose dictionary ends with the language
    tokens of ``--langs`` (the task appends them there, and appends the token of a language added at
    the end of ``--langs`` after them); its token."""
    from fairseq.data.multilingual.multilingual_utils import get_lang_tok

    langs = list(task.langs)
    if not _LANG_NAME.fullmatch(lang):
        raise HltmtInputError(f"--lang {lang[:70]!r}: a language name is letters, digits and _ (at most 64)")
    if lang in langs:
        raise HltmtInputError(
            f"{lang} is already in this model's language list ({','.join(langs)}): it has its token; train its "
            f"adapters with --adapter-langs ...,{lang} --train-only adapters:{lang},lang-token-rows:{lang}"
        )
    style = getattr(task.args, "lang_tok_style", None) or "multilingual"
    why = _unfit(options, task, [get_lang_tok(x, style) for x in langs])
    if why is not None:
        raise HltmtInputError(f"cannot add a language to this model: it was trained with {why}")
    token = get_lang_tok(lang, style)
    if token in task.source_dictionary.symbols:
        raise HltmtInputError(f"cannot add {lang}: {token} is already a symbol of the model's dictionary")
    return token


def store_options(state, changed: Dict[str, object]) -> None:
    """Options set in a checkpoint's state, in every section that holds them (``cfg.model``,
    ``cfg.task``, a legacy ``args``): a list stays a list, anything else is written as given."""
    cfg = state.get("cfg") or {}
    for section in cfg.get("model"), cfg.get("task"), state.get("args"):
        for name, value in changed.items() if section is not None else ():
            get = section.get if isinstance(section, dict) else lambda n: getattr(section, n, None)
            if section is not cfg.get("model") and get(name) is None:
                continue  # (the task's section holds only the task's options)
            value = value.split(",") if isinstance(get(name), list) and isinstance(value, str) else value
            if isinstance(section, dict):
                section[name] = value
            else:
                setattr(section, name, value)


def add_new_language(state, task, lang: str) -> str:
    """Give a checkpoint's state (as :func:`~hltmt_plugin.compat.safe_loading.load_state` reads
    it; ``task``: its task, rebuilt) a language outside its ``--langs``: ``lang`` appended to the
    stored ``--langs``, so that the task appends its token after the others (the dictionary's
    other indices unchanged); one row appended to every token table (the mean of the language
    tokens' rows: a start like theirs; every other row unchanged); the language table's saved
    names; the compatibility record's vocabulary and languages (made by
    :func:`~hltmt_plugin.compatibility.build_record`). Nothing else changes; the language's
    adapters start at identity in the run that trains them. Returns the new token."""
    options = stored_options(state)
    token = _check_new_language(options, task, lang)
    langs, symbols = list(task.langs), list(task.source_dictionary.symbols)
    rows = list(range(len(symbols) - len(langs), len(symbols)))
    weights = state["model"]
    for name, t in list(weights.items()):
        if name.endswith(".lang_names") and names_of(t) == langs:
            weights[name] = names_tensor(langs + [lang])
        elif t.dim() > 0 and t.size(0) == len(symbols):
            if not name.endswith(TOKEN_TABLES) or t.dim() != 2:
                raise HltmtInputError(
                    f"cannot add a language to this model: {name} has a row per symbol and is not a token "
                    f"table ({', '.join(TOKEN_TABLES)})"
                )
            weights[name] = torch.cat([t, t[rows].mean(0, keepdim=True)])
    record = stored_record(options)
    if record is None:
        raise HltmtInputError(f"cannot add a language to this model: it has no compatibility record ({RECORD_KEY})")
    fresh = build_record(options, symbols=symbols + [token], languages=langs + [lang])
    record.update(vocabulary=fresh["vocabulary"], languages=fresh["languages"])
    store_options(state, {"langs": ",".join(langs + [lang]), RECORD_KEY: record})
    return token
