"""Progress lines of long commands on stderr: one short line per stage or per piece of work
(``hltmt-import: reading weights: shard 2 of 5``), never on stdout, never in a file the command
writes.

A command starts them around its work (:func:`started`, its program's name); the work it calls says where it
is (:func:`step`), which does nothing when no command started them. A line is written when
stderr is a terminal, or once the work has run :data:`LONG_SECONDS` (a log of a long run shows
where it is; a short run in a script stays quiet). ``HLTMT_PROGRESS=1`` writes every line from
the start, ``HLTMT_PROGRESS=0`` none.
"""

import contextlib
import os
import sys
import time
from typing import Optional

ENV = "HLTMT_PROGRESS"  # 1: every line, 0: none; unset: on a terminal, or once the work is long
LONG_SECONDS = 10.0

_current: Optional["Progress"] = None


class Progress:
    """The progress lines of the command ``prog`` on ``stream`` (stderr when None, read at each
    line); ``forced``: True or False as ``HLTMT_PROGRESS`` says, None to decide by the terminal
    and the time."""

    def __init__(self, prog: str, stream=None, forced: Optional[bool] = None, clock=time.monotonic):
        self.prog, self.stream, self.forced, self.clock = prog, stream, forced, clock
        self.started = clock()

    def shown(self) -> bool:
        if self.forced is not None:
            return self.forced
        stream = self.stream or sys.stderr
        try:
            terminal = stream.isatty()
        except (AttributeError, ValueError):  # a closed or odd stream
            terminal = False
        return terminal or self.clock() - self.started >= LONG_SECONDS

    def step(self, what: str, done: Optional[int] = None, total: Optional[int] = None) -> None:
        """``PROG: what`` (``PROG: what: done of total`` with a count), when lines are shown."""
        if not self.shown():
            return
        line = f"{self.prog}: {what}" + (f": {done} of {total}" if total is not None else "")
        stream = self.stream or sys.stderr
        try:
            stream.write(line + "\n")
            stream.flush()
        except (OSError, ValueError):  # stderr gone: the work goes on without its lines
            pass


def forced_by_env(environ=None) -> Optional[bool]:
    """``HLTMT_PROGRESS``: True for 1, False for 0, None unset or anything else."""
    value = (os.environ if environ is None else environ).get(ENV, "").strip()
    return {"1": True, "0": False}.get(value)


@contextlib.contextmanager
def started(prog: str, stream=None):
    """Progress lines for the command ``prog`` while the block runs (``HLTMT_PROGRESS`` read
    here); the one before it (none, outside a command) afterwards."""
    global _current
    before, _current = _current, Progress(prog, stream, forced_by_env())
    try:
        yield _current
    finally:
        _current = before


def step(what: str, done: Optional[int] = None, total: Optional[int] = None) -> None:
    """A line of the command's progress (:meth:`Progress.step`); nothing outside a command."""
    if _current is not None:
        _current.step(what, done, total)
