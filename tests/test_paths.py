"""hltmt_plugin/paths.py: declared path options refuse special files at parsing and outputs that
collide with inputs after it; the dataclass declaration of the plugin's fairseq options."""

import os
import stat
from dataclasses import dataclass, field
from typing import Optional

import pytest

from hltmt_plugin import paths
from hltmt_plugin.errors import HltmtConfigError

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


def parser():
    p = paths.ArgumentParser(prog="demo")
    paths.path_option(p, "--checkpoint", kind=paths.READ_FILE, required=True)
    paths.path_option(p, "--data", kind=paths.READ_FOLDER)
    paths.path_option(p, "--input", kind=paths.READ_STREAM, default="-")
    paths.path_option(p, "--out", kind=paths.WRITE_FOLDER)
    paths.path_option(p, "-o", "--output", kind=paths.WRITE_STREAM, default="-", in_place=("--checkpoint",))
    return p


def refused(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        parser().parse_args(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    return err


def test_special_files_are_refused_at_parsing_without_being_opened(tmp_path, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert "it is a FIFO, which cannot be read as a file" in refused(["--checkpoint", str(fifo)], capsys)
    assert "it is a FIFO, which cannot be written as a folder" in refused(
        ["--checkpoint", __file__, "--out", str(fifo)], capsys
    )
    assert parser().parse_args(["--checkpoint", __file__, "--input", str(fifo)]).input == str(fifo)  # a pipe is read
    assert "it is a device" in refused(["--checkpoint", __file__, "--output", "/dev/null"], capsys)


def test_a_file_where_a_folder_is_named_and_the_reverse(tmp_path, capsys):
    f = tmp_path / "f.txt"
    f.write_text("x")
    assert "it is a file: name a folder" in refused(["--checkpoint", __file__, "--out", str(f)], capsys)
    assert "it is a file: name a folder" in refused(["--checkpoint", __file__, "--data", str(f)], capsys)
    assert "it is a folder: name a file" in refused(["--checkpoint", str(tmp_path)], capsys)
    assert "an empty path" in refused(["--checkpoint", ""], capsys)


def test_an_output_that_is_holds_or_lies_inside_an_input_is_refused(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    ckpt = tmp_path / "ck.pt"
    ckpt.write_bytes(b"x")
    err = refused(["--checkpoint", str(ckpt), "--data", str(data), "--out", str(tmp_path)], capsys)
    assert f"--out {tmp_path} holds --checkpoint {ckpt}" in err
    err = refused(["--checkpoint", str(ckpt), "--data", str(data), "--out", str(data / "sub")], capsys)
    assert f"lies inside --data {data}" in err
    (data / "in.txt").write_text("x")
    err = refused(
        ["--checkpoint", str(ckpt), "--input", str(data / "in.txt"), "--output", str(data / "in.txt")], capsys
    )
    assert "--output" in err and "is --input" in err
    link = tmp_path / "link"
    link.symlink_to(data)
    err = refused(["--checkpoint", str(ckpt), "--data", str(link), "--out", str(data / "x")], capsys)
    assert "lies inside --data" in err  # resolved through the link
    # an update in place of a declared input is allowed, and standard streams never collide
    args = parser().parse_args(["--checkpoint", str(ckpt), "--output", str(ckpt)])
    assert args.output == str(ckpt)
    assert parser().parse_args(["--checkpoint", str(ckpt)]).output == "-"


def test_a_missing_input_is_refused_at_parsing_in_one_line(tmp_path, capsys):
    """Whatever the command does next (a dry run included), an input that does not exist stops it."""
    none = str(tmp_path / "none")
    assert f"argument --checkpoint: {none}: no such file" in refused(["--checkpoint", none], capsys)
    assert "argument --data: {}: no such folder".format(none) in refused(
        ["--checkpoint", __file__, "--data", none], capsys
    )
    assert "argument --input: {}: no such file or folder".format(none) in refused(
        ["--checkpoint", __file__, "--input", none], capsys
    )
    assert parser().parse_args(["--checkpoint", __file__, "--out", none]).out == none  # an output is made
    assert paths.missing("-", paths.READ_STREAM) is None and paths.missing(none, paths.READ_PATTERN) is None


def test_subcommands_are_declared_and_checked_by_the_command():
    p = paths.ArgumentParser(prog="demo")
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("export")
    paths.path_option(e, "--path", kind=paths.READ_FILE)
    paths.path_option(e, "--out", kind=paths.WRITE_FILE)
    found = {(s, a.option_strings[0]): paths.path_kind(a) for s, a in paths.declared(p) if paths.path_kind(a)}
    assert found == {("export", "--path"): paths.READ_FILE, ("export", "--out"): paths.WRITE_FILE}
    with pytest.raises(SystemExit):
        p.parse_args(["export", "--path", "/tmp/a.pt", "--out", "/tmp/a.pt"])


def test_a_subcommands_error_is_the_commands_one_line(tmp_path, capsys):
    p = paths.ArgumentParser(prog="demo")
    paths.path_option(p.add_subparsers(dest="command").add_parser("export"), "--path", kind=paths.READ_FILE)
    with pytest.raises(SystemExit) as stop:
        p.parse_args(["export", "--path", str(tmp_path / "none.pt")])
    err = capsys.readouterr().err
    assert (
        stop.value.code == 2
        and err == f"demo: error: export: argument --path: {tmp_path / 'none.pt'}: no such file (see --help)\n"
    )


def test_a_dataclass_field_declares_its_kind_and_is_checked(tmp_path):
    @dataclass
    class Options:
        matrix: Optional[str] = field(default=None, metadata={"help": "a file", "path": paths.READ_FILE})
        size: int = field(default=1, metadata={"help": "not a path"})

    kinds = {f.name: paths.field_kind(f) for f in Options.__dataclass_fields__.values()}
    assert kinds == {"matrix": paths.READ_FILE, "size": None}
    paths.check_field_value("matrix", None, paths.READ_FILE)
    with pytest.raises(HltmtConfigError, match="--matrix .*: it is a folder"):
        paths.check_field_value("matrix", str(tmp_path), paths.READ_FILE)
    with pytest.raises(ValueError):
        paths.PathType("no-such-kind")


def test_the_kind_of_what_a_path_is_is_read_from_the_file_system_not_its_name(tmp_path):
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        name = os.path.join(shm, f"hltmt-paths-{os.getpid()}.txt")
        assert paths.problem(name, paths.WRITE_FILE) is None  # a regular file on a memory file system
    assert paths.problem(str(tmp_path / "new.txt"), paths.WRITE_FILE) is None
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and paths.problem("/dev/null", paths.READ_FILE)


@pytest.mark.parametrize(
    "option, value, said",
    [
        ("--size", "1000000000000000000000000000000", "is out of range (at most 2147483647 either way)"),
        ("--size", "-2147483648", "is out of range"),
        ("--size", "1e30", "invalid int value: '1e30'"),
        ("--rate", "nan", "nan is not a finite number"),
        ("--rate", "-inf", "-inf is not a finite number"),
        ("--rate", "1e400", "1e400 is not a finite number"),
    ],
)
def test_every_commands_numbers_are_integers_that_fit_and_finite_floats(option, value, said, capsys):
    """The commands' parser reads ``type=int`` and ``type=float`` options bounded: one line, exit 2."""
    parser = paths.ArgumentParser(prog="hltmt-x")
    parser.add_argument("--size", type=int, default=1)
    parser.add_argument("--rate", type=float, default=1.0)
    args = parser.parse_args(["--size", "2147483647", "--rate", "-0.5"])
    assert (args.size, args.rate) == (2147483647, -0.5)
    with pytest.raises(SystemExit) as stop:
        parser.parse_args([f"{option}={value}"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"hltmt-x: error: argument {option}: ") and said in err, err


def test_a_size_out_of_range_is_one_line_through_a_command():
    import subprocess

    from conftest import cli

    done = subprocess.run(
        [cli("hltmt-prepare-data"), "--out", "x", "--vocab-size", "1" + "0" * 30], capture_output=True, text=True
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert (
        "hltmt-prepare-data: error: argument --vocab-size: 1000000000000000000000000000000 is out of range"
        in done.stderr
    )
