"""The export folder's manifest (``manifest.json``): what serving an exported model needs,
written by each engine's exporter (:mod:`hltmt_plugin.hub.engines`: its format, its own fields,
the files it serves from; :func:`write`) and checked on load like a checkpoint is (:func:`read`).

::

    EXPORT_DIR/manifest.json        this record
    EXPORT_DIR/manifest.sha256      the SHA-256 of the record's content (listed among the files)
    EXPORT_DIR/spm.model            the sentencepiece model of the data
    EXPORT_DIR/dict.txt             the shared dictionary the model was trained with
    EXPORT_DIR/models/<group>/      one CTranslate2 model per group of target languages: the first
                                    whole, each other one as the byte ranges of its model.bin that
                                    differ (model.patch, :mod:`hltmt_plugin.hub.patches`: the
                                    routed layer), with its config.json and vocabulary

The record names the languages (in the order of the model's ``--langs``), the directions the
model was trained on (``lang_pairs``), the language-token convention (``encoder_langtok``:
``tgt``, ``src`` or none; ``decoder_langtok``; the token of each language), the routing map of
an HLT-MT pool (``routing_map``: target language -> pool module), which group serves each
target language (``targets``), the plugin's version that wrote it (``plugin_version``, shown,
never compared) and the SHA-256 of every file, so that a folder whose files were changed, cut
or swapped is refused before anything is served.

The record is bound to the folder both ways: the files' digests are in the record, and the
digest of the record (every field; of ``files`` every entry but the digest file's own) is in
``manifest.sha256``, itself one of the listed files. An edit of ``manifest.json`` alone (another
target, an emptied ``lang_pairs``, other language tokens) no longer matches that digest; an
edit of the digest file no longer matches its listed SHA-256. On load the record is also
checked against itself and the folder: each language token is a symbol of ``dict.txt`` and is
the language's token in one convention, ``targets`` follows the routing map (the pool module
``m<k>`` of a routed language, ``universal`` for the others, ``main`` without a pool) and names
exactly the models of the folder, and a model of several languages lists the directions it was
trained on. The folder's files are read without following links: a link, FIFO, socket or device
anywhere in it is refused in one line without being opened.
"""

import hashlib
import json
import os
import stat
from typing import Dict, List

from hltmt_plugin import records
from hltmt_plugin.atomic_files import MARKER
from hltmt_plugin.errors import HltmtInputError
from hltmt_plugin.hub import engines

# CTranslate2's weight types (hltmt-export --quantization), here so that the command's options need no model code
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16")

MANIFEST = "manifest.json"
DIGEST = "manifest.sha256"  # the SHA-256 of the record's content
VERSION = 2  # 2: the record's digest in manifest.sha256
MAX_FILES = 10_000

_LANG = engines.LANG
_GROUP = records.Text(pattern=r"main|universal|m[0-9]{1,6}")
_PATH = records.Text(min_len=1, max_len=1000, pattern=r"[^\x00-\x1f\\]+")
SCHEMA = records.Record(
    {
        "format": records.Text(choices=engines.FORMATS),
        "version": records.Int(low=VERSION, high=VERSION),
        "engine": records.Text(choices=engines.EXPORTED),
        "langs": records.ListOf(_LANG, min_len=1, max_len=10_000),
        "lang_pairs": records.ListOf(records.Text(min_len=3, max_len=130, pattern=r"[^\s,]+-[^\s,]+")),
        "encoder_langtok": (records.Text(choices=["src", "tgt"]), None),
        "decoder_langtok": bool,
        "language_tokens": records.MapOf(records.Text(min_len=1, max_len=100), key=_LANG),
        "routing_map": records.MapOf(records.Int(low=0, high=999_999), key=_LANG),
        "targets": records.MapOf(_GROUP, key=_LANG, min_len=1),
        "models": records.MapOf(_PATH, key=_GROUP, min_len=1, max_len=100_000),
        "routes": bool,
        "quantization": records.Text(choices=QUANTIZATIONS),
        "max_source_positions": records.Int(low=2),
        "max_target_positions": records.Int(low=2),
        "files": records.MapOf(records.SHA256, key=_PATH, min_len=1, max_len=MAX_FILES),
        "source": records.MapOf(records.ANYTHING, max_len=100),
        "patches": records.MapOf(_GROUP, key=_GROUP),
    },
    optional={records.VERSION_FIELD: records.Text(max_len=40)},
)
LANGUAGE_TOKENS = ("__{}__", "[{}]")  # fairseq's --lang-tok-style multilingual and mbart


def schema_of(engine: str) -> records.Record:
    """The manifest's schema for ``engine``: the common fields and the engine's own
    (:mod:`hltmt_plugin.hub.engines`)."""
    return SCHEMA.extended(optional=engines.ENGINES[engine].fields if engine in engines.EXPORTED else {})


# ---- the folder's files, never following a link --------------------------------------------


def _special(path: str, mode: int) -> str:
    kinds = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))
    kind = next((name for test, name in kinds if test(mode)), "a device or special file")
    return f"{path} is {kind}: an export folder holds regular files only (refused without being opened)"


def _entries(folder: str):
    """(relative path, full path) of every regular file under ``folder``; a link, FIFO, socket
    or device anywhere in it is one HltmtInputError, found by its entry (never opened)."""
    stack = [""]
    count = 0
    while stack:
        rel = stack.pop()
        try:
            with os.scandir(os.path.join(folder, rel) if rel else folder) as found:
                entries = sorted(found, key=lambda e: e.name)
        except OSError as error:
            raise HltmtInputError(f"cannot read the export folder {folder} ({error.strerror or error})") from None
        for entry in entries:
            name = f"{rel}/{entry.name}" if rel else entry.name
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode):
                stack.append(name)
            elif stat.S_ISREG(mode):
                count += 1
                if count > MAX_FILES:
                    raise HltmtInputError(f"{folder} holds more than {MAX_FILES} files: not an export folder")
                yield name, entry.path
            else:
                raise HltmtInputError(_special(entry.path, mode))


def _sha256(path: str) -> str:
    """The SHA-256 of the regular file ``path``, opened without following a link and without
    blocking (a file swapped for a FIFO or device since it was listed is refused)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as error:
        raise HltmtInputError(f"cannot read {path} ({error.strerror or error})") from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise HltmtInputError(_special(path, mode))
        h = hashlib.sha256()
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def files_of(folder: str) -> Dict[str, str]:
    """Every file under ``folder`` but the manifest, its digest and the writer's marker:
    relative path -> SHA-256 (links and special files refused, never followed)."""
    return {rel: _sha256(path) for rel, path in _entries(folder) if rel not in (MANIFEST, DIGEST, MARKER)}


def is_export(path) -> bool:
    """Whether ``path`` is a folder that holds an export manifest (checked by :func:`read`)."""
    if not isinstance(path, (str, os.PathLike)):
        return False
    folder = os.fspath(path)
    return os.path.isdir(folder) and os.path.lexists(os.path.join(folder, MANIFEST))


# ---- the record's digest -------------------------------------------------------------------


def content_digest(record: dict) -> str:
    """The SHA-256 of the record's content: every field, and of ``files`` every entry but the
    digest file's own, as canonical JSON."""
    content = dict(record, files={k: v for k, v in record.get("files", {}).items() if k != DIGEST})
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def write(work: str, record: dict) -> dict:
    """Complete ``record`` (``plugin_version``; ``files``: every file of ``work``) and write it
    as ``work/manifest.json`` with its digest (``manifest.sha256``); returns the record."""
    record[records.VERSION_FIELD] = records.plugin_version()
    record["files"] = files_of(work)
    with open(os.path.join(work, DIGEST), "w", encoding="ascii") as f:
        f.write(content_digest(record) + "\n")
    record["files"][DIGEST] = _sha256(os.path.join(work, DIGEST))
    with open(os.path.join(work, MANIFEST), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")
    return record


# ---- reading -------------------------------------------------------------------------------


def read(folder: str) -> dict:
    """The manifest of ``folder``, checked: its fields, that every file it lists is there,
    unchanged, with no other file beside them, that it is the record those files were written
    with (its digest), and that it holds together (languages, tokens, groups, directions).
    HltmtInputError naming the first problem."""
    folder = os.fspath(folder)
    path = os.path.join(folder, MANIFEST)
    record = _read_record(path)
    _check_files(record, folder)
    _check_digest(record, folder)
    _check_languages(record, path)
    _check_tokens(record, folder)
    _check_groups(record, path)
    return record


def _read_record(path: str) -> dict:
    try:
        mode = os.lstat(path).st_mode
    except OSError as error:
        raise HltmtInputError(f"{path} is not an export manifest ({error.strerror or error})") from None
    if not stat.S_ISREG(mode):
        raise HltmtInputError(_special(path, mode))
    where = f"export manifest {path}"
    record = records.parse_json(records.read_text(path, "export manifest", 4 * 1024 * 1024), where)
    if not isinstance(record, dict) or record.get("format") not in engines.FORMATS:
        raise HltmtInputError(f"{path} is not a manifest of hltmt-export (of a format {', '.join(engines.FORMATS)})")
    if record.get("version") != VERSION:
        raise HltmtInputError(
            f"{path} is version {str(record.get('version'))[:20]} of the export format; this plugin reads "
            f"version {VERSION}: export the checkpoint again"
        )
    engine = record.get("engine")
    record = records.check(record, schema_of(engine if isinstance(engine, str) else ""), where)
    if not engines.reads_format(engine, record["format"]):
        raise HltmtInputError(f"{path}: a manifest of format {record['format']} is not of an export to {engine}")
    return record


def _check_digest(record: dict, folder: str) -> None:
    with open(os.path.join(folder, DIGEST), encoding="ascii", errors="replace") as f:
        stored = f.read(200).strip()
    if stored != content_digest(record):
        raise HltmtInputError(
            f"{os.path.join(folder, MANIFEST)} is not the record this folder was exported with (its digest in "
            f"{DIGEST} differs: the manifest was edited): export the checkpoint again"
        )


def _wanted(record: dict) -> List[str]:
    """The files the record's engine and models need (the engine's declaration)."""
    return engines.get(record["engine"]).files(record)


def _check_files(record: dict, folder: str) -> None:
    patches = record["patches"]  # group -> the group whose model.bin its model.patch applies to
    if any(base not in record["models"] or base in patches for base in patches.values()):
        raise HltmtInputError(f"{folder}: the manifest's 'patches' must name models stored whole")
    if not all(
        os.path.normpath(m) == m.rstrip("/") and not m.startswith(("/", "..")) for m in record["models"].values()
    ):
        raise HltmtInputError(f"{folder}: the manifest's 'models' must name folders inside the export folder")
    listed = record["files"]
    missing = [name for name in [*_wanted(record), DIGEST] if name not in listed]
    if missing:
        raise HltmtInputError(f"{folder}: the manifest does not list {', '.join(missing[:3])} as files of the folder")
    present = dict(_entries(folder))
    for name, digest in listed.items():
        if name not in present:
            raise HltmtInputError(f"{folder}: {name} is missing (the manifest lists it)")
        if _sha256(present[name]) != digest:
            raise HltmtInputError(f"{folder}: {name} is not the file that was exported (its SHA-256 differs)")
    extra = sorted(set(present) - set(listed) - {MANIFEST, MARKER})
    if extra:
        raise HltmtInputError(f"{folder}: {extra[0]} is not a file of the export (the manifest does not list it)")


def _check_languages(record: dict, path: str) -> None:
    langs: List[str] = record["langs"]
    if len(set(langs)) != len(langs):
        raise HltmtInputError(f"{path}: 'langs' must list distinct language codes")
    known = set(langs)
    for pair in record["lang_pairs"]:
        src, _, tgt = pair.partition("-")
        if src not in known or tgt not in known or src == tgt:
            raise HltmtInputError(f"{path}: 'lang_pairs' holds {pair[:40]!r}, not a direction between two of 'langs'")
    if len(langs) > 1 and not record["lang_pairs"]:
        raise HltmtInputError(
            f"{path}: 'lang_pairs' is empty: a model of several languages lists its trained directions"
        )
    if set(record["targets"]) != known:
        raise HltmtInputError(f"{path}: 'targets' must name the model serving each language of 'langs'")
    if not set(record["routing_map"]) <= known:
        raise HltmtInputError(f"{path}: 'routing_map' must map languages of 'langs' to pool modules")
    marked = record["encoder_langtok"] is not None or record["decoder_langtok"]
    if set(record["language_tokens"]) != (known if marked else set()):
        raise HltmtInputError(
            f"{path}: 'language_tokens' must give the token of each language of 'langs'"
            if marked
            else f"{path}: 'language_tokens' given for a model that marks no language with a token"
        )


def _dictionary_symbols(path: str) -> set:
    """The symbols of a fairseq dictionary file (the first field of each line)."""
    text = records.read_text(path, "dictionary", 256 * 1024 * 1024)
    return {line.split(" ", 1)[0] for line in text.splitlines() if line}


def _check_tokens(record: dict, folder: str) -> None:
    """Each language's token is a symbol of dict.txt, written in one of fairseq's conventions for
    that language (a token swapped with another language's, or of another convention, is refused)."""
    tokens = record["language_tokens"]
    if not tokens:
        return
    where = os.path.join(folder, MANIFEST)
    styles = set()
    for lang, token in sorted(tokens.items()):
        style = next((s for s in LANGUAGE_TOKENS if s.format(lang) == token), None)
        if style is None:
            raise HltmtInputError(f"{where}: 'language_tokens': {token[:40]!r} is not the token of {lang!r}")
        styles.add(style)
    if len(styles) > 1:
        raise HltmtInputError(f"{where}: 'language_tokens' mix conventions ({', '.join(sorted(styles))})")
    symbols = _dictionary_symbols(os.path.join(folder, "dict.txt"))
    absent = sorted(t for t in tokens.values() if t not in symbols)
    if absent:
        raise HltmtInputError(f"{folder}: the language token {absent[0]} is not in dict.txt")


def _check_groups(record: dict, path: str) -> None:
    """``targets`` follows the routing map and names exactly the folder's models."""
    targets, routing = record["targets"], record["routing_map"]
    for lang, group in sorted(targets.items()):
        expected = (f"m{routing[lang]}" if lang in routing else "universal") if record["routes"] else "main"
        if group != expected:
            rule = "the routing map gives " + expected if record["routes"] else "a model without a pool has one, main"
            raise HltmtInputError(f"{path}: 'targets' sends {lang} to {group}, but {rule}")
    if not record["routes"] and routing:
        raise HltmtInputError(f"{path}: 'routing_map' given for a model without a pool ('routes' is false)")
    models = record["models"]
    if set(models) != set(targets.values()):
        raise HltmtInputError(f"{path}: 'models' must be exactly the models 'targets' names")
    single = engines.get(record["engine"]).root_model and models == {"main": "."}
    for group, entry in models.items():
        if not single and entry != f"models/{group}":
            raise HltmtInputError(f"{path}: model {group} must be in models/{group}, not {entry[:60]}")
