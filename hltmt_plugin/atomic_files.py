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
exception or Ctrl-C, removes every temporary file a write had open before the process ends;
what a SIGKILL leaves (a temporary file whose lock no live writer holds) is removed by the
next write of the same file.

What a write changes in the process lasts as long as the write: the SIGTERM handler is
installed when the first temporary file, folder or lock is made (in the main thread, where
SIGTERM has its default action; a handler of the program's own is left alone) and the default
action put back when the last is gone; a command's scratch folder (:func:`scratch_folder`)
keeps it for the process's life, as the command's own. The umask is read, never changed
(Linux's ``/proc/self/status``; elsewhere set and put back under a lock), so a file another
thread makes meanwhile gets the process's umask.

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

import atexit
import errno
import fcntl
import json
import os
import random
import re
import shutil
import signal
import stat
import tempfile
import threading
from typing import Callable, Dict, Optional, Set

from hltmt_plugin import records
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


def _through_proc(path: str) -> bool:
    """Whether ``path`` reaches its file through ``/proc`` (a process's open file, as
    ``/dev/stdout`` -> ``/proc/self/fd/1`` or ``/dev/fd/3`` do): its links followed one by one,
    judged by where each step lies, not by the name typed."""
    proc = os.path.realpath("/proc")
    path = os.path.abspath(path)
    for _ in range(40):
        folder = os.path.realpath(os.path.dirname(path))
        if _within(folder, proc):
            return True
        step = os.path.join(folder, os.path.basename(path))
        if not os.path.islink(step):
            return _within(step, proc)
        path = os.path.join(folder, os.readlink(step))
    return False


def check_destination(path: str) -> None:
    """Raise :class:`UnsafeDestination` unless ``path`` is a regular file (or a link to one) or a
    new name in an existing place: a device, FIFO or socket would be replaced by a regular file,
    and a path through ``/proc`` (``/dev/stdout``, ``/dev/fd/1``, ``/proc/self/fd/1``) names a
    stream whose file (opened by the shell, perhaps for appending) the rename would replace.
    Judged by what the path is (``lstat``/``stat``, never opened), not by its name: a regular
    file on a memory file system (``/dev/shm/x.txt``) is a file."""
    if _through_proc(path):
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


# temporary files and folders being written, removed by the SIGTERM handler before the process ends;
# changed under _LIVE_LOCK (by _hold and _drop), read without it by the handler (a copy, made at once)
_LIVE: Set[str] = set()
_LIVE_FOLDERS: Set[str] = set()
_LIVE_LOCK = threading.Lock()
_handler_installed = False


def _on_sigterm(signum, frame):
    for tmp in list(_LIVE):
        _remove_quietly(tmp)
    for folder in list(_LIVE_FOLDERS):
        shutil.rmtree(folder, ignore_errors=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)  # end as SIGTERM ends a process (status 143 in a shell)


def _hold(path: str, folder: bool = False) -> None:
    """``path`` (a temporary file or lock file, or with ``folder`` a temporary folder) removed by
    SIGTERM until :func:`_drop`: while anything is held, SIGTERM removes it first, then ends the
    process as it would have (the handler is installed by the first hold, in the main thread, where
    SIGTERM has its default action, and taken away by the last drop)."""
    with _LIVE_LOCK:
        (_LIVE_FOLDERS if folder else _LIVE).add(path)
        _set_sigterm(True)


def _drop(path: str) -> None:
    """``path`` no longer removed by SIGTERM (written, renamed or removed)."""
    with _LIVE_LOCK:
        _LIVE.discard(path)
        _LIVE_FOLDERS.discard(path)
        if not _LIVE and not _LIVE_FOLDERS:
            _set_sigterm(False)


def _set_sigterm(watch: bool) -> None:
    """Under ``_LIVE_LOCK``: the handler installed (``watch``: when SIGTERM has its default action)
    or the default action put back (when the handler is still this module's). Python sets signal
    handlers in the main thread only: elsewhere nothing changes (a write in another thread is
    not cleaned on SIGTERM; a handler that the main thread installed and another thread's last
    drop could not take away stays until the main thread's next last drop, and with nothing held
    it ends the process as the default action does)."""
    global _handler_installed
    if watch == _handler_installed or threading.current_thread() is not threading.main_thread():
        return
    try:
        if watch and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
            _handler_installed = True
        elif not watch:
            if signal.getsignal(signal.SIGTERM) is _on_sigterm:  # (a handler set since is left alone)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            _handler_installed = False
    except (ValueError, OSError):
        return


def _final_owner(target: str):
    """The (uid, gid) of an existing ``target`` (kept by the new file), or None."""
    try:
        st = os.stat(target)
    except OSError:
        return None
    return st.st_uid, st.st_gid


_UMASK_LOCK = threading.Lock()


def _umask() -> int:
    """The process's umask, read without changing it where the system shows it (Linux:
    ``/proc/self/status``). Elsewhere it is set and put back under a lock, to ``0o777`` meanwhile:
    a file another thread makes in that instant gets too few permission bits, never too many."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        umask = os.umask(0o777)
        os.umask(umask)
    return umask


def _final_mode(target: str) -> int:
    """The mode ``open`` would leave ``target`` with: its own, or a new file's."""
    try:
        return os.stat(target).st_mode & 0o7777
    except OSError:
        pass
    return 0o666 & ~_umask()


def _temporary_of(target: str, suffix: str):
    """A new temporary file beside ``target`` (``.NAME.XXXXXXXX`` + ``suffix``), open and locked
    (``flock``, released by the system when the process ends, also by SIGKILL): (fd, path). The
    temporaries of ``target`` with that suffix that no live writer holds (a writer killed by
    SIGKILL, a power cut) are removed first."""
    folder, name = os.path.dirname(target), os.path.basename(target)
    _clear_stale_files(folder, name, suffix)
    while True:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=suffix, dir=folder)
        fcntl.flock(fd, fcntl.LOCK_EX)  # waits only while a sweeper looks at it
        try:
            if os.path.samestat(os.fstat(fd), os.lstat(tmp)):  # not removed as stale before it was locked
                return fd, tmp
        except FileNotFoundError:
            pass
        os.close(fd)


def _clear_stale_files(folder: str, name: str, suffix: str) -> None:
    """Remove the temporary files of the destination ``name`` in ``folder`` (with ``suffix``) whose
    lock is free: their writer ended without removing them. A file this process cannot open
    (another user's), a link or anything but a regular file is left alone."""
    pattern = re.compile(re.escape(f".{name}.") + r"[a-z0-9_]{8}" + re.escape(suffix))
    try:
        entries = [entry for entry in os.listdir(folder) if pattern.fullmatch(entry)]
    except OSError:
        return
    for entry in entries:
        path = os.path.join(folder, entry)
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        except OSError:
            continue
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: a live writer's
                if os.path.samestat(os.fstat(fd), os.lstat(path)):
                    os.remove(path)
        except OSError:
            pass
        finally:
            os.close(fd)


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
        self._fd, self.tmp = _temporary_of(self.target, suffix)
        self._hold = os.dup(self._fd)  # keeps the lock until the rename, after the file is closed
        _hold(self.tmp)
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
        _drop(self.tmp)
        self._release()

    def _release(self) -> None:
        hold, self._hold = self._hold, None
        if hold is not None:
            os.close(hold)

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
        _drop(self.tmp)
        self._release()

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


def copy_file(source: str, path: str, what: Optional[str] = None) -> None:
    """The bytes of the file ``source`` as the file ``path``, as :func:`write_bytes` (the new file
    gets ``path``'s mode, not ``source``'s)."""

    def write(tmp):
        shutil.copyfile(source, tmp)

    _write_whole(path, write, PARTIAL, what)


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


def inside(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies under it (both resolved)."""
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


# ---- folders written whole -----------------------------------------------------------------------------
MARKER = ".hltmt-output.json"  # in every folder write_folder writes: which command wrote it, and its files
_MARKER_FORMAT = "hltmt-output"
_MARKER_MAX = 1 << 20  # bytes; a marker lists file names only
# the marker as it is read back (records.py): the fields write_folder writes, no other
MARKER_RECORD = records.Record(
    {
        "format": records.Text(choices=[_MARKER_FORMAT]),
        "written_by": records.Text(min_len=1),
        "files": records.ListOf(str),
    }
)
_TEMP_RE = r"\.hltmt-(\d+)-[a-z0-9_]+\.(partial|old)"


class FolderRefused(HltmtConfigError):
    """A folder output that must not be written, or cannot be: one line naming the option."""


def _resolved(path: str) -> str:
    return os.path.realpath(os.path.abspath(path))


def special_kind(mode: int) -> Optional[str]:
    """What a file of ``mode`` is when it is a FIFO, a socket or a device (opening it could hang
    or reach something that is not a file), else None."""
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return None


def _kind_of(mode: int) -> Optional[str]:
    return special_kind(mode) or (None if stat.S_ISDIR(mode) else "a file")


def _files_under(folder: str) -> Set[str]:
    """Every name under ``folder`` that is not a folder (links not followed), relative, ``/``-joined."""
    found = set()
    for root, dirs, names in os.walk(folder):
        names += [d for d in dirs if os.path.islink(os.path.join(root, d))]
        for name in names:
            found.add(os.path.relpath(os.path.join(root, name), folder).replace(os.sep, "/"))
    return found


def read_marker(folder: str) -> Optional[dict]:
    """The marker of ``folder`` (``{"written_by": KIND, "files": [...]}``, read through
    :data:`MARKER_RECORD`), None when it has none or an unreadable one. Never follows a link and
    never opens a FIFO or a device (lstat first)."""
    path = os.path.join(folder, MARKER)
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MARKER_MAX:
            return None
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            text = f.read(_MARKER_MAX).decode("utf-8")
        return records.check(records.parse_json(text, path), MARKER_RECORD, path)
    except (OSError, ValueError, HltmtInputError):
        return None


def _check_replaceable(target: str, shown: str, kind: str, force: bool) -> None:
    """Refuse an existing ``target`` unless it is an empty folder, or a folder ``kind`` wrote
    (holding nothing it did not write) and ``force`` is given."""
    try:
        mode = os.lstat(target).st_mode
        names = os.listdir(target) if stat.S_ISDIR(mode) else None
    except FileNotFoundError:
        return
    except OSError as error:
        raise FolderRefused(f"cannot write {shown}: {error.strerror or error}") from None
    what = _kind_of(mode)
    if what is not None:
        raise FolderRefused(f"{shown} is {what}, not a folder: name a new folder")
    if not names:
        return
    marker = read_marker(target)
    if marker is None or marker["written_by"] != kind:
        by = f"{marker['written_by']} wrote it, not {kind}" if marker else f"{kind} did not write it (no {MARKER})"
        raise FolderRefused(
            f"{shown} exists and {by}: it is never replaced; name a new folder (or empty or remove it yourself)"
        )
    extra = sorted(_files_under(target) - set(marker["files"]) - {MARKER})
    if extra:
        raise FolderRefused(f"{shown} holds {extra[0]}, which {kind} did not write: move it out, or name a new folder")
    if not force:
        raise FolderRefused(f"{shown} exists (written by {kind}): name a new folder, or add --force to replace it")


def _check_inputs(target: str, shown: str, inputs: Optional[Dict[str, Optional[str]]]) -> None:
    """Refuse an output that is, holds or lies inside an input of the run."""
    for what, path in (inputs or {}).items():
        if not path:
            continue
        source = _resolved(path)
        how = "is" if source == target else "holds" if _within(source, target) else None
        if how is None and _within(target, source):
            how = "lies inside"
        if how:
            raise FolderRefused(f"{shown} {how} {what} {path}: name another folder")
    here = _resolved(os.getcwd())
    if _within(here, target):
        raise FolderRefused(f"{shown} {'is' if here == target else 'holds'} the current folder: name another folder")


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def check_folder_output(out: str, *, kind: str, force: bool = False, option: str = "--out", inputs=None) -> None:
    """What :func:`write_folder` refuses before any work, checked now (one :class:`FolderRefused`):
    lets a command refuse before it loads a model; nothing is written."""
    shown = f"{option} {out}"
    target = _resolved(out)
    _check_inputs(target, shown, inputs)
    _check_replaceable(target, shown, kind, force)


class _FolderLock:
    """An exclusive lock on writing ``target``: the file ``.NAME.hltmt-lock`` beside it, locked
    with ``flock`` (the system releases it when the process ends, also by SIGKILL), removed by
    its holder when done (and by the SIGTERM handler)."""

    def __init__(self, target: str, shown: str):
        self.path = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.hltmt-lock")
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise FolderRefused(
                    f"{shown} is being written by another process (it holds {self.path}): "
                    "wait for it to end, or name another folder"
                ) from None
            try:
                same = os.path.samestat(os.fstat(fd), os.lstat(self.path))
            except FileNotFoundError:
                same = False
            if same:  # not a lock file its previous holder removed meanwhile
                break
            os.close(fd)
        self.fd = fd
        _hold(self.path)

    def release(self) -> None:
        _remove_quietly(self.path)  # while still locked: a waiting writer then makes a new one
        os.close(self.fd)
        _drop(self.path)


def _clear_stale(target: str) -> None:
    """Under the lock: the temporary folders of writers of ``target`` that ended without removing
    them (SIGKILL, a power cut): a ``.old`` folder is the previous output put back when ``target``
    is missing (the writer was stopped between its two renames), otherwise removed."""
    parent, name = os.path.dirname(target), os.path.basename(target)
    pattern = re.compile(re.escape(f".{name}") + _TEMP_RE + "$")
    for entry in sorted(os.listdir(parent)):
        match = pattern.match(entry)
        path = os.path.join(parent, entry)
        if not match or not os.path.isdir(path) or os.path.islink(path):
            continue
        if match.group(2) == "old" and not os.path.lexists(target):
            os.replace(path, target)
        else:
            shutil.rmtree(path, ignore_errors=True)


def _temp_name(target: str, role: str) -> str:
    tag = "".join(random.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(8))
    return os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.hltmt-{os.getpid()}-{tag}.{role}")


def _write_marker(work: str, kind: str, files) -> None:
    record = {"format": _MARKER_FORMAT, "written_by": kind, "files": sorted(files)}
    with open(os.path.join(work, MARKER), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
        f.write("\n")


def _umask_modes(work: str) -> None:
    """Every file and folder under ``work`` given the mode the umask gives a new one (``0o666`` /
    ``0o777`` less the umask), whoever wrote it: a library that writes its files ``0o600`` (or a
    copy that kept its source's mode) does not decide the output's. Links are left as they are."""
    umask = _umask()
    for root, dirs, names in os.walk(work):
        for name, mode in [(d, 0o777) for d in dirs] + [(n, 0o666) for n in names]:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, mode & ~umask)


def replace_folder(work: str, target: str) -> None:
    """The complete folder ``work`` renamed to ``target``; an existing ``target`` is moved aside
    first (put back should the rename fail) and removed after."""
    old = None
    if os.path.lexists(target):
        old = _temp_name(target, "old")
        os.replace(target, old)
        _hold(old, folder=True)
    try:
        os.replace(work, target)
    except OSError:
        if old is not None:
            os.replace(old, target)
            _drop(old)
        raise
    _drop(work)
    _sync_folder(os.path.dirname(target))
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
        _drop(old)


def _fill_failed(shown: str, target: str, work: str, error: OSError) -> FolderRefused:
    """The one line of an OSError met while filling ``work``: it names the output (a file of an
    input the writer could not read is named as the system named it)."""
    where = error.filename if error.filename and not _within(_resolved(str(error.filename)), work) else None
    reason = f"{error.strerror or error}" + (f": {where}" if where else "")
    kept = "it is unchanged" if os.path.lexists(target) else "nothing was written"
    return FolderRefused(f"could not write {shown} ({reason}): {kept}")


def write_folder(
    out: str,
    fill: Callable[[str], object],
    *,
    kind: str,
    force: bool = False,
    option: str = "--out",
    inputs: Optional[Dict[str, Optional[str]]] = None,
):
    """The folder ``out`` written whole: ``fill(work)`` writes its content into a new temporary
    folder beside it, which then replaces ``out``; returns what ``fill`` returned.

    ``kind`` names the writer (``hltmt-export``); the folder gets a marker (:data:`MARKER`: the
    writer and the files ``fill`` wrote) so that a later run of the same kind recognizes it. Refused in one :class:`FolderRefused` line, before ``fill``
    runs: ``out`` is, holds or lies inside one of ``inputs`` ({what: path}) or the current folder;
    ``out`` is not a folder (a file, FIFO, device, socket: never opened); ``out`` is a folder
    with files that ``kind`` did not write there (never replaced, not even with ``force``); ``out``
    is an earlier output of ``kind`` and ``force`` is not given; another process is writing
    ``out`` (a lock); the place cannot be written. An empty folder is replaced. A failure or
    an interrupt of ``fill`` (exception, Ctrl-C, SIGTERM) removes the temporary folder and leaves
    ``out`` as it was; what a SIGKILL leaves is removed by the next writer of ``out``. Every
    file and folder of the output gets the mode the umask gives (not ``0o700`` or ``0o600``,
    whatever wrote it)."""
    shown = f"{option} {out}"
    target = _resolved(out)
    _check_inputs(target, shown, inputs)
    try:
        _make_parent(os.path.dirname(target))
        lock = _FolderLock(target, shown)
    except OSError as error:
        raise FolderRefused(f"cannot write {shown}: {error.strerror or error}") from None
    try:
        return _write_locked(target, shown, fill, kind, force)
    finally:
        lock.release()


def _make_parent(parent: str) -> None:
    """``parent`` made if missing; an ancestor that is a file is named (ENOTDIR)."""
    above = parent
    while not os.path.lexists(above):
        above = os.path.dirname(above)
    if not os.path.isdir(above):
        raise NotADirectoryError(errno.ENOTDIR, f"{above} is a file, not a folder")
    os.makedirs(parent, exist_ok=True)


def _write_locked(target: str, shown: str, fill, kind: str, force: bool):
    try:
        _clear_stale(target)  # first: an earlier output a killed writer moved aside is put back
    except OSError as error:
        raise FolderRefused(f"cannot write {shown}: {error.strerror or error}") from None
    _check_replaceable(target, shown, kind, force)
    try:
        work = _temp_name(target, "partial")
        os.mkdir(work)  # mode 0o777 less the umask
    except OSError as error:
        raise FolderRefused(f"cannot write {shown}: {error.strerror or error}") from None
    _hold(work, folder=True)
    try:
        result = fill(work)
        _umask_modes(work)
        _write_marker(work, kind, _files_under(work) - {MARKER})
        replace_folder(work, target)
    except OSError as error:
        raise _fill_failed(shown, target, work, error) from None
    finally:
        if work in _LIVE_FOLDERS:
            shutil.rmtree(work, ignore_errors=True)
            _drop(work)
    return result


def fresh_folder(path: str, kind: str) -> str:
    """``path`` made anew as an empty folder with a marker of ``kind`` (a folder that a run fills
    file by file as it goes: a training run's checkpoints, decoded outputs): an existing ``path``
    is removed first only when it is an empty folder or one that ``kind`` made (its marker says
    so); anything else is one :class:`FolderRefused` line, and nothing is removed."""
    target = _resolved(path)
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as error:
        raise FolderRefused(f"cannot write {path}: {error.strerror or error}") from None
    if mode is not None:
        what = _kind_of(mode)
        if what is not None:
            raise FolderRefused(f"{path} is {what}, not a folder: remove it or name another folder")
        marker = read_marker(target)
        if os.listdir(target) and (marker is None or marker["written_by"] != kind):
            raise FolderRefused(f"{path} exists and {kind} did not make it: it is never removed; name another folder")
    try:
        if mode is not None:
            shutil.rmtree(target)
        os.makedirs(target)
        _write_marker(target, kind, [])
    except OSError as error:
        raise FolderRefused(f"cannot write {path}: {error.strerror or error}") from None
    return path


def scratch_folder(prefix: str) -> str:
    """A private temporary folder (``TMPDIR/PREFIX<pid>.XXXX``) removed at exit and on SIGTERM;
    what a SIGKILL left of an earlier one (its lock free) is removed first. The process holds a
    lock on its ``.lock`` file, and SIGTERM's handler stays installed, for as long as it lives:
    a command's own change to its process, made by the commands that call this (hltmt-export)."""
    base = tempfile.gettempdir()
    for entry in os.listdir(base):
        path = os.path.join(base, entry)
        if entry.startswith(prefix) and os.path.isdir(path) and not os.path.islink(path):
            pid = entry[len(prefix) :].split(".")[0]
            if not pid.isdigit() or _alive(int(pid)):
                continue  # a live process's (or one starting: its lock may not be taken yet)
            try:
                fd = os.open(os.path.join(path, ".lock"), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                shutil.rmtree(path, ignore_errors=True)
            except OSError:
                pass  # a live process's
            finally:
                os.close(fd)
    folder = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}.", dir=base)
    _hold(folder, folder=True)  # for the process's life: SIGTERM's handler stays (the command's own)
    fd = os.open(os.path.join(folder, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    _SCRATCH_LOCKS.append(fd)
    atexit.register(shutil.rmtree, folder, True)
    return folder


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's
    return True


_SCRATCH_LOCKS = []  # the open, locked .lock files of this process's scratch folders
