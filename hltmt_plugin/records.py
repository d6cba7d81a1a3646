"""The one reader of every record the plugin reads: a checkpoint's compatibility record, an
export's manifest, an adapter file's header, a skill matrix, the data's dictionary
fingerprint, the experiment drivers' result files and gate records, a routing map.

A record is checked against a small declarative schema before anything uses it: the type of
every field, which fields must be there, the sizes of strings, lists and maps, and how deep it
nests. An empty or partial record is refused like a wrong one (``{}`` is not "no record"). A
problem is one :class:`~hltmt_plugin.errors.HltmtInputError` line naming the record, the field
and what was expected; a record that says which version of the plugin wrote it
(``plugin_version``) has that version in the line.

Schemas are built from these pieces::

    Record({"langs": ListOf(Text()), "beam": Int(low=1)}, optional={"note": Text()})
    MapOf(Int(low=0), key=Text())        # any keys, each value checked
    OneOf(Text(), Null())                # a string or null
    str, int, float, bool, None           # shorthands for Text(), Int(), Number(), Bool(), Null()

:func:`read_json` reads a JSON file with a size cap, and refuses a file nested deeper than
:data:`MAX_DEPTH` before parsing it (never a ``RecursionError``). Only the standard library.
"""

import json
import math
import os
import re
import stat
import sys
from typing import Dict, Optional

from hltmt_plugin.errors import HltmtInputError

MAX_DEPTH = 32  # the deepest nesting of any record (the plugin writes at most 4 levels)
MAX_ITEMS = 100_000  # entries of one list or map
MAX_TEXT = 100_000  # characters of one string
MAX_BYTES = 16 * 1024 * 1024  # a JSON record's file
VERSION_FIELD = "plugin_version"  # the plugin's version that wrote a record (shown, never compared)


def plugin_version() -> str:
    """This plugin's version, as records written now store it."""
    return str(getattr(sys.modules.get("hltmt_plugin"), "__version__", "unknown"))


class Bad(Exception):
    """A schema mismatch at a place (``where`` inside the record); turned into one line by :func:`check`."""

    def __init__(self, place: str, what: str):
        super().__init__(place, what)
        self.place, self.what = place, what


def _kind(value) -> str:
    if value is None:
        return "null"
    return {bool: "true/false", int: "a whole number", float: "a number", str: "a string", list: "a list"}.get(
        type(value), "a map" if isinstance(value, dict) else type(value).__name__
    )


class Schema:
    """One kind of value: :meth:`check` raises :class:`Bad` or returns the value."""

    what = "a value"

    def check(self, value, place: str, depth: int):  # pragma: no cover - each kind has its own
        raise NotImplementedError

    def expected(self, value, place: str):
        return Bad(place, f"must be {self.what}, got {_kind(value)}")


class Null(Schema):
    what = "null"

    def check(self, value, place, depth):
        if value is not None:
            raise self.expected(value, place)
        return value


class Bool(Schema):
    what = "true or false"

    def check(self, value, place, depth):
        if not isinstance(value, bool):
            raise self.expected(value, place)
        return value


class Int(Schema):
    """A whole number (not a bool) in [low, high]."""

    what = "a whole number"

    def __init__(self, low: Optional[int] = None, high: Optional[int] = None):
        self.low, self.high = low, high

    def check(self, value, place, depth):
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.expected(value, place)
        return self.bounded(value, place)

    def bounded(self, value, place):
        if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
            raise Bad(place, f"must be {_range(self.low, self.high)}, got {value}")
        return value


class Number(Int):
    """A finite number (an int or a float, not a bool) in [low, high]."""

    what = "a number"

    def check(self, value, place, depth):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.expected(value, place)
        if isinstance(value, float) and not math.isfinite(value):
            raise Bad(place, f"must be a finite number, got {value}")
        return self.bounded(value, place)


def _range(low, high) -> str:
    if low is not None and high is not None:
        return f"between {low} and {high}"
    return f"at least {low}" if low is not None else f"at most {high}"


class Text(Schema):
    """A string of ``min_len`` to ``max_len`` characters; ``choices``: one of these;
    ``pattern``: a regular expression it matches whole."""

    what = "a string"

    def __init__(self, min_len: int = 0, max_len: int = MAX_TEXT, choices=None, pattern: Optional[str] = None):
        self.min_len, self.max_len = min_len, max_len
        self.choices = tuple(choices) if choices is not None else None
        self.pattern = re.compile(pattern) if pattern else None

    def check(self, value, place, depth):
        if not isinstance(value, str):
            raise self.expected(value, place)
        if self.choices is not None and value not in self.choices:
            raise Bad(place, f"must be one of {', '.join(map(repr, self.choices))}, got {value[:60]!r}")
        if not self.min_len <= len(value) <= self.max_len:
            raise Bad(place, f"must be a string of {_range(self.min_len, self.max_len)} characters, got {len(value)}")
        if self.pattern is not None and not self.pattern.fullmatch(value):
            raise Bad(place, f"is not of the expected form ({value[:60]!r})")
        return value


SHA256 = Text(pattern="[0-9a-f]{64}")  # a SHA-256 digest as hexadecimal


def _sized(value, kind, place, low, high, what):
    if not isinstance(value, kind):
        raise Bad(place, f"must be {what}, got {_kind(value)}")
    if len(value) < low:
        raise Bad(place, f"must hold at least {low} entries, got {len(value)}")
    if len(value) > high:
        raise Bad(place, f"must hold at most {high} entries, got {len(value)}")


class ListOf(Schema):
    """A list (a tuple is read as one) of ``min_len`` to ``max_len`` items, each ``item``."""

    def __init__(self, item, min_len: int = 0, max_len: int = MAX_ITEMS):
        self.item, self.min_len, self.max_len = schema_of(item), min_len, max_len
        self.what = "a list"

    def check(self, value, place, depth):
        _deeper(place, depth)
        _sized(value, (list, tuple), place, self.min_len, self.max_len, "a list")
        for i, item in enumerate(value):
            self.item.check(item, f"{place}[{i}]", depth + 1)
        return value


class MapOf(Schema):
    """A map (dict) of ``min_len`` to ``max_len`` entries, keys ``key`` (strings by default),
    each value ``value``."""

    what = "a map"

    def __init__(self, value, key=None, min_len: int = 0, max_len: int = MAX_ITEMS):
        self.value, self.key = schema_of(value), schema_of(key if key is not None else str)
        self.min_len, self.max_len = min_len, max_len

    def check(self, value, place, depth):
        _deeper(place, depth)
        _sized(value, dict, place, self.min_len, self.max_len, "a map")
        for k, v in value.items():
            self.key.check(k, f"{place} key {str(k)[:40]!r}", depth + 1)
            self.value.check(v, _at(place, k), depth + 1)
        return value


class Record(Schema):
    """A map with named fields: ``fields`` must be there, ``optional`` may be; other fields
    are refused unless ``extra`` (then each is any bounded value, :class:`Anything`)."""

    what = "a map"

    def __init__(self, fields: Dict[str, object], optional: Optional[Dict[str, object]] = None, extra: bool = False):
        self.fields = {name: schema_of(s) for name, s in fields.items()}
        self.optional = {name: schema_of(s) for name, s in (optional or {}).items()}
        self.extra = extra

    def check(self, value, place, depth):
        _deeper(place, depth)
        _sized(value, dict, place, 0, MAX_ITEMS, "a map")
        missing = [name for name in self.fields if name not in value]
        if missing:
            what = "is empty" if not value else f"lacks {', '.join(map(repr, missing[:5]))}"
            raise Bad(place, f"{what}: a partial record")
        for name, item in value.items():
            schema = self.fields.get(name) or self.optional.get(name)
            if schema is None and not self.extra:
                raise Bad(place, f"holds an unknown field {str(name)[:40]!r}")
            (schema or ANYTHING).check(item, _at(place, name), depth + 1)
        return value

    def extended(self, fields=None, optional=None, extra: Optional[bool] = None) -> "Record":
        """This record with more (or other) fields."""
        return Record(
            {**self.fields, **(fields or {})},
            {**self.optional, **(optional or {})},
            self.extra if extra is None else extra,
        )


class OneOf(Schema):
    """A value of any of ``kinds``."""

    def __init__(self, *kinds):
        self.kinds = [schema_of(k) for k in kinds]
        self.what = " or ".join(k.what for k in self.kinds)

    def check(self, value, place, depth):
        for kind in self.kinds:
            try:
                return kind.check(value, place, depth)
            except Bad as error:
                if not isinstance(kind, (Null, Bool, Int, Text)) and _matches_type(kind, value):
                    raise error  # the value is of this kind and wrong inside: say what is wrong
        raise self.expected(value, place)


def _matches_type(kind, value) -> bool:
    return (isinstance(kind, (Record, MapOf)) and isinstance(value, dict)) or (
        isinstance(kind, ListOf) and isinstance(value, (list, tuple))
    )


class Instance(Schema):
    """An object of class ``cls`` (a tensor in a weights-only file), named ``what``."""

    def __init__(self, cls, what: str):
        self.cls, self.what = cls, what

    def check(self, value, place, depth):
        if not isinstance(value, self.cls):
            raise self.expected(value, place)
        return value


class Anything(Schema):
    """Any JSON-like value (None, bool, number, string, list, map with string keys), bounded in
    size and depth: walked without recursion."""

    what = "a plain value"

    def check(self, value, place, depth):
        stack = [(value, place, depth)]
        while stack:
            item, at, level = stack.pop()
            if item is None or isinstance(item, (bool, int, str)):
                if isinstance(item, str) and len(item) > MAX_TEXT:
                    raise Bad(at, f"is a string of {len(item)} characters, more than {MAX_TEXT}")
                continue
            if isinstance(item, float):
                continue
            if not isinstance(item, (list, tuple, dict)):
                raise Bad(at, f"must be a plain value, got {_kind(item)}")
            _deeper(at, level)
            if len(item) > MAX_ITEMS:
                raise Bad(at, f"must hold at most {MAX_ITEMS} entries, got {len(item)}")
            if isinstance(item, dict):
                for k, v in item.items():
                    if not isinstance(k, str):
                        raise Bad(at, f"has a key that is {_kind(k)}, not a string")
                    stack.append((v, _at(at, k), level + 1))
            else:
                stack.extend((v, f"{at}[{i}]", level + 1) for i, v in enumerate(item))
        return value


ANYTHING = Anything()
_SHORT = {str: Text(), int: Int(), float: Number(), bool: Bool(), None: Null(), type(None): Null()}


def schema_of(spec) -> Schema:
    """A :class:`Schema` from a schema or a shorthand (``str``, ``int``, ``float``, ``bool``,
    ``None``; a tuple of them: :class:`OneOf`)."""
    if isinstance(spec, Schema):
        return spec
    if isinstance(spec, tuple):
        return OneOf(*spec)
    if spec in _SHORT:
        return _SHORT[spec]
    raise TypeError(f"not a schema: {spec!r}")


def _at(place: str, name) -> str:
    name = str(name)[:40]
    return f"{place}.{name}" if place else name


def _deeper(place: str, depth: int) -> None:
    if depth >= MAX_DEPTH:
        raise Bad(place, f"nests more than {MAX_DEPTH} levels deep")


def check(obj, schema, where: str):
    """``obj`` checked against ``schema``; one HltmtInputError line naming ``where`` (the
    record: ``checkpoint x.pt's compatibility record``), the field and the problem."""
    try:
        return schema_of(schema).check(obj, "", 0)
    except Bad as error:
        place = error.place if len(error.place) <= 80 else "..." + error.place[-77:]
        version = obj.get(VERSION_FIELD) if isinstance(obj, dict) else None
        writer = f" (written by hltmt_plugin {version[:20]})" if isinstance(version, str) and version else ""
        raise HltmtInputError(f"{where}{writer}{f': field {place!r}' if place else ''} {error.what}") from None
    except RecursionError:  # a self-referencing value: never deeper than MAX_DEPTH by then
        raise HltmtInputError(f"{where}: nests more than {MAX_DEPTH} levels deep") from None


# ---- JSON files ------------------------------------------------------------------------------
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def json_depth(text: str) -> int:
    """How deep the JSON ``text`` nests (strings left out), without parsing it."""
    depth = deepest = 0
    for c in _NOT_BRACKET.sub("", _STRINGS.sub("", text)):
        depth += 1 if c in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def read_text(path: str, what: str, max_bytes: int = MAX_BYTES) -> str:
    """The UTF-8 text of the regular file ``path`` (``what`` names it in the error), at most
    ``max_bytes``: a FIFO, device or folder is refused without being opened for reading."""
    path = os.fspath(path)
    try:
        info = os.stat(path)
    except OSError as error:
        raise HltmtInputError(f"cannot read {what} {path} ({error.strerror or error})") from None
    if not stat.S_ISREG(info.st_mode):
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise HltmtInputError(f"{what} {path} is {kind}")
    if info.st_size > max_bytes:
        raise HltmtInputError(
            f"{what} {path} is {info.st_size} bytes, more than the {max_bytes} bytes a record may hold"
        )
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise HltmtInputError(f"{what} {path} is more than the {max_bytes} bytes a record may hold")
        return data.decode("utf-8")
    except OSError as error:
        raise HltmtInputError(f"cannot read {what} {path} ({error.strerror or error})") from None
    except UnicodeDecodeError as error:
        raise HltmtInputError(f"{what} {path} is not UTF-8 text (byte {error.start + 1})") from None


def parse_json(text: str, where: str):
    """The JSON value of ``text``: nesting bounded first, then parsed; one line if it is not JSON."""
    if json_depth(text) > MAX_DEPTH:
        raise HltmtInputError(f"{where} is not a record: it nests more than {MAX_DEPTH} levels deep")
    try:
        return json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise HltmtInputError(f"{where} is not valid JSON ({first})") from None


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON holds")


def read_json(path: str, schema, what: str, max_bytes: int = MAX_BYTES) -> dict:
    """The record in the JSON file ``path``, checked against ``schema``; ``what`` names it in
    the one-line error (``export manifest``, ``gate record``...)."""
    text = read_text(path, what, max_bytes)
    where = f"{what} {os.fspath(path)}"
    return check(parse_json(text, where), schema, where)
