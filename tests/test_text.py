"""hltmt_plugin.text: the one text rule (valid UTF-8, no control character but TAB) and the one
reader of lines (bounded: an endless line or too many lines end in one line naming the input
and the line, before memory grows)."""

import ast
import io
import os
import time
import tracemalloc

import pytest

from conftest import ROOT
from hltmt_plugin import text
from hltmt_plugin.errors import HltmtInputError

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


def test_the_text_rule_keeps_tab_and_refuses_every_other_control_character():
    for kept in ("The file is open.", "a\tb", "line\u2028separator", "zero\u200dwidth joiner", "\ufeffbom", ""):
        assert text.problem(kept) is None, repr(kept)
    assert text.problem("a\x00b") == "holds a NUL character at position 2 (binary data, or UTF-16 text read as UTF-8?)"
    for char in "\x01\x08\n\x0b\x0c\r\x1b\x1f\x7f\x85\x9f":
        assert text.problem(f"ab{char}") == (
            f"holds the control character U+{ord(char):04X} at position 3 (text holds none but TAB)"
        )
    assert text.problem("a\udcff") == "is not valid Unicode ('\\udcff' at position 2, a lone surrogate)"
    with pytest.raises(HltmtInputError, match="^the sentence holds a NUL character at position 1 "):
        text.check("\x00", "the sentence")


def test_a_lines_bytes_are_strict_utf8_then_the_text_rule():
    assert text.decode("café\tau lait".encode()) == ("café\tau lait", None)
    assert text.decode(b"caf\xe9") == (None, "is not valid UTF-8 (byte 0xe9 at byte 4; convert the file to UTF-8)")
    assert text.decode(b"nul\x00") == (None, text.problem("nul\x00"))
    assert text.decode(b"\xed\xa0\x80")[1].startswith("is not valid UTF-8")  # an encoded surrogate


def lines_of(data, **options):
    return list(text.raw_lines(io.BytesIO(data), "the input", **options))


def test_lines_end_at_newline_with_the_bom_and_the_crs_of_crlf_dropped():
    data = b"\xef\xbb\xbfone\r\ntwo\rthree\nfour"
    assert lines_of(data) == [(1, b"one"), (2, b"two\rthree"), (3, b"four")]
    assert lines_of(data, split_cr=True) == [(1, b"one"), (2, b"two"), (3, b"three"), (4, b"four")]
    assert lines_of(b"") == [] and lines_of(b"\n\n") == [(1, b""), (2, b"")]
    assert lines_of(b"a\xef\xbb\xbf\n") == [(1, b"a\xef\xbb\xbf")]  # only at the start
    for bom in (b"\xff\xfe", b"\xfe\xff"):
        with pytest.raises(text.TextError, match="^the input is not valid UTF-8: it starts with a UTF-16 / UTF-32"):
            lines_of(bom + "Hello".encode("utf-16-le"))


def test_a_line_longer_than_the_bound_or_too_many_lines_end_the_reading_in_one_line():
    assert lines_of(b"abcd\r\nabcd\n", max_bytes=4) == [(1, b"abcd"), (2, b"abcd")]  # the bound, its end aside
    for data in (b"ok\nabcde\n", b"ok\nabcde", b"ok\nabcd\re\r\n", b"ok\n" + b"x" * 100):
        with pytest.raises(text.TextError, match="^the input line 2 is longer than 4 bytes .*: not read further$"):
            lines_of(data, max_bytes=4)
    assert len(lines_of(b"a\nb\nc", max_lines=3)) == 3
    with pytest.raises(text.TextError, match="^the input has more than 3 lines: split it$"):
        lines_of(b"a\nb\nc\nd", max_lines=3)
    with pytest.raises(text.TextError, match="has more than 3 lines"):
        lines_of(b"a\rb\rc\rd", max_lines=3, split_cr=True)


class Endless(io.RawIOBase):
    """/dev/zero that counts what is read of it."""

    def __init__(self):
        self.read_bytes = 0

    def readable(self):
        return True

    def readinto(self, buffer):
        buffer[:] = bytes(len(buffer))
        self.read_bytes += len(buffer)
        return len(buffer)


def test_an_endless_line_is_refused_after_reading_one_bound_of_it():
    endless = Endless()
    tracemalloc.start()
    start = time.perf_counter()
    with pytest.raises(text.TextError, match="^standard input line 1 is longer than 1048576 bytes"):
        list(text.raw_lines(io.BufferedReader(endless), "standard input"))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert endless.read_bytes < 2 * text.MAX_LINE_BYTES and peak < 4 * text.MAX_LINE_BYTES
    assert time.perf_counter() - start < 2
    with open("/dev/zero", "rb") as zero:  # the device itself
        with pytest.raises(text.TextError, match="line 1 is longer than"):
            next(text.raw_lines(zero, "/dev/zero"))


def test_a_file_read_whole_is_a_regular_file_said_as_what_it_is_otherwise(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    for path, why in (
        (tmp_path / "none.txt", f"^missing file {tmp_path / 'none.txt'} .language 'de'.$"),
        (tmp_path, "is a folder, not a regular file of text"),
        (tmp_path / "fifo", "is a FIFO, not a regular file of text"),
        ("/dev/null", "^/dev/null .language 'de'. is a device, not a regular file of text$"),
    ):
        with pytest.raises(text.TextError, match=why):
            text.check_regular_file(str(path), " (language 'de')")
    with pytest.raises(text.TextError, match="is a FIFO"):  # never opened: no reader would come
        text.read_lines(str(tmp_path / "fifo"))


def test_read_lines_gives_text_or_names_the_file_and_line(tmp_path):
    path = tmp_path / "train.en"
    path.write_bytes(b"one\r\ntwo\rtwo\nthree\x0c\nfour\n")
    assert text.read_lines(str(path), limit=2, prepare=lambda raw: raw.replace(b"\r", b" ")) == ["one", "two two"]
    with pytest.raises(text.TextError, match=f"^{path} line 2 holds the control character U.000D at position 4"):
        text.read_lines(str(path))
    with pytest.raises(text.TextError, match=f"^{path} line 3 holds the control character U.000C at position 6"):
        text.read_lines(str(path), prepare=lambda raw: raw.replace(b"\r", b" "))


def unbounded_reads(source: str) -> list:
    """``(line, call)`` of each read of standard input in ``source`` other than the one reader's:
    ``sys.stdin.read()``, ``.readline()``, ``.readlines()``, or a loop over ``sys.stdin``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("read", "readline", "readlines") and "stdin" in ast.unparse(node.func.value):
                found.append((node.lineno, ast.unparse(node)))
        if isinstance(node, ast.For) and ast.unparse(node.iter) in ("sys.stdin", "sys.stdin.buffer"):
            found.append((node.lineno, ast.unparse(node.iter)))
    return found


def test_no_module_reads_standard_input_but_through_the_one_reader():
    found = {}
    for folder, _, files in os.walk(os.path.join(ROOT, "hltmt_plugin")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    reads = unbounded_reads(f.read())
                if reads:
                    found[os.path.relpath(path, ROOT)] = reads
    assert found == {}
    planted = "import sys\ndata = sys.stdin.read()\nfor line in sys.stdin:\n    pass\nsys.stdin.buffer.readline()\n"
    assert sorted(line for line, _ in unbounded_reads(planted)) == [2, 3, 5]
