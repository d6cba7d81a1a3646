"""The export folder's manifest (``manifest.json``): what serving an exported model needs,
written by :mod:`hltmt_plugin.export.ctranslate2` and checked on load like a checkpoint is.

::

    EXPORT_DIR/manifest.json        this record
    EXPORT_DIR/spm.model            the sentencepiece model of the data
    EXPORT_DIR/dict.txt             the shared dictionary the model was trained with
    EXPORT_DIR/models/<group>/      one CTranslate2 model per group of target languages: the first
                                    whole, each other one as the byte ranges of its model.bin that
                                    differ (model.patch: the routed layer), with its config.json
                                    and vocabulary

The record names the languages (in the order of the model's ``--langs``), the language-token
convention (``encoder_langtok``: ``tgt``, ``src`` or none; ``decoder_langtok``; the token of
each language), the routing map of an HLT-MT pool (``routing_map``: target language -> pool
module), which group serves each target language (``targets``), and the SHA-256 of every file,
so that a folder whose files were changed, cut or swapped is refused before anything is served.
"""

import json
import os
import struct
from typing import Dict, List, Optional

from hltmt_plugin.atomic_files import MARKER
from hltmt_plugin.data_fingerprint import sha256_file
from hltmt_plugin.errors import HltmtInputError

# CTranslate2's weight types (hltmt-export --quantization), here so that the command's options need no model code
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16")

MANIFEST = "manifest.json"
FORMAT = "hltmt-ctranslate2"
VERSION = 1

# field -> the type it must have
FIELDS = {
    "format": str,
    "version": int,
    "engine": str,
    "langs": list,
    "lang_pairs": list,
    "encoder_langtok": (str, type(None)),
    "decoder_langtok": bool,
    "language_tokens": dict,
    "routing_map": dict,
    "targets": dict,
    "models": dict,
    "routes": bool,
    "quantization": str,
    "max_source_positions": int,
    "max_target_positions": int,
    "files": dict,
    "source": dict,
    "patches": dict,
}


def files_of(folder: str) -> Dict[str, str]:
    """Every file under ``folder`` but the manifest and the writer's marker: relative path -> SHA-256."""
    found = {}
    for root, _, names in os.walk(folder):
        for name in sorted(names):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, folder).replace(os.sep, "/")
            if rel not in (MANIFEST, MARKER):  # the marker of the writer (atomic_files.write_folder)
                found[rel] = sha256_file(path)
    return found


def is_export(path) -> bool:
    """Whether ``path`` is a folder that holds an export manifest (checked by :func:`read`)."""
    return isinstance(path, (str, os.PathLike)) and os.path.isfile(os.path.join(os.fspath(path), MANIFEST))


def read(folder: str) -> dict:
    """The manifest of ``folder``, checked: its fields, its languages and groups, and that every
    file it lists is there, unchanged, with no other file beside them. HltmtInputError naming
    the first problem."""
    path = os.path.join(folder, MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise HltmtInputError(
            f"{path} is not an export manifest ({type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''})"
        ) from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise HltmtInputError(f"{path} is not an {FORMAT} manifest (written by hltmt-export)")
    if record.get("version") != VERSION:
        raise HltmtInputError(
            f"{path} is version {record.get('version')!r} of the export format; this plugin reads "
            f"version {VERSION}: export the checkpoint again"
        )
    for name, kind in FIELDS.items():
        if not isinstance(record.get(name), kind) or isinstance(record.get(name), bool) != (kind is bool):
            raise HltmtInputError(f"{path}: field {name!r} is missing or not a {getattr(kind, '__name__', 'value')}")
    _check_languages(record, path)
    _check_files(record, folder)
    return record


def _check_languages(record: dict, path: str) -> None:
    langs: List[str] = record["langs"]
    if not langs or not all(isinstance(x, str) and x for x in langs) or len(set(langs)) != len(langs):
        raise HltmtInputError(f"{path}: 'langs' must list distinct language codes")
    if set(record["language_tokens"]) != set(langs) and record["encoder_langtok"] is not None:
        raise HltmtInputError(f"{path}: 'language_tokens' must give the token of each language of 'langs'")
    if set(record["targets"]) != set(langs):
        raise HltmtInputError(f"{path}: 'targets' must name the model serving each language of 'langs'")
    unknown = sorted({g for g in record["targets"].values()} - set(record["models"]))
    if unknown:
        raise HltmtInputError(f"{path}: 'targets' names model(s) {', '.join(map(str, unknown))} that 'models' lacks")
    for lang, module in record["routing_map"].items():
        if lang not in langs or not isinstance(module, int) or isinstance(module, bool):
            raise HltmtInputError(f"{path}: 'routing_map' must map languages of 'langs' to pool modules")
    if record["encoder_langtok"] not in (None, "src", "tgt"):
        raise HltmtInputError(f"{path}: 'encoder_langtok' must be tgt, src or null")


def _check_files(record: dict, folder: str) -> None:
    patches = record["patches"]  # group -> the group whose model.bin its model.patch applies to
    if any(base not in record["models"] or base in patches for base in patches.values()):
        raise HltmtInputError(f"{folder}: the manifest's 'patches' must name models stored whole")
    wanted = ["spm.model", "dict.txt"] + [
        f"{entry}/model.{'patch' if group in patches else 'bin'}"
        for group, entry in record["models"].items()
        if isinstance(entry, str)
    ]
    listed = record["files"]
    missing = [name for name in wanted if name not in listed]
    if missing or not all(
        isinstance(m, str) and not os.path.isabs(m) and ".." not in m.split("/") for m in record["models"].values()
    ):
        raise HltmtInputError(
            f"{folder}: the manifest does not list {', '.join(missing) or 'its models'} as files of the folder"
        )
    present = files_of(folder)
    for name, digest in listed.items():
        if name not in present:
            raise HltmtInputError(f"{folder}: {name} is missing (the manifest lists it)")
        if present[name] != digest:
            raise HltmtInputError(f"{folder}: {name} is not the file that was exported (its SHA-256 differs)")
    extra = sorted(set(present) - set(listed))
    if extra:
        raise HltmtInputError(f"{folder}: {extra[0]} is not a file of the export (the manifest does not list it)")


# ---- weights shared by the groups, stored once ---------------------------------------------
# A group's model.bin is the base group's with a few byte ranges replaced (the routed layer):
# ``model.patch`` holds PATCH_MAGIC, then (offset, length, bytes) records, offsets and lengths as
# little-endian uint64. CTranslate2 loads the rebuilt file from memory.
PATCH_MAGIC = b"HLTMT-PATCH-1\n"
_RECORD = struct.Struct("<QQ")


def make_patch(base: bytes, other: bytes, gap: int = 64) -> Optional[bytes]:
    """The patch that turns ``base`` into ``other`` (None when their lengths differ)."""
    import numpy as np

    if len(base) != len(other):
        return None
    differ = np.flatnonzero(np.frombuffer(base, np.uint8) != np.frombuffer(other, np.uint8))
    out = [PATCH_MAGIC]
    start = 0
    while start < len(differ):
        end = start
        while end + 1 < len(differ) and differ[end + 1] - differ[end] <= gap:
            end += 1
        offset, stop = int(differ[start]), int(differ[end]) + 1
        out += [_RECORD.pack(offset, stop - offset), other[offset:stop]]
        start = end + 1
    return b"".join(out)


def apply_patch(base: bytes, patch: bytes, where: str) -> bytes:
    """``base`` with the records of ``patch`` applied; HltmtInputError if ``patch`` does not fit."""
    if not patch.startswith(PATCH_MAGIC):
        raise HltmtInputError(f"{where} is not a model patch written by hltmt-export")
    out, at = bytearray(base), len(PATCH_MAGIC)
    while at < len(patch):
        if at + _RECORD.size > len(patch):
            raise HltmtInputError(f"{where} is cut short")
        offset, length = _RECORD.unpack_from(patch, at)
        at += _RECORD.size
        if offset + length > len(out) or at + length > len(patch):
            raise HltmtInputError(f"{where} does not fit the model it patches")
        out[offset : offset + length] = patch[at : at + length]
        at += length
    return bytes(out)
