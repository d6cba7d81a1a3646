"""hltmt_plugin/atomic_files.py: a file is its old self or the whole new one, never part of one, and no
temporary file is left behind. (Reading is compat/safe_loading's: tests/compat/test_safe_loading.py;
fairseq's checkpoint writes through this module: tests/compat/test_atomic_copy.py.)"""

import os

import pytest
import torch

from conftest import full_disk_open
from hltmt_plugin import atomic_files as files
from hltmt_plugin.errors import HltmtInputError

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


def new_file_mode():
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


# ---- whole files in one call --------------------------------------------------------------------------
def test_text_bytes_and_torch_objects_round_trip(tmp_path):
    files.write_text(str(tmp_path / "a.txt"), "één\nzwei\r\n")
    assert (tmp_path / "a.txt").read_bytes() == "één\nzwei\r\n".encode("utf-8")  # UTF-8, line ends as given
    files.write_bytes(str(tmp_path / "b.bin"), b"\x00\xffdata")
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\xffdata"
    state = {"model": {"w": torch.arange(6.0).view(2, 3)}, "cfg": {"lr": [0.1]}, "n": 3}
    files.save_torch(state, str(tmp_path / "sub" / "c.pt"))  # the folder is made
    loaded = torch.load(tmp_path / "sub" / "c.pt", weights_only=True)
    assert torch.equal(loaded["model"]["w"], state["model"]["w"]) and loaded["cfg"] == {"lr": [0.1]}
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "b.bin", "sub"] and os.listdir(tmp_path / "sub") == ["c.pt"]
    assert all(os.stat(p).st_mode & 0o777 == new_file_mode() for p in (tmp_path / "a.txt", tmp_path / "sub" / "c.pt"))


def test_a_failed_write_leaves_the_earlier_file_and_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "notes.txt"
    path.write_text("the earlier file\n")
    monkeypatch.setattr(files, "open", full_disk_open(10), raising=False)
    with pytest.raises(HltmtInputError) as raised:
        files.write_text(str(path), "x" * 100, what="--out")
    assert str(raised.value) == f"could not write --out {path} (No space left on device): it is unchanged"
    with pytest.raises(
        HltmtInputError,
        match=r"could not write .*new.pt \(No space left on device\): nothing was "
        r"written$",
    ):
        files.save_torch({"w": torch.zeros(1000)}, str(tmp_path / "new.pt"))  # torch's RuntimeError, its OSError named
    monkeypatch.undo()
    assert path.read_text() == "the earlier file\n" and os.listdir(tmp_path) == ["notes.txt"]


def test_a_place_that_cannot_be_written_is_one_line_before_any_work(tmp_path):
    (tmp_path / "a_file").write_text("kept\n")
    with pytest.raises(HltmtInputError, match=r"^cannot write .*a_file/out.txt: "):
        files.write_text(str(tmp_path / "a_file" / "out.txt"), "x")
    assert os.listdir(tmp_path) == ["a_file"] and (tmp_path / "a_file").read_text() == "kept\n"


# ---- a writer that streams, or writes a path ----------------------------------------------------------
@pytest.mark.parametrize("crash", [ValueError("the writer's own bug"), KeyboardInterrupt()])
def test_a_crash_mid_write_leaves_no_half_file(tmp_path, crash):
    old, new = tmp_path / "old.txt", tmp_path / "new.txt"
    old.write_text("whole\n")

    def half_then_crash(tmp):
        with open(tmp, "w") as f:
            f.write("half of it")
        raise crash

    for path in (old, new):
        with pytest.raises(type(crash)):
            files.write_atomically(str(path), half_then_crash)
        with pytest.raises(type(crash)):
            with files.AtomicFile(str(path)) as out:
                out.open().write("half of it")
                raise crash
    assert os.listdir(tmp_path) == ["old.txt"] and old.read_text() == "whole\n"


def test_a_streamed_file_replaces_the_output_only_when_committed(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("earlier\n")
    os.chmod(path, 0o640)
    out = files.AtomicFile(str(path))
    out.open().write("new\n")
    out.file.flush()
    assert path.read_text() == "earlier\n"
    assert [n for n in os.listdir(tmp_path) if n.startswith(".out.txt.") and n.endswith(files.PARTIAL)]
    out.commit()
    out.discard()  # after the commit: nothing to do
    assert path.read_text() == "new\n" and os.listdir(tmp_path) == ["out.txt"]
    assert os.stat(path).st_mode & 0o777 == 0o640  # the replaced file's mode, as open() would keep it


def test_a_symbolic_link_keeps_pointing_at_the_new_file(tmp_path):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "model.pt"
    target.write_bytes(b"old")
    link = tmp_path / "model.pt"
    link.symlink_to(target)
    files.save_torch({"w": torch.ones(2)}, str(link))
    assert link.is_symlink() and torch.equal(torch.load(link, weights_only=True)["w"], torch.ones(2))
    assert os.listdir(tmp_path / "real") == ["model.pt"]


# ---- complete files and folders put in place ----------------------------------------------------------
def test_a_complete_file_and_folder_are_put_in_place(tmp_path):
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "made.gen").write_text("H-0\tx\n")
    (tmp_path / "out.gen").write_text("old\n")
    files.replace_file(str(tmp_path / "work" / "made.gen"), str(tmp_path / "out.gen"))
    assert (tmp_path / "out.gen").read_text() == "H-0\tx\n" and os.listdir(tmp_path / "work") == []

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "old.idx").write_text("old")
    (tmp_path / "bin.partial").mkdir()
    (tmp_path / "bin.partial" / "new.idx").write_text("new")
    files.replace_folder(str(tmp_path / "bin.partial"), str(tmp_path / "bin"))
    assert os.listdir(tmp_path / "bin") == ["new.idx"]
    assert sorted(os.listdir(tmp_path)) == ["bin", "out.gen", "work"]
    assert files.inside(str(tmp_path / "bin" / "new.idx"), str(tmp_path / "bin"))
    assert not files.inside(str(tmp_path / "bin.partial"), str(tmp_path / "bin"))


def test_sigterm_during_a_write_leaves_no_temporary_file(tmp_path):
    """SIGTERM, like an exception or Ctrl-C, removes the temporary file before the process ends."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out.txt"
    out.write_text("old\n")
    code = (
        "import sys, time; from hltmt_plugin.atomic_files import AtomicFile\n"
        "f = AtomicFile(sys.argv[1]); f.open().write('new'); print('ready', flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    assert len(list(tmp_path.iterdir())) == 2  # the output and its temporary file
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=30) == -signal.SIGTERM
    time.sleep(0.1)
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"] and out.read_text() == "old\n"


HOLDER = (
    "import sys, time; from hltmt_plugin.atomic_files import AtomicFile\n"
    "f = AtomicFile(sys.argv[1]); f.open().write('new'); print('ready', flush=True); time.sleep(60)"
)


def test_a_killed_writers_temporary_file_is_removed_by_the_next_write_of_that_file_only(tmp_path):
    """SIGKILL leaves the temporary file; the next write of the same file removes it, and only it:
    a live writer's (it holds its lock), another file's and another suffix's stay."""
    import signal
    import subprocess
    import sys

    out = tmp_path / "out.txt"
    out.write_text("old\n")
    killed = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True)
    assert killed.stdout.readline().strip() == "ready"
    killed.send_signal(signal.SIGKILL)
    assert killed.wait(timeout=30) == -signal.SIGKILL
    (left,) = [p.name for p in tmp_path.iterdir() if p.name != "out.txt"]
    assert left.startswith(".out.txt.") and left.endswith(".partial")
    live = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert live.stdout.readline().strip() == "ready"
        (held,) = [p.name for p in tmp_path.iterdir() if p.name not in ("out.txt", left)]
        others = [".out.txt.x.abcdefgh.partial", ".other.txt.abcdefgh.partial", ".out.txt.abcdefgh.tmp"]
        for name in others:
            (tmp_path / name).write_text("not this write's")
        files.write_text(str(out), "new\n")
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out.txt", held, *others])
        assert out.read_text() == "new\n"
    finally:
        live.kill()
        live.wait(timeout=30)
    files.write_text(str(out), "newer\n")  # its writer gone, the other writer's temporary file is stale too
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out.txt", *others])


@pytest.mark.parametrize(
    "make, said",
    [
        (lambda p: os.mkfifo(p), "it is a FIFO"),
        (lambda p: os.mkdir(p), "it is a folder"),
    ],
)
def test_a_destination_that_is_not_a_regular_file_is_refused_untouched(tmp_path, make, said):
    from hltmt_plugin.atomic_files import check_output
    from hltmt_plugin.errors import HltmtInputError

    path = tmp_path / "dest"
    make(path)
    with pytest.raises(HltmtInputError, match=said):
        check_output(str(path), "--output")
    with pytest.raises(HltmtInputError, match="it names a device or a stream"):
        check_output("/dev/stdout", "--output")
    assert [p.name for p in tmp_path.iterdir()] == ["dest"]


def test_a_full_standard_output_is_one_line():
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "import hltmt_plugin.errors as e; e.install_excepthook(); "
                "import sys; print('x' * 100000); sys.stdout.flush()",
            ],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
        )
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    said = [line for line in done.stderr.strip().splitlines() if not line.startswith("INFO:fairseq")]
    assert said == [  # (importing fairseq prints its own notice in a program: the plugin leaves it)
        "hltmt_plugin: error: cannot write standard output (No space left on device): the output is incomplete"
    ]


# ---- folders written whole (write_folder) --------------------------------------------------------------
def fill_two(work):
    (open(os.path.join(work, "a.txt"), "w")).write("a")
    os.mkdir(os.path.join(work, "sub"))
    (open(os.path.join(work, "sub", "b.txt"), "w")).write("b")
    return "filled"


def test_a_folder_replaces_only_an_earlier_output_of_its_writer_or_an_empty_folder(tmp_path):
    out = str(tmp_path / "out")
    assert files.write_folder(out, fill_two, kind="writer-a") == "filled"
    assert files.read_marker(out) == {
        "format": "hltmt-output",
        "written_by": "writer-a",
        "files": ["a.txt", "sub/b.txt"],
    }
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(out).st_mode & 0o777 == 0o777 & ~umask  # not mkdtemp's 0o700
    with pytest.raises(files.FolderRefused, match=r"exists \(written by writer-a\).*add --force"):
        files.write_folder(out, fill_two, kind="writer-a")
    with pytest.raises(files.FolderRefused, match="writer-a wrote it, not writer-b: it is never replaced"):
        files.write_folder(out, fill_two, kind="writer-b", force=True)
    (tmp_path / "out" / "sub" / "mine.txt").write_text("the user's")
    with pytest.raises(files.FolderRefused, match=r"holds sub/mine.txt, which writer-a did not write"):
        files.write_folder(out, fill_two, kind="writer-a", force=True)
    os.remove(tmp_path / "out" / "sub" / "mine.txt")
    files.write_folder(out, fill_two, kind="writer-a", force=True)
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "x").write_text("x")
    with pytest.raises(files.FolderRefused, match=r"writer-a did not write it \(no .hltmt-output.json\)"):
        files.write_folder(str(tmp_path / "user"), fill_two, kind="writer-a", force=True)
    (tmp_path / "empty").mkdir()
    files.write_folder(str(tmp_path / "empty"), fill_two, kind="writer-a")
    assert sorted(os.listdir(tmp_path)) == ["empty", "out", "user"] and (tmp_path / "user" / "x").read_text() == "x"


def test_a_folder_output_that_is_holds_or_lies_inside_an_input_is_refused(tmp_path):
    data = tmp_path / "data"
    (data / "bin").mkdir(parents=True)
    model = data / "model.pt"
    model.write_text("w")
    link = tmp_path / "link"
    link.symlink_to(data)
    for out, how in ((data, "is"), (tmp_path, "holds"), (data / "bin" / "new", "lies inside"), (link, "is")):
        with pytest.raises(files.FolderRefused, match=f"--out {out} {how} the data folder {data}: name another"):
            files.write_folder(str(out), fill_two, kind="w", force=True, inputs={"the data folder": str(data)})
    with pytest.raises(files.FolderRefused, match="holds --checkpoint"):
        files.write_folder(str(data), fill_two, kind="w", force=True, inputs={"--checkpoint": str(model)})
    assert sorted(os.listdir(data)) == ["bin", "model.pt"] and os.listdir(data / "bin") == []


def test_a_folder_output_that_is_not_a_folder_or_a_place_is_one_line_unopened(tmp_path):
    os.mkfifo(tmp_path / "fifo")  # opening it would wait for a writer forever
    (tmp_path / "file").write_text("kept")
    for out, said in (
        (tmp_path / "fifo", "is a FIFO, not a folder"),
        ("/dev/null", "is a device, not a folder"),
        (tmp_path / "file", "is a file, not a folder"),
        (tmp_path / "file" / "sub" / "out", "file is a file, not a folder"),
    ):
        with pytest.raises(files.FolderRefused, match=said):
            files.write_folder(str(out), fill_two, kind="w", force=True)
    assert sorted(os.listdir(tmp_path)) == ["fifo", "file"] and (tmp_path / "file").read_text() == "kept"


def test_a_failed_fill_leaves_the_earlier_folder_and_no_temporary_folder(tmp_path):
    out = str(tmp_path / "out")
    files.write_folder(out, fill_two, kind="w")
    before = sorted(os.listdir(out))

    def half(work):
        fill_two(work)
        raise OSError(27, "File too large")

    with pytest.raises(
        files.FolderRefused, match=rf"^could not write --out {out} \(File too large\): it is unchanged$"
    ):
        files.write_folder(out, half, kind="w", force=True)
    for crash in (ValueError("a bug"), KeyboardInterrupt()):
        with pytest.raises(type(crash)):
            files.write_folder(out, lambda work: (fill_two(work), (_ for _ in ()).throw(crash)), kind="w", force=True)
    assert sorted(os.listdir(out)) == before and os.listdir(tmp_path) == ["out"]


WRITER = (
    "import os, sys, time; from hltmt_plugin.atomic_files import write_folder\n"
    "def fill(work):\n"
    "    open(os.path.join(work, 'x'), 'w').write('x'); print('ready', flush=True); time.sleep(60)\n"
    "write_folder(sys.argv[1], fill, kind='w', force=True)\n"
)


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_a_stopped_writer_leaves_nothing_or_what_the_next_writer_removes(tmp_path, sig):
    import signal
    import subprocess
    import sys

    out = str(tmp_path / "out")
    child = subprocess.Popen([sys.executable, "-c", WRITER, out], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    second = subprocess.run([sys.executable, "-c", WRITER, out], capture_output=True, text=True, timeout=60)
    assert second.returncode != 0 and "is being written by another process" in second.stderr
    child.send_signal(getattr(signal, sig))
    assert child.wait(timeout=30) == -getattr(signal, sig)
    left = sorted(os.listdir(tmp_path))
    if sig == "SIGTERM":
        assert left == []
        return
    assert len(left) == 2 and ".out.hltmt-lock" in left  # the lock file and the temporary folder
    assert any(name.startswith(".out.hltmt-") and name.endswith(".partial") for name in left)
    files.write_folder(out, fill_two, kind="w")
    assert os.listdir(tmp_path) == ["out"]


def test_a_regular_file_on_a_memory_file_system_is_a_file_and_dev_stdout_a_stream(tmp_path):
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        path = f"/dev/shm/hltmt-atomic-{os.getpid()}.txt"
        try:
            files.write_text(path, "x\n", what="-o")
            assert open(path).read() == "x\n"
        finally:
            os.remove(path)
    for stream in ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"):
        with pytest.raises(files.UnsafeDestination, match="names a device or a stream"):
            files.check_destination(stream)


def test_an_earlier_output_moved_aside_by_a_killed_writer_is_put_back(tmp_path):
    out = str(tmp_path / "out")
    files.write_folder(out, fill_two, kind="w")
    aside = tmp_path / ".out.hltmt-999999-killed00.old"  # stopped between its two renames
    os.replace(out, aside)
    with pytest.raises(files.FolderRefused, match=r"exists \(written by w\)"):
        files.write_folder(out, fill_two, kind="w")
    assert sorted(os.listdir(tmp_path)) == ["out"] and files.read_marker(out)["written_by"] == "w"


@pytest.mark.parametrize(
    "marker",
    [
        {"format": "hltmt-output", "written_by": "writer-a"},  # a field missing
        {"format": "hltmt-output", "written_by": "writer-a", "files": ["a.txt", 3]},
        {"format": "hltmt-output", "written_by": "", "files": []},
        {"format": "other", "written_by": "writer-a", "files": []},
        {"format": "hltmt-output", "written_by": "writer-a", "files": [], "more": 1},
        [],
    ],
)
def test_a_folder_marker_is_read_through_its_record_and_a_wrong_one_is_no_marker(tmp_path, marker):
    import json

    out = tmp_path / "out"
    files.write_folder(str(out), fill_two, kind="writer-a")
    (out / files.MARKER).write_text(json.dumps(marker))
    assert files.read_marker(str(out)) is None
    with pytest.raises(files.FolderRefused, match="writer-a did not write it"):
        files.write_folder(str(out), fill_two, kind="writer-a", force=True)


def test_a_copied_file_is_written_whole_and_a_missing_source_is_one_line(tmp_path):
    (tmp_path / "src").write_bytes(b"abc")
    files.copy_file(str(tmp_path / "src"), str(tmp_path / "sub" / "dst"))
    assert (tmp_path / "sub" / "dst").read_bytes() == b"abc"
    with pytest.raises(HltmtInputError, match=r"could not write .*dst \(No such file or directory\): it is unchanged"):
        files.copy_file(str(tmp_path / "missing"), str(tmp_path / "sub" / "dst"))
    assert sorted(os.listdir(tmp_path / "sub")) == ["dst"] and (tmp_path / "sub" / "dst").read_bytes() == b"abc"


def test_a_fresh_folder_removes_only_an_empty_folder_or_one_its_kind_made(tmp_path):
    run = str(tmp_path / "run")
    files.fresh_folder(run, "a run")
    (tmp_path / "run" / "checkpoint.pt").write_bytes(b"x")
    files.fresh_folder(run, "a run")
    assert os.listdir(run) == [files.MARKER]
    with pytest.raises(files.FolderRefused, match="exists and another run did not make it: it is never removed"):
        files.fresh_folder(run, "another run")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("the user's")
    with pytest.raises(files.FolderRefused, match="never removed"):
        files.fresh_folder(str(tmp_path / "mine"), "a run")
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(files.FolderRefused, match="is a file, not a folder"):
        files.fresh_folder(str(tmp_path / "a-file"), "a run")
    (tmp_path / "empty").mkdir()
    files.fresh_folder(str(tmp_path / "empty"), "a run")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "the user's" and (tmp_path / "a-file").read_text() == "x"


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_every_file_and_folder_of_a_folder_output_gets_the_umasks_mode(tmp_path, umask):
    """Whoever wrote them (a library writing 0o600, a private folder), the output's files and
    folders get the mode the umask gives a new one."""

    def fill(work):
        fd = os.open(os.path.join(work, "model.safetensors"), os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
        os.mkdir(os.path.join(work, "models"), 0o700)
        (open(os.path.join(work, "models", "config.json"), "w")).write("{}")
        os.chmod(os.path.join(work, "models", "config.json"), 0o755)

    old = os.umask(umask)
    try:
        files.write_folder(str(tmp_path / "out"), fill, kind="w")
    finally:
        os.umask(old)
    modes = {
        os.path.relpath(os.path.join(root, name), tmp_path): os.stat(os.path.join(root, name)).st_mode & 0o777
        for root, dirs, names in os.walk(tmp_path)
        for name in dirs + names
    }
    folder, file = 0o777 & ~umask, 0o666 & ~umask
    assert modes == {
        "out": folder,
        "out/models": folder,
        "out/model.safetensors": file,
        "out/models/config.json": file,
        f"out/{files.MARKER}": file,
    }


# ---- what a write changes in the process lasts as long as the write
@pytest.fixture
def default_sigterm():
    import signal

    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield signal
    signal.signal(signal.SIGTERM, previous)


def test_sigterm_is_handled_only_while_a_write_is_under_way(tmp_path, default_sigterm):
    signal = default_sigterm
    handler = lambda: signal.getsignal(signal.SIGTERM)  # noqa: E731
    with files.AtomicFile(str(tmp_path / "a.txt")) as first:
        assert handler() is files._on_sigterm
        with files.AtomicFile(str(tmp_path / "b.txt")) as second:
            second.open().write("b")
        assert handler() is files._on_sigterm  # the first write is still under way
        first.open().write("a")
    assert handler() is signal.SIG_DFL and not files._LIVE and not files._LIVE_FOLDERS
    files.write_text(str(tmp_path / "c.txt"), "c")
    assert handler() is signal.SIG_DFL
    seen = []
    files.write_folder(str(tmp_path / "out"), lambda work: seen.append(handler()), kind="w")
    assert seen == [files._on_sigterm] and handler() is signal.SIG_DFL
    with pytest.raises(RuntimeError, match="the writer failed"):
        with files.AtomicFile(str(tmp_path / "d.txt")):
            raise RuntimeError("the writer failed")
    assert handler() is signal.SIG_DFL


def test_a_programs_own_sigterm_handler_is_left_alone(tmp_path, default_sigterm):
    signal = default_sigterm

    def mine(signum, frame):
        pass

    signal.signal(signal.SIGTERM, mine)
    files.write_text(str(tmp_path / "a.txt"), "a")
    assert signal.getsignal(signal.SIGTERM) is mine
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with files.AtomicFile(str(tmp_path / "b.txt")) as out:
        signal.signal(signal.SIGTERM, mine)  # set by the program during the write: kept after it
        out.open().write("b")
    assert signal.getsignal(signal.SIGTERM) is mine


def test_writes_in_threads_leave_the_process_as_they_found_it(tmp_path, default_sigterm):
    import threading

    signal = default_sigterm
    errors = []

    def write_many(k):
        try:
            for i in range(20):
                files.write_text(str(tmp_path / f"t{k}-{i}.txt"), "x")
        except BaseException as error:  # noqa: BLE001 (reported below)
            errors.append(error)

    threads = [threading.Thread(target=write_many, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    write_many("main")
    for thread in threads:
        thread.join()
    files.write_text(str(tmp_path / "last.txt"), "x")  # the main thread's last write ends after them all
    assert errors == [] and not files._LIVE and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert {os.stat(p).st_mode & 0o777 for p in tmp_path.iterdir()} == {new_file_mode()}


def test_the_umask_is_read_without_being_changed(monkeypatch):
    real, calls = os.umask, []
    monkeypatch.setattr(os, "umask", lambda mask: calls.append(mask) or real(mask))
    umask = real(0o022)
    real(umask)
    assert files._umask() == umask
    if os.path.exists("/proc/self/status"):
        assert calls == []  # read from /proc/self/status (Linux)
    calls.clear()

    def no_proc(*args, **kwargs):
        raise OSError("no /proc")

    monkeypatch.setattr(files, "open", no_proc, raising=False)  # a system without /proc
    assert files._umask() == umask and calls == [0o777, umask]  # never 0 meanwhile: too few bits, not too many
