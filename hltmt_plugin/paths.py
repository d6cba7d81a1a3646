"""Options that name a file or folder, declared as such where they are defined.

Every option of the plugin's commands that names something to read or write is added with
:func:`path_option` (argparse) or carries ``metadata={"path": KIND}`` (the plugin's fairseq
options, dataclass fields), with one of :data:`KINDS`. The declaration does two things:

- at parsing, a value is refused in one line when it cannot be what the kind says without
  harm: a FIFO, a device or a socket where a file or folder is read or written (opening one
  would hang or replace it), a regular file where a folder is written, a folder where a file is
  written, an input that does not exist (also in a dry run); nothing is opened;
- after parsing (:class:`ArgumentParser`), no output may be, hold or lie inside an input of
  the same command line (an input lost to its own output, or deleted by ``--force``).

The declarations are what the route-by-hazard test (``tests/test_hazards.py``) reads: it finds
every declared option of every installed command by itself, crosses it with the hazards of its
kind, and fails on an installed command with a path option that is not declared.
docs/bad-input.md shows the table it generates.
"""

import argparse
import os
import stat
from typing import Dict, List, Optional, Tuple

from hltmt_plugin.atomic_files import UnsafeDestination, check_destination, inside, special_kind

READ_FILE = "read-file"  # a file the command reads (a checkpoint, a model, a record)
READ_FOLDER = "read-folder"  # a folder the command reads (a data folder)
READ_PATH = "read-path"  # a file or a folder (a checkpoint or an export folder)
READ_STREAM = "read-stream"  # a file, "-" (standard input) or a pipe
WRITE_FILE = "write-file"  # a file the command writes whole
WRITE_STREAM = "write-stream"  # a file written whole, or "-" (standard output)
WRITE_FOLDER = "write-folder"  # a folder the command writes whole (replaced only with --force)
WORK_FOLDER = "work-folder"  # a folder a run writes as it goes and resumes from
READ_PATTERN = "read-pattern"  # a pattern of files read (NAME=GLOB): each file matched is checked when read
KINDS = (
    READ_FILE,
    READ_FOLDER,
    READ_PATH,
    READ_STREAM,
    READ_PATTERN,
    WRITE_FILE,
    WRITE_STREAM,
    WRITE_FOLDER,
    WORK_FOLDER,
)
READS = (READ_FILE, READ_FOLDER, READ_PATH, READ_STREAM, READ_PATTERN)
WRITES = (WRITE_FILE, WRITE_STREAM, WRITE_FOLDER, WORK_FOLDER)
STREAM = "-"
METAVARS = {
    READ_FILE: "FILE",
    READ_FOLDER: "FOLDER",
    READ_PATH: "PATH",
    READ_STREAM: "FILE",
    READ_PATTERN: "PATTERN",
    WRITE_FILE: "FILE",
    WRITE_STREAM: "FILE",
    WRITE_FOLDER: "FOLDER",
    WORK_FOLDER: "FOLDER",
}


def problem(value: str, kind: str) -> Optional[str]:
    """Why ``value`` cannot be a path of ``kind`` (None when it can, or when only the command can
    tell; a missing input of a command line: :func:`missing`). Looks at what the path is (``stat``,
    following links), never opens it."""
    if value == "":
        return "an empty path: name a file or folder"
    if (value == STREAM and kind in (READ_STREAM, WRITE_STREAM)) or kind == READ_PATTERN:
        return None
    if "\x00" in value:
        return "a path cannot hold a NUL character"
    if kind in (WRITE_FILE, WRITE_STREAM):  # the one writer's own judgement of a destination
        try:
            check_destination(value)
        except UnsafeDestination as error:
            return error.strerror
        return None
    try:
        mode = os.stat(value).st_mode
    except (OSError, ValueError):
        return None  # missing, or unreachable: reported by the command that needs it
    special = special_kind(mode)
    if kind == READ_STREAM:
        if stat.S_ISDIR(mode):
            return "it is a folder: name a file, a pipe or -"
        return None if special in (None, "a FIFO") else f"it is {special}: name a file, a pipe or -"
    if special is not None:
        verb = "read" if kind in READS else "written"
        return f"it is {special}, which cannot be {verb} as a {'folder' if 'folder' in kind else 'file'}"
    if kind in (WRITE_FOLDER, WORK_FOLDER) and not stat.S_ISDIR(mode):
        return "it is a file: name a folder"
    if kind == READ_FOLDER and not stat.S_ISDIR(mode):
        return "it is a file: name a folder"
    if kind == READ_FILE and stat.S_ISDIR(mode):
        return "it is a folder: name a file"
    return None


def missing(value: str, kind: str) -> Optional[str]:
    """Why an input of a command line cannot be read: it does not exist (None when it does, or when
    only the command can tell: unreachable, or a pattern). Refused at parsing, so that no command,
    not even a dry run, goes on without one of its inputs."""
    if kind not in READS or kind == READ_PATTERN or value == STREAM:
        return None
    try:
        os.stat(value)
    except (FileNotFoundError, NotADirectoryError):
        return "no such " + {READ_FILE: "file", READ_FOLDER: "folder"}.get(kind, "file or folder")
    except (OSError, ValueError):
        return None
    return None


class PathType:
    """argparse's ``type`` of a declared path option: the value unchanged, or an
    ``ArgumentTypeError`` saying why it cannot be a path of this kind."""

    def __init__(self, kind: str, convert=None):
        if kind not in KINDS:
            raise ValueError(f"unknown path kind {kind!r}: one of {', '.join(KINDS)}")
        self.kind, self.convert = kind, convert
        self.__name__ = kind  # argparse names the type in its messages

    def __call__(self, value: str):
        why = problem(value, self.kind) or missing(value, self.kind)
        if why is not None:
            raise argparse.ArgumentTypeError(f"{value}: {why}")
        return self.convert(value) if self.convert is not None else value


def path_option(parser, *flags, kind: str, in_place: Tuple[str, ...] = (), **kwargs) -> argparse.Action:
    """``parser.add_argument(*flags, **kwargs)`` for an option naming a path of ``kind``:
    declared (the action's ``path_kind``) and checked at parsing (:class:`PathType`). An output
    may be, or lie inside, the inputs of the options ``in_place``: an update in place, written
    whole by the one writer (the input is read before its new self replaces it), or a working
    folder whose command skips its own files when it reads the input."""
    kwargs["type"] = PathType(kind, kwargs.get("type"))
    kwargs.setdefault("metavar", METAVARS[kind])
    action = parser.add_argument(*flags, **kwargs)
    action.path_kind, action.in_place = kind, tuple(in_place)
    return action


def declared(parser) -> List[Tuple[str, argparse.Action]]:
    """``(subcommand, action)`` of every option of ``parser`` and its subcommands (subcommand
    ``""`` for the command itself), path options or not."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += [(f"{name} {s}".strip(), a) for s, a in declared(sub)]
        else:
            found.append(("", action))
    return found


def path_kind(action) -> Optional[str]:
    """The declared kind of an argparse action, or None."""
    return getattr(action, "path_kind", None)


def field_kind(field) -> Optional[str]:
    """The declared kind of a dataclass field (``metadata={"path": KIND}``), or None."""
    kind = field.metadata.get("path") if field.metadata else None
    if kind is not None and kind not in KINDS:
        raise ValueError(f"field {field.name}: unknown path kind {kind!r}")
    return kind


def check_field_value(name: str, value, kind: str) -> None:
    """A plugin's fairseq option (``--name``) that names a path of ``kind``, checked as
    :class:`PathType` checks a command's: one HltmtConfigError."""
    from hltmt_plugin.errors import HltmtConfigError

    if value is None:
        return
    why = problem(str(value), kind)
    if why is not None:
        raise HltmtConfigError(f"--{name.replace('_', '-')} {value}: {why}")


def _roots(folder: str) -> List[str]:
    """Where the files of ``folder`` may lie: in it; for a snapshot of the Hugging Face hub's
    cache (``.../snapshots/REVISION``), whose files are links into the cache's ``blobs`` folder,
    there too."""
    real = os.path.realpath(folder)
    parent = os.path.dirname(real)
    if os.path.basename(parent) == "snapshots":
        return [folder, os.path.join(os.path.dirname(parent), "blobs")]
    return [folder]


def in_folder(folder: str, name, where: str, kind: str = READ_FILE) -> str:
    """The path of ``name``, a file (or folder, ``kind``) that a file of ``folder`` names (a
    tokenizer's model, a weight shard, a model of an export...), kept inside ``folder``: a name
    that is not a relative path, climbs out (``..``), or leads out through a link is refused in one
    line naming ``where`` (the file that names it), as is a special file (:func:`problem`). Every
    route that follows a name written in a folder's files resolves it here."""
    from hltmt_plugin.errors import HltmtInputError

    shown = repr(name)[:80]
    if not isinstance(name, str) or not name.strip() or "\x00" in name:
        raise HltmtInputError(f"{where}: {shown} is not a file name")
    if os.path.isabs(name) or os.path.normpath(name).split(os.sep)[0] == os.pardir:
        raise HltmtInputError(f"{where}: {shown} lies outside {folder}: a folder's files may name only files inside it")
    path = os.path.join(folder, name)
    if not any(inside(path, root) for root in _roots(folder)):
        raise HltmtInputError(
            f"{where}: {shown} is a link that leads outside {folder}: a folder's files may name only files inside it"
        )
    why = problem(path, kind)
    if why is not None:
        raise HltmtInputError(f"{where}: {shown}: {why}")
    return path


def option_name(action) -> str:
    """The name an option is called by in messages: its first long form."""
    flags = action.option_strings
    return next((f for f in flags if f.startswith("--")), flags[0] if flags else action.dest)


def _values(args, action) -> List[str]:
    value = getattr(args, action.dest, None)
    if value is None:
        return []
    values = value if isinstance(value, (list, tuple)) else [value]
    return [str(v) for v in values if str(v) not in ("", STREAM)]


def overlap(output: str, out_kind: str, source: str) -> Optional[str]:
    """How the output ``output`` (of ``out_kind``) collides with the input ``source``, or None:
    it is the input, holds it (a folder output), or lies inside it (an input folder)."""
    if os.path.realpath(output) == os.path.realpath(source):
        return "is"
    if out_kind == WRITE_FOLDER and inside(source, output):  # --force would delete it
        return "holds"
    if os.path.isdir(source) and inside(output, source):
        return "lies inside"
    return None


def collisions(parser, args) -> List[str]:
    """One line for each output option of ``args`` that is, holds or lies inside an input option."""
    chosen = getattr(args, "command", None)
    actions = [(sub, a) for sub, a in declared(parser) if path_kind(a) and (not sub or sub.split()[0] == chosen)]
    inputs: Dict[str, Tuple[str, str]] = {}
    for _, action in actions:
        if path_kind(action) in READS and path_kind(action) != READ_PATTERN:
            for value in _values(args, action):
                inputs.setdefault(value, (option_name(action), value))
    lines = []
    for _, action in actions:
        kind = path_kind(action)
        if kind not in WRITES:
            continue
        option = option_name(action)
        for value in _values(args, action):
            for source, (in_option, _) in inputs.items():
                how = overlap(value, kind, source)
                if how in ("is", "lies inside") and in_option in getattr(action, "in_place", ()):
                    continue
                if how is not None:
                    lines.append(
                        f"{option} {value} {how} {in_option} {source}, an input of this command: "
                        "writing there would replace it; name another " + ("folder" if "folder" in kind else "file")
                    )
    return lines


INT_LIMIT = 2**31 - 1  # an integer option's largest magnitude: what the libraries given it (C ints) hold


def bounded_int(text: str) -> int:
    """argparse's ``int`` of the plugin's commands: an integer of at most :data:`INT_LIMIT` either way."""
    value = int(text)  # argparse turns a ValueError into "invalid int value"
    if abs(value) > INT_LIMIT:
        raise argparse.ArgumentTypeError(f"{text:.40} is out of range (at most {INT_LIMIT} either way)")
    return value


def finite_float(text: str) -> float:
    """argparse's ``float`` of the plugin's commands: a finite number (no nan or inf)."""
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{text:.40} is not a finite number")
    return value


bounded_int.__name__, finite_float.__name__ = "int", "float"  # argparse names the type in its messages
NUMBER_TYPES = {int: bounded_int, float: finite_float}


def shows_default(action) -> bool:
    """Whether ``--help`` must show ``action``'s default: an option (not a switch) with a value
    by default, not None or empty."""
    default = action.default
    return (
        bool(action.option_strings)
        and action.nargs != 0
        and action.help != argparse.SUPPRESS
        and default is not None
        and default != argparse.SUPPRESS
        and not (isinstance(default, (str, list, tuple)) and len(default) == 0)
    )


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose parsing also refuses an output that is, holds or lies inside an input of
    the same command line (:func:`collisions`), and reads every ``int`` option as
    :func:`bounded_int` and ``float`` option as :func:`finite_float`; every error is one line
    (exit 2). Its ``--help`` shows the default of every option that has one
    (:func:`shows_default`), unless the option's help already says it."""

    def format_help(self):
        for action in self._actions:  # every option, of argument groups too
            if shows_default(action) and "default" not in (action.help or ""):
                action.help = f"{action.help} (default: %(default)s)" if action.help else "default: %(default)s"
        return super().format_help()

    def add_argument(self, *args, **kwargs):
        if kwargs.get("type") in NUMBER_TYPES:
            kwargs["type"] = NUMBER_TYPES[kwargs["type"]]
        return super().add_argument(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")

    def parse_known_args(self, args=None, namespace=None):
        parsed, extra = super().parse_known_args(args, namespace)
        if not getattr(self, "_nested", False):
            lines = collisions(self, parsed)
            if lines:
                self.error(lines[0])
        return parsed, extra

    def add_subparsers(self, **kwargs):
        kwargs.setdefault("parser_class", _SubParser)
        return super().add_subparsers(**kwargs)


class _SubParser(ArgumentParser):
    """A subcommand's parser: its options are checked by the command's parser, which sees them all;
    its errors are the command's one line (``hltmt-adapters: error: export: ...``)."""

    _nested = True

    def error(self, message):
        command, _, sub = self.prog.partition(" ")
        self.exit(2, f"{command}: error: {sub}: {message} (see --help)\n")
