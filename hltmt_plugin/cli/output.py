"""Output files of the commands: never truncated before what replaces them is complete, and
never one of the files the command reads.

:class:`AtomicOutput` writes to a temporary file beside the output (same folder, so the final
rename is atomic) and renames it over the output only when the command has written all of it;
a failure or an interrupt removes the temporary file and leaves the old output as it was.
:func:`refuse_inputs` refuses an output that is one of the command's input files (the input
would be lost to its own output).
"""
import os
import shutil
import tempfile
from typing import Dict, Optional


class OutputError(ValueError):
    """An output that cannot be written, or must not be: one line for the user."""


def same_file(a: Optional[str], b: Optional[str]) -> bool:
    """Whether paths ``a`` and ``b`` name one existing file (links and ``..`` resolved)."""
    try:
        return bool(a) and bool(b) and os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)
    except OSError:
        return False


def refuse_inputs(option: str, output: str, inputs: Dict[str, Optional[str]],
                  folders: Dict[str, Optional[str]] = None) -> None:
    """Refuse ``output`` (given as ``option``) when it is one of ``inputs`` (what -> path) or a
    file inside one of ``folders`` (what -> folder) that the command reads."""
    for what, path in inputs.items():
        if same_file(output, path):
            raise OutputError(f"{option} {output} is {what}: writing there would replace it; name another file")
    for what, folder in (folders or {}).items():
        if folder and os.path.isdir(folder) and os.path.exists(output) and \
                same_file(os.path.dirname(os.path.abspath(output)), folder):
            raise OutputError(f"{option} {output} is a file of {what} ({folder}): writing there would replace "
                              "it; name another file")


def inside(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies under it (both resolved)."""
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


class AtomicOutput:
    """``path`` written through a temporary file in its folder::

        with AtomicOutput(path, "--output") as f:   # text, UTF-8
            f.write(...)
        # here ``path`` is the whole new file; on an exception it is unchanged

    The temporary file is created at once (so an unwritable place is reported before any
    work), gets the mode an ordinary ``open`` would give (or the replaced file's), and is
    fsynced before the rename."""

    def __init__(self, path: str, option: str = "output", binary: bool = False):
        self.path, self.option, self.finished = path, option, False
        if os.path.isdir(path):
            raise OutputError(f"{option} {path} is a folder: name a file")
        self.target = os.path.realpath(path)  # a symbolic link keeps pointing at the new file
        folder = os.path.dirname(self.target)
        try:
            fd, self.tmp = tempfile.mkstemp(prefix=f".{os.path.basename(self.target)}.", suffix=".partial",
                                             dir=folder)
        except OSError as error:
            raise OutputError(f"cannot write {option} {path}: {error.strerror or error}") from None
        try:
            umask = os.umask(0)
            os.umask(umask)
            mode = os.stat(self.target).st_mode & 0o7777 if os.path.exists(self.target) else 0o666 & ~umask
            os.fchmod(fd, mode)
        except OSError:
            pass
        self.file = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="\n")

    def __enter__(self):
        return self.file

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.commit()
        else:
            self.discard()
        return False

    def commit(self) -> None:
        """Flush, fsync and rename over the output; a failure removes the temporary file."""
        self.finished = True
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            os.replace(self.tmp, self.target)
        except OSError as error:
            self.discard()
            kept = "it is unchanged" if os.path.exists(self.path) else "nothing was written"
            raise OutputError(f"could not write {self.option} {self.path} ({error.strerror or error}): {kept}") \
                from None

    def discard(self) -> None:
        """Remove the temporary file (unless committed); the output stays as it was."""
        if self.finished and not os.path.exists(self.tmp):
            return
        self.finished = True
        try:
            self.file.close()
        except OSError:
            pass
        try:
            os.remove(self.tmp)
        except OSError:
            pass


def replace_folder(new: str, final: str) -> None:
    """Put the complete folder ``new`` in place of ``final`` (which may exist): ``final`` is
    moved aside, ``new`` renamed to it, then the old one removed; should the rename fail, the
    old folder is put back."""
    old = None
    if os.path.lexists(final):
        old = tempfile.mkdtemp(prefix=f".{os.path.basename(final)}.old.", dir=os.path.dirname(os.path.abspath(final)))
        os.rmdir(old)
        os.replace(final, old)
    try:
        os.replace(new, final)
    except OSError:
        if old is not None:
            os.replace(old, final)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)

