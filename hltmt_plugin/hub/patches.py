"""Weights shared by the groups of an export folder, stored once: a group's ``model.bin`` is the
base group's with a few byte ranges replaced (the routed layer). ``hltmt-export`` writes the
other groups as ``model.patch`` (:func:`make_patch`); serving rebuilds each file in memory
(:func:`apply_patch`) and CTranslate2 loads it from there (:mod:`hltmt_plugin.hub.ct2_engine`).

A patch holds :data:`PATCH_MAGIC`, then (offset, length, bytes) records, offsets and lengths as
little-endian uint64.
"""

import struct
from typing import Optional

from hltmt_plugin.errors import HltmtInputError

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
