"""Output files of the commands: never truncated before what replaces them is complete, and
never one of the files the command reads.

:class:`AtomicOutput` writes to a temporary file beside the output (same folder, so the final
rename is atomic; :mod:`hltmt_plugin.atomic_files`) and renames it over the output only when the
command has written all of it; a failure or an interrupt removes the temporary file and leaves
the old output as it was.
:func:`refuse_inputs` refuses an output that is one of the command's input files (the input
would be lost to its own output); :func:`stream_problem` says why an input cannot be read as a
stream (a pipe, ``<(cmd)``, is read like a file).
"""

import os
import stat
from typing import Dict, Optional

from hltmt_plugin.atomic_files import AtomicFile, write_failed
from hltmt_plugin.errors import HltmtConfigError


class OutputError(HltmtConfigError):
    """An output that cannot be written, or must not be: one line for the user."""


def same_file(a: Optional[str], b: Optional[str]) -> bool:
    """Whether paths ``a`` and ``b`` name one existing file (links and ``..`` resolved)."""
    try:
        return bool(a) and bool(b) and os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)
    except OSError:
        return False


def refuse_inputs(
    option: str, output: str, inputs: Dict[str, Optional[str]], folders: Dict[str, Optional[str]] = None
) -> None:
    """Refuse ``output`` (given as ``option``) when it is one of ``inputs`` (what -> path) or a
    file inside one of ``folders`` (what -> folder) that the command reads."""
    for what, path in inputs.items():
        if same_file(output, path):
            raise OutputError(f"{option} {output} is {what}: writing there would replace it; name another file")
    for what, folder in (folders or {}).items():
        if (
            folder
            and os.path.isdir(folder)
            and os.path.exists(output)
            and same_file(os.path.dirname(os.path.abspath(output)), folder)
        ):
            raise OutputError(
                f"{option} {output} is a file of {what} ({folder}): writing there would replace it; name another file"
            )


def stream_problem(path: str, what: str = "input file") -> Optional[str]:
    """Why ``path`` cannot be read as a command's input stream, judged by what it is (``stat``,
    never opened): None for ``-``, a regular file or a pipe (``--input <(cmd)`` is ``/dev/fd/N``),
    else one line (missing, a folder, a device or a socket)."""
    if path == "-":
        return None
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return f"{what} {path} does not exist"
    except OSError as error:
        return f"cannot read {what} {path}: {error.strerror or error}"
    if stat.S_ISREG(mode) or stat.S_ISFIFO(mode):
        return None
    kind = "a folder" if stat.S_ISDIR(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
    return f"{what} {path} is {kind}: name a file, a pipe or - (standard input)"


class AtomicOutput:
    """``path`` written through a temporary file in its folder (:class:`hltmt_plugin.atomic_files.AtomicFile`)::

        with AtomicOutput(path, "--output") as f:   # text, UTF-8
            f.write(...)
        # here ``path`` is the whole new file; on an exception it is unchanged

    The temporary file is created at once (so an unwritable place is reported before any
    work), gets the mode an ordinary ``open`` would give (or the replaced file's), and is
    fsynced before the rename. Every problem is an :class:`OutputError` naming ``option``."""

    def __init__(self, path: str, option: str = "output", binary: bool = False):
        self.path, self.option = path, option
        if os.path.isdir(path):
            raise OutputError(f"{option} {path} is a folder: name a file")
        try:
            self.out = AtomicFile(path)
        except OSError as error:
            raise OutputError(f"cannot write {option} {path}: {error.strerror or error}") from None
        self.file = _NamedWrites(self.out.open(binary), self)

    def __enter__(self):
        return self.file

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.commit()
        else:
            self.discard()
        return False

    def failed(self, error: OSError) -> OutputError:
        """The one line of a write of this output that the system refused (a full disk, a
        file-size limit): it names the output, not standard output."""
        return OutputError(str(write_failed(f"{self.option} {self.path}", self.path, error)))

    def commit(self) -> None:
        """Flush, fsync and rename over the output; a failure removes the temporary file."""
        try:
            self.out.commit()
        except OSError as error:
            raise self.failed(error) from None

    def discard(self) -> None:
        """Remove the temporary file (unless committed); the output stays as it was."""
        self.out.discard()


class _NamedWrites:
    """The temporary file of an :class:`AtomicOutput`, whose failed writes name the output."""

    def __init__(self, file, output: AtomicOutput):
        self._file, self._output = file, output

    def write(self, data):
        try:
            return self._file.write(data)
        except OSError as error:
            raise self._output.failed(error) from None

    def flush(self):
        try:
            self._file.flush()
        except OSError as error:
            raise self._output.failed(error) from None

    def __getattr__(self, name):
        return getattr(self._file, name)

    def __iter__(self):
        return iter(self._file)
