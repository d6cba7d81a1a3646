"""Errors a user can fix, reported as one clear line instead of a traceback.

Code anywhere in the plugin raises :class:`HltmtError` (or a subclass) with a message that
names the problem and the option that fixes it. In a command-line run (fairseq-train,
fairseq-generate, ...) the hook installed at import prints ``hltmt_plugin: error: <message>``
and Python exits with status 1 as for any uncaught exception; any other exception keeps Python's usual report. In Python code
(and tests) the exceptions are ordinary exceptions.
"""
import sys


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


def _excepthook(exc_type, exc, tb, _previous=sys.excepthook):
    error = _plugin_error(exc)
    if error is not None:
        sys.stderr.write(f"hltmt_plugin: error: {error}\n")
        return
    _previous(exc_type, exc, tb)


def install_excepthook() -> None:
    """Make an uncaught :class:`HltmtError` end the process with one line, no traceback."""
    if getattr(sys.excepthook, "__name__", "") != "_excepthook":
        sys.excepthook = _excepthook
