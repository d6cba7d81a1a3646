"""The one reader of sentences and the one text rule, for every route that reads lines of text:
training data and raw corpora (``hltmt-prepare-data``), evaluation references and hypotheses
(``hltmt-report``, ``hltmt-study``), serving input (``hltmt-translate``, the hub's API).

- :func:`problem`: the text rule: a sentence is valid Unicode and holds no control character
  but TAB (no NUL, no other C0 or C1 control, no line break: a reader has split its lines
  before); the reason it is not text, else None. :func:`check` raises it, :func:`decode` applies
  it to a line's bytes (strict UTF-8 first).
- :func:`raw_lines`: the lines of a binary stream, read in bounded chunks (never the whole
  stream, never a line of unbounded length): a line ends at ``\\n``, the ``\\r`` of a ``\\r\\n``
  is dropped; a UTF-8 byte order mark at the start is dropped, a UTF-16 or UTF-32 one refused;
  a line longer than :data:`MAX_LINE_BYTES` or more than :data:`MAX_LINES` lines end the reading
  with one line naming the file (or standard input) and the line number, before memory grows.
- :func:`read_lines`: every line of a regular file as text, the first line that breaks the rule
  refused with the file and its line number; :func:`check_regular_file`: a file to read whole,
  refused as what it is (missing, a folder, a FIFO, a device, a socket).
"""

import itertools
import os
import re
import stat
from typing import BinaryIO, Iterator, List, Optional, Tuple

from hltmt_plugin.atomic_files import special_kind
from hltmt_plugin.errors import HltmtInputError

# a sentence is far shorter: the models take 1024 pieces; a longer line is binary data or a whole
# document (and /dev/zero one endless line)
MAX_LINE_BYTES = 1 << 20
# lines of one file or stream: ten times the largest corpus of WMT-10 (about 10 million pairs)
MAX_LINES = 100_000_000

UTF8_BOM = b"\xef\xbb\xbf"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")  # also the start of UTF-32's
# every control character but TAB (C0, DEL, C1), and the lone surrogates a str may hold
_NOT_TEXT = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\ud800-\udfff]")


class TextError(HltmtInputError):
    """A file or stream that cannot be read as lines of text (one line naming it)."""


def problem(text: str) -> Optional[str]:
    """Why ``text`` is not a sentence (the text rule), phrased to follow its name ("line 3 ...",
    "the text ..."); None when it is one."""
    found = _NOT_TEXT.search(text)
    if found is None:
        return None
    char, position = found.group(), found.start() + 1
    if char == "\x00":
        return f"holds a NUL character at position {position} (binary data, or UTF-16 text read as UTF-8?)"
    if "\ud800" <= char <= "\udfff":
        return f"is not valid Unicode ({char!r} at position {position}, a lone surrogate)"
    return f"holds the control character U+{ord(char):04X} at position {position} (text holds none but TAB)"


def check(text: str, what: str = "the text") -> None:
    """:func:`problem` of ``text`` as an :class:`HltmtInputError` naming ``what``."""
    why = problem(text)
    if why is not None:
        raise HltmtInputError(f"{what} {why}")


def decode(raw: bytes) -> Tuple[Optional[str], Optional[str]]:
    """``(text, None)`` for a line's bytes that are strict UTF-8 and keep the text rule, else
    ``(None, why)``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return None, (
            f"is not valid UTF-8 (byte 0x{raw[error.start]:02x} at byte {error.start + 1}; convert the file to UTF-8)"
        )
    why = problem(text)
    return (None, why) if why is not None else (text, None)


def raw_lines(
    stream: BinaryIO, name: str, split_cr: bool = False, max_bytes: int = MAX_LINE_BYTES, max_lines: int = MAX_LINES
) -> Iterator[Tuple[int, bytes]]:
    """``(line number, bytes)`` of each line of the binary ``stream``, without its end, read at
    most ``max_bytes`` + 2 bytes at a time: a line ends at ``\\n`` (with ``split_cr`` a lone
    ``\\r`` too), the ``\\r`` of ``\\r\\n`` is dropped. A longer line, more than ``max_lines``
    lines or a UTF-16 / UTF-32 byte order mark is a :class:`TextError` naming ``name`` (the file,
    or standard input) and the line."""
    number = 0
    for count in itertools.count(1):
        raw = stream.readline(max_bytes + 2)  # room for the line's own \r\n
        if not raw:
            return
        body = raw[:-1] if raw.endswith(b"\n") else raw
        body = body[:-1] if body.endswith(b"\r") else body
        if len(body) > max_bytes:
            raise TextError(
                f"{name} line {number + 1} is longer than {max_bytes} bytes (binary data, or not one "
                "sentence per line?): not read further"
            )
        if count == 1:
            if body.startswith(UTF16_BOMS):
                raise TextError(
                    f"{name} is not valid UTF-8: it starts with a UTF-16 / UTF-32 byte order mark (convert "
                    "it to UTF-8, e.g. iconv -f UTF-16 -t UTF-8)"
                )
            body = body[len(UTF8_BOM) :] if body.startswith(UTF8_BOM) else body
        for piece in body.split(b"\r") if split_cr else (body,):
            number += 1
            if number > max_lines:
                raise TextError(f"{name} has more than {max_lines} lines: split it")
            yield number, piece


def check_regular_file(path: str, what: str = "") -> None:
    """``path`` is a regular file (links followed), else one :class:`TextError` saying what it
    is: missing, a folder, a FIFO, a device or a socket (which would hang, or never end)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise TextError(f"missing file {path}{what}") from None
    except OSError as error:
        raise TextError(f"cannot read {path}{what}: {error.strerror or error}") from None
    if not stat.S_ISREG(mode):
        kind = special_kind(mode) or ("a folder" if stat.S_ISDIR(mode) else "not a regular file")
        raise TextError(f"{path}{what} is {kind}, not a regular file of text")


def read_lines(path: str, limit: Optional[int] = None, prepare=None) -> List[str]:
    """The first ``limit`` (default: all) lines of the regular file ``path`` as text
    (:func:`raw_lines`, then ``prepare(bytes) -> bytes`` if given, then :func:`decode`); the
    first line that is not text is a :class:`TextError` naming the file and the line."""
    check_regular_file(path)
    lines = []
    with open(path, "rb") as stream:
        for number, raw in raw_lines(stream, path):
            if limit is not None and number > limit:
                break
            text, why = decode(prepare(raw) if prepare is not None else raw)
            if why is not None:
                raise TextError(f"{path} line {number} {why}")
            lines.append(text)
    return lines
