"""Errors a user can fix, reported as one clear line instead of a traceback.

Code anywhere in the plugin raises :class:`HltmtError` (or a subclass) with a message that
names the problem and the option that fixes it. In a command's process (fairseq-train,
fairseq-generate, ... with ``--user-dir``, and the plugin's own commands: decided by
``hltmt_plugin.command_process``) the hook :func:`install_excepthook` prints
``NAME: error: <message>`` (NAME: the plugin's command, ``hltmt-translate``, ...; ``hltmt_plugin`` in
fairseq's commands) and Python exits with status 1 as for any uncaught exception;
a program that imports the plugin keeps its own hook and Python's report. Two more kinds end in one line:
Ctrl-C (``interrupted``; Python then ends the process as SIGINT does) and a write that the
system refuses where no file is named, which is the standard output (``/dev/full``, a closed
pipe, a file-size limit: ``cannot write standard output (No space left on device)``); any
other exception keeps Python's usual report. In Python code (and tests) the exceptions are
ordinary exceptions. The system's refusal to read or write a named file (an ``OSError`` with its
file name) is one line too, naming the file and the reason. The commands' own errors are of the family too (a bad data folder of
hltmt-prepare-data, an unreadable input of hltmt-translate, an output that must not be written,
a failed step of an experiment run, ...): each command catches its own and ends with its line
and exit status.
"""

import errno
import os
import sys

# errors of writing that name no file when the stream is standard output
_WRITE_ERRNOS = {errno.ENOSPC, errno.EPIPE, errno.EFBIG, errno.EIO, errno.EROFS, errno.EDQUOT, errno.EBADF}
_program = "hltmt_plugin"  # the first word of the hook's lines (install_excepthook)


class HltmtError(ValueError):
    """A problem with the user's options, data or files."""


class HltmtConfigError(HltmtError):
    """Options that cannot work together."""


class HltmtInputError(HltmtError):
    """A batch, data file or checkpoint that the model cannot use."""


def _plugin_error(exc):
    """The HltmtError behind exc, if any (fairseq re-raises some errors as a generic Exception)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, HltmtError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def _stdout_failure(exc) -> bool:
    """Whether ``exc`` is the system refusing a write to standard output."""
    return isinstance(exc, OSError) and exc.errno in _WRITE_ERRNOS and getattr(exc, "filename", None) is None


def _silence_stdout() -> None:
    """Point the broken standard output at /dev/null, so that the exit's flush fails no more."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass


def _file_failure(exc):
    """The one line of the system refusing to read or write a named file (an OSError with its
    file name: missing, not allowed, a read-only or full file system, a file-size limit), else None."""
    if not isinstance(exc, OSError) or getattr(exc, "filename", None) is None:
        return None
    name = exc.filename if exc.filename2 is None else f"{exc.filename} -> {exc.filename2}"
    return f"{name}: {exc.strerror or type(exc).__name__}"


def _excepthook(exc_type, exc, tb, _previous=sys.excepthook):
    error = _plugin_error(exc)
    if error is not None:
        sys.stderr.write(f"{_program}: error: {error}\n")
        return
    failure = _file_failure(exc)
    if failure is not None:
        sys.stderr.write(f"{_program}: error: {failure}\n")
        return
    if isinstance(exc, KeyboardInterrupt):
        sys.stderr.write(f"{_program}: interrupted\n")
        return
    if _stdout_failure(exc):
        _silence_stdout()
        sys.stderr.write(
            f"{_program}: error: cannot write standard output ({exc.strerror or exc}): the output is incomplete\n"
        )
        return
    _previous(exc_type, exc, tb)


def install_excepthook(program: str = "") -> None:
    """Make an uncaught :class:`HltmtError` end the process with one line, no traceback;
    ``program``: the lines' first word, when given (the plugin's command names itself)."""
    global _program
    if program:
        _program = program
    if getattr(sys.excepthook, "__name__", "") != "_excepthook":
        sys.excepthook = _excepthook
