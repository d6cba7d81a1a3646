"""Files written whole or not at all: every file the plugin writes goes through here.

A file is written to a temporary file beside it (same folder, so the last step is one atomic
rename; a unique name, so two processes never share one), flushed to disk and renamed over
the destination. Until then the destination is its old self; a failure or an interrupt at
any point removes the temporary file and leaves the destination as it was. Whatever reads
the file (also the process writing it, when a command's output is one of its own inputs)
sees either the old file or the whole new one, never part of one.

The destination gets what an ordinary ``open`` would give it: a symbolic link keeps pointing
at the new file, an existing file keeps its permission bits and (where the system lets this
process) its owner and group, a new one gets ``0o666`` less the umask (not the ``0o600`` of a
temporary file). A destination that is not a regular file or a new name (a device, a FIFO, a
socket, a ``/dev/std*`` or ``/proc/*/fd`` path that names another file) is refused before
anything is written (:func:`check_destination`): renaming over it would put a regular file in
place of the device or pipe, and a reader waiting on it would wait forever. SIGTERM, like an
exception or Ctrl-C, removes every temporary file a write had open before the process ends.

- :func:`write_text`, :func:`write_bytes`, :func:`save_torch`: a whole file in one call; a
  failure is one :class:`HltmtInputError` naming the file and whether it is unchanged;
- :class:`AtomicFile`: the same for a writer that streams (``with AtomicFile(path) as out:
  out.open().write(...)``) or that writes a path (``write_atomically(path, write)``), raising
  what the writer raised (``cli/output.AtomicOutput`` names the option of the command;
  ``compat/atomic_copy`` says how large a checkpoint was and what room its folder has);
- :func:`replace_file`, :func:`replace_folder`: a complete file or folder made elsewhere put
  in place.

Reading is :mod:`hltmt_plugin.compat.safe_loading`'s: every checkpoint and adapter file is
read weights-only, with the allowlist of types fairseq checkpoints hold.
"""

import errno
import os
import shutil
import signal
import stat
import tempfile
import threading
from typing import Callable, Optional, Set

from hltmt_plugin.errors import HltmtConfigError, HltmtInputError

PARTIAL = ".partial"  # the temporary file of a text / bytes output: .NAME.XXXXXXXX.partial
TORCH_TEMP = ".tmp"  # of a torch file (a checkpoint): .NAME.XXXXXXXX.tmp, removed by the next trainer if stale


def os_error_behind(error: Optional[BaseException]) -> Optional[OSError]:
    """The OSError behind a failed write (torch reports one as its own RuntimeError), if any."""
    for _ in range(8):
        if error is None or isinstance(error, OSError):
            return error
        error = error.__cause__ or error.__context__
    return None


def _sync_folder(folder: str) -> None:
    """Make a rename in ``folder`` durable (where the system allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


class UnsafeDestination(OSError, HltmtConfigError):
    """A destination that must not be replaced by a renamed file (see :func:`check_destination`)."""


# paths that name another file or stream: /dev/stdout, /dev/fd/1, /proc/self/fd/1, ...
_STREAM_PREFIXES = ("/dev/", "/proc/")


def check_destination(path: str) -> None:
    """Raise :class:`UnsafeDestination` unless ``path`` is a regular file (or a link to one) or a
    new name in an existing place: a device, FIFO or socket would be replaced by a regular file,
    and a ``/dev/std*`` / ``/proc/*/fd`` path names a stream whose file (opened by the shell,
    perhaps for appending) the rename would replace."""
    shown = os.path.abspath(path)
    real = os.path.realpath(path)
    if shown.startswith(_STREAM_PREFIXES) or real.startswith(_STREAM_PREFIXES):
        raise UnsafeDestination(
            errno.EINVAL,
            "it names a device or a stream, not a file: name a regular file "
            "(or leave the option out to write to standard output)",
        )
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError:
        return  # the write itself reports what is wrong with the place
    if stat.S_ISDIR(mode):
        raise UnsafeDestination(errno.EISDIR, "it is a folder: name a file")
    if not stat.S_ISREG(mode):
        kind = (
            "a FIFO"
            if stat.S_ISFIFO(mode)
            else "a socket"
            if stat.S_ISSOCK(mode)
            else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file"
        )
        raise UnsafeDestination(errno.EINVAL, f"it is {kind}, which a new file would replace: name a regular file")


def check_output(path: str, label: str) -> None:
    """A command's output ``path`` (named by the option ``label``) checked before any work: one
    :class:`HltmtInputError` when it is a folder, a device, a FIFO or a stream path."""
    try:
        check_destination(path)
    except UnsafeDestination as error:
        raise HltmtInputError(f"cannot write {label} {path}: {error.strerror}") from None


# temporary files being written, removed by the SIGTERM handler before the process ends
_LIVE: Set[str] = set()
_handler_installed = False


def _on_sigterm(signum, frame):
    for tmp in list(_LIVE):
        _remove_quietly(tmp)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)  # end as SIGTERM ends a process (status 143 in a shell)


def _watch_sigterm() -> None:
    """Make SIGTERM remove the live temporary files first (when nobody else handles it)."""
    global _handler_installed
    if _handler_installed or threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError):
        return
    _handler_installed = True


def _final_owner(target: str):
    """The (uid, gid) of an existing ``target`` (kept by the new file), or None."""
    try:
        st = os.stat(target)
    except OSError:
        return None
    return st.st_uid, st.st_gid


def _final_mode(target: str) -> int:
    """The mode ``open`` would leave ``target`` with: its own, or a new file's."""
    try:
        return os.stat(target).st_mode & 0o7777
    except OSError:
        pass
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


class AtomicFile:
    """``path`` replaced by a temporary file beside it, once that is complete::

        with AtomicFile(path) as out:       # the temporary file is made here
            out.open().write("...")          # or: a writer fills the path out.tmp
        # here ``path`` is the whole new file; after an exception it is as it was

    The temporary file is made at once (an unwritable place is an OSError before any work).
    :meth:`commit` (the ``with`` block's normal end) flushes it to disk and renames it over
    ``path``; :meth:`discard` (its end by an exception) removes it. Errors are the writer's and
    the system's own, raised after the temporary file is removed."""

    def __init__(self, path: str, suffix: str = PARTIAL):
        self.path = path
        check_destination(path)
        self.target = os.path.realpath(path)  # a symbolic link keeps pointing at the new file
        _watch_sigterm()
        self._fd, self.tmp = tempfile.mkstemp(
            prefix=f".{os.path.basename(self.target)}.", suffix=suffix, dir=os.path.dirname(self.target)
        )
        _LIVE.add(self.tmp)
        self.file = None
        self.finished = False

    def open(self, binary: bool = False):
        """The temporary file, open for writing: text (UTF-8, ``\\n`` line ends) or bytes."""
        self.file = os.fdopen(self._fd, "wb") if binary else os.fdopen(self._fd, "w", encoding="utf-8", newline="\n")
        return self.file

    def _close(self) -> None:
        fd, file, self._fd, self.file = self._fd, self.file, None, None
        if file is not None:
            file.close()
        elif fd is not None:
            os.close(fd)

    def commit(self) -> None:
        """Flush the temporary file to disk, give it the destination's mode and rename it over
        the destination; any failure removes it and is raised."""
        if self.finished:
            return
        try:
            if self.file is not None:
                self.file.flush()
            self._close()
            replace_file(self.tmp, self.target, mode=_final_mode(self.target), owner=_final_owner(self.target))
        except BaseException:
            self.discard()
            raise
        self.finished = True
        _LIVE.discard(self.tmp)

    def discard(self) -> None:
        """Remove the temporary file (unless committed): the destination stays as it was."""
        if self.finished:
            return
        self.finished = True
        try:
            self._close()
        except OSError:
            pass
        _remove_quietly(self.tmp)
        _LIVE.discard(self.tmp)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.commit()
        else:
            self.discard()
        return False


def write_atomically(path: str, write: Callable[[str], object], suffix: str = PARTIAL) -> None:
    """``write(tmp)`` fills a temporary file beside ``path`` (by its path), which then replaces
    ``path``; what ``write`` or the system raises is raised, the temporary file removed."""
    with AtomicFile(path, suffix) as out:
        write(out.tmp)


def torch_writer(obj) -> Callable[[str], None]:
    """The writer (for :func:`write_atomically`) of ``torch.save(obj)``."""
    import torch  # here, not at the top: the commands that import this module answer --help without torch

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            torch.save(obj, f)

    return write


def write_failed(label: str, path: str, error: BaseException) -> HltmtInputError:
    """The one-line error of a write of ``path`` (called ``label``) that failed with ``error``."""
    cause = os_error_behind(error)
    reason = (
        cause.strerror
        if cause is not None and cause.strerror
        else (str(error).strip().splitlines() or [type(error).__name__])[0]
    )
    kept = "it is unchanged" if os.path.exists(path) else "nothing was written"
    return HltmtInputError(f"could not write {label} ({reason}): {kept}")


def _write_whole(path: str, write: Callable[[str], object], suffix: str, what: Optional[str]) -> None:
    label = f"{what} {path}" if what else path
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        out = AtomicFile(path, suffix)
    except OSError as error:
        raise HltmtInputError(f"cannot write {label}: {error.strerror or error}") from None
    try:
        with out:
            write(out.tmp)
    except (OSError, RuntimeError) as error:  # torch reports a failed write as its own RuntimeError
        raise write_failed(label, path, error) from None


def write_bytes(path: str, data: bytes, what: Optional[str] = None) -> None:
    """``data`` as the file ``path`` (its folder made if missing), whole or not at all; a failure
    is one HltmtInputError naming ``path`` (after ``what``, e.g. the option that names it)."""

    def write(tmp):
        with open(tmp, "wb") as f:
            f.write(data)

    _write_whole(path, write, PARTIAL, what)


def write_text(path: str, text: str, what: Optional[str] = None) -> None:
    """``text`` as the file ``path`` (UTF-8, ``\\n`` line ends), as :func:`write_bytes`."""

    def write(tmp):
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)

    _write_whole(path, write, PARTIAL, what)


def save_torch(obj, path: str, what: Optional[str] = None) -> None:
    """``torch.save(obj, path)``, as :func:`write_bytes` (also when ``path`` is the file being
    read, e.g. a checkpoint replaced by its edited self)."""
    _write_whole(path, torch_writer(obj), TORCH_TEMP, what)


def replace_file(new: str, final: str, mode: Optional[int] = None, owner=None) -> None:
    """Put the complete file ``new`` (in ``final``'s folder) in place of ``final``: flushed to
    disk (given ``mode`` and, where allowed, ``owner`` = (uid, gid)), renamed over it, the rename
    itself made durable."""
    fd = os.open(new, os.O_RDONLY)
    try:
        os.fsync(fd)
        if owner is not None and hasattr(os, "fchown"):
            try:
                os.fchown(fd, *owner)
            except OSError:  # not allowed to give the file away: it stays this process's
                pass
        if mode is not None:
            try:
                os.fchmod(fd, mode)
            except OSError:  # a file system without permission bits
                pass
    finally:
        os.close(fd)
    os.replace(new, final)
    _sync_folder(os.path.dirname(os.path.abspath(final)))


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


def inside(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies under it (both resolved)."""
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)
