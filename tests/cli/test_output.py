"""hltmt_plugin/cli/output.py: a command's output file, whole or not at all, and every problem
one line naming the option (tests/test_hostile_output_files.py runs it through the commands)."""
import errno
import os

import pytest

from hltmt_plugin.cli.output import AtomicOutput, OutputError


def test_an_output_replaces_the_old_file_only_when_complete(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("the user's file\n")
    with pytest.raises(KeyboardInterrupt):
        with AtomicOutput(str(path), "--output") as f:
            f.write("half")
            raise KeyboardInterrupt
    assert path.read_text() == "the user's file\n" and os.listdir(tmp_path) == ["out.txt"]
    with AtomicOutput(str(path), "--output") as f:
        f.write("één\n")
    with AtomicOutput(str(tmp_path / "fig.png"), "--out", binary=True) as f:
        f.write(b"\x89PNG")
    assert path.read_bytes() == "één\n".encode("utf-8") and (tmp_path / "fig.png").read_bytes() == b"\x89PNG"
    assert sorted(os.listdir(tmp_path)) == ["fig.png", "out.txt"]


def test_an_output_that_cannot_be_written_is_one_line_naming_the_option(tmp_path, monkeypatch):
    with pytest.raises(OutputError, match=rf"^--output {tmp_path} is a folder: name a file$"):
        AtomicOutput(str(tmp_path), "--output")
    missing = tmp_path / "no" / "out.txt"
    with pytest.raises(OutputError, match=rf"^cannot write --output {missing}: No such file or directory$"):
        AtomicOutput(str(missing), "--output")
    path = tmp_path / "out.txt"
    path.write_text("kept\n")
    sink = AtomicOutput(str(path), "--output")
    sink.file.write("new\n")

    def cross_device(*args):
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    monkeypatch.setattr(os, "replace", cross_device)
    with pytest.raises(OutputError) as raised:
        sink.commit()
    monkeypatch.undo()
    assert str(raised.value) == f"could not write --output {path} (Invalid cross-device link): it is unchanged"
    sink.discard()
    assert path.read_text() == "kept\n" and os.listdir(tmp_path) == ["out.txt"]
