"""Output files of the commands (hltmt_plugin/cli/output.py), through hltmt-translate,
hltmt-prepare-data, hltmt-adapters, hltmt-train-language-adapter and hltmt-report: an output
is never truncated before what replaces it is complete, and no combination of options loses a
file the user already had (an output that is one of the command's inputs is refused; a failed
or interrupted run leaves the old output as it was, and no temporary file); and AtomicOutput
itself: whole or not at all, every problem one line naming the option."""

import errno
import os
import signal
import subprocess
import time

import pytest

from conftest import ROOT, cli, digest, file_size_limit, run, spm_of, translate
from hltmt_plugin.cli.output import AtomicOutput, OutputError
from hub_common import sentences


def assert_refused(done, *parts, status=2):
    assert done.returncode == status, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-2000:]
    for part in parts:
        assert part in lines[0], lines[0]


# ---- hltmt-translate ---------------------------------------------------------------------------------
def test_an_output_that_is_a_file_the_command_reads_is_refused_and_kept(hltmt, data_bin, tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("The file is open.\nGood morning.\n", encoding="utf-8")
    before = {p: digest(p) for p in (str(text), hltmt, spm_of(data_bin), os.path.join(data_bin, "dict.en.txt"))}
    common = ["--checkpoint", hltmt, "--src", "en", "--tgt", "de", "--device", "cpu"]
    assert_refused(
        translate(*common, "--input", str(text), "-o", str(text)),
        f"hltmt-translate: error: --output {text} is --input {text}, an input of this command: writing there would "
        "replace it",
    )
    with open(text, "rb") as stdin:  # hltmt-translate -o F < F
        done = subprocess.run(
            [cli("hltmt-translate"), *common, "-o", str(text)],
            stdin=stdin,
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
    assert_refused(done, f"--output {text} is the file on stdin")
    assert_refused(translate(*common, "--input", str(text), "-o", hltmt), f"--output {hltmt} is --checkpoint")
    assert_refused(
        translate(*common, "--input", str(text), "-o", os.path.join(data_bin, "dict.en.txt")),
        "is a file of the data folder",
    )
    assert_refused(translate(*common, "--input", str(text), "-o", spm_of(data_bin)), "is the sentencepiece model")
    assert_refused(translate(*common, "--input", str(text), "-o", str(tmp_path)), f"{tmp_path}: it is a folder")
    assert_refused(
        translate(*common, "--input", str(text), "-o", str(tmp_path / "no" / "out.txt")),
        "cannot write --output",
        "No such file or directory",
    )
    assert before == {p: digest(p) for p in before}
    assert sorted(os.listdir(tmp_path)) == ["in.txt"]  # no temporary file left


def test_an_existing_output_is_replaced_only_when_complete(hltmt, tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("the user's earlier translations\n", encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen(
        [
            cli("hltmt-translate"),
            "--checkpoint",
            hltmt,
            "--src",
            "en",
            "--tgt",
            "de",
            "--device",
            "cpu",
            "--beam",
            "2",
            "--max-len",
            "10",
            "--buffer-size",
            "1",
            "-o",
            str(out),
        ],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        proc.stdin.write("The file is open.\n")
        proc.stdin.flush()
        deadline = time.time() + 300
        partial = []
        while not partial:  # the first line is written, to the temporary file beside the output
            assert proc.poll() is None and time.time() < deadline, proc.stderr.read()[-3000:]
            partial = [p for p in tmp_path.iterdir() if p.name.endswith(".partial") and p.stat().st_size > 0]
            time.sleep(0.2)
        assert out.read_text(encoding="utf-8") == "the user's earlier translations\n"
        for _ in range(24):  # Ctrl-C, again every 5 s while it has not ended (stdin stays open)
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=5)
                break
            except subprocess.TimeoutExpired:
                continue
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 130, stderr[-3000:]
        assert "interrupted after 1 line(s); --output" in stderr
    finally:
        proc.kill()
    assert out.read_text(encoding="utf-8") == "the user's earlier translations\n"
    assert sorted(os.listdir(tmp_path)) == ["out.txt"]
    done = translate(
        "--checkpoint",
        hltmt,
        "--src",
        "en",
        "--tgt",
        "de",
        "--device",
        "cpu",
        "--beam",
        "2",
        "--max-len",
        "10",
        "-o",
        str(out),
        input="".join(s + "\n" for s in sentences("en", "de", 3)),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(out.read_text(encoding="utf-8").split("\n")) == 4 and sorted(os.listdir(tmp_path)) == ["out.txt"]


def test_what_a_killed_hltmt_translate_leaves_is_removed_by_the_next_run_to_that_output(tmp_path):
    """SIGKILL (no handler runs) leaves the output's temporary file; the next run writing the same
    output removes it (its writer's lock is free) and leaves the output alone."""
    model = os.path.join(ROOT, "docs", "results", "cpu-study", "models", "mnmt.pt")
    out = tmp_path / "out.txt"
    out.write_text("the user's earlier translations\n", encoding="utf-8")
    line = [cli("hltmt-translate"), "--checkpoint", model, "--src", "en", "--tgt", "de", "--beam", "1"]
    line += ["--max-len", "5", "--buffer-size", "1", "--device", "cpu", "-o", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen(line, stdin=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT, env=env)
    try:
        proc.stdin.write("The file is open.\n")
        proc.stdin.flush()
        deadline = time.time() + 300
        partial = []
        while not partial:  # the first line is written, to the temporary file beside the output
            assert proc.poll() is None and time.time() < deadline
            partial = [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial") and p.stat().st_size > 0]
            time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        proc.kill()
    assert sorted(os.listdir(tmp_path)) == sorted(["out.txt", *partial]) and partial[0].startswith(".out.txt.")
    assert out.read_text(encoding="utf-8") == "the user's earlier translations\n"
    done = translate(*line[1:], input="Good morning.\n")
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(os.listdir(tmp_path)) == ["out.txt"] and len(out.read_text(encoding="utf-8").splitlines()) == 1


def test_outputs_and_inputs_are_judged_by_what_they_are_not_by_their_names(hltmt, tmp_path):
    common = [cli("hltmt-translate"), "--checkpoint", hltmt, "--src", "en", "--tgt", "de", "--device", "cpu"]
    common += ["--beam", "2", "--max-len", "10"]
    text = "".join(s + "\n" for s in sentences("en", "de", 3))
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):  # a regular file on a memory file system
        shm = f"/dev/shm/hltmt-output-{os.getpid()}.txt"
        try:
            done = run([*common, "-o", shm], input=text)
            assert done.returncode == 0, done.stderr[-2000:]
            assert len(open(shm, encoding="utf-8").read().splitlines()) == 3
        finally:
            if os.path.exists(shm):
                os.remove(shm)
    (tmp_path / "in.txt").write_text(text, encoding="utf-8")
    piped = run(["bash", "-c", " ".join(f"'{a}'" for a in common) + f" --input <(cat '{tmp_path / 'in.txt'}')"])
    assert piped.returncode == 0, piped.stderr[-2000:]  # --input /dev/fd/N: a pipe, read as a file is
    assert len(piped.stdout.splitlines()) == 3
    out = tmp_path / "out.txt"
    many = "".join(f"the file number {i} is open\n" for i in range(100))  # over 8 KB of --json lines
    limited = run([*common, "--json", "-o", str(out)], input=many, preexec_fn=file_size_limit(8192))
    assert_refused(limited, f"could not write --output {out} (File too large): nothing was written", status=2)
    assert "standard output" not in limited.stderr and sorted(os.listdir(tmp_path)) == ["in.txt"]


# ---- hltmt-prepare-data ------------------------------------------------------------------------------
PREPARE = [
    "--langs",
    "de",
    "--max-train",
    "300",
    "--max-valid",
    "10",
    "--max-test",
    "10",
    "--vocab-size",
    "500",
    "--workers",
    "1",
    "--threads",
    "1",
]


def test_a_failed_rerun_of_prepare_data_keeps_the_earlier_model_and_data(tmp_path):
    """The evaluation check fails after a new sentencepiece model is trained: the earlier
    spm/ (the model bin/ was encoded with) and bin/ stay as they were."""
    out = tmp_path / "out"
    first = run([cli("hltmt-prepare-data"), "--out", str(out), *PREPARE])
    assert first.returncode == 0, first.stderr[-2000:]
    before = digest(str(out))
    again = run(
        [cli("hltmt-prepare-data"), "--out", str(out), *PREPARE, "--vocab-size", "600", "--max-eval-pieces", "3"]
    )
    assert_refused(again, "more than --max-eval-pieces 3")
    assert digest(str(out)) == before and sorted(os.listdir(out)) == ["bin", "spm"]


def test_raw_text_inside_the_folders_prepare_data_replaces_is_refused(tmp_path):
    raw = tmp_path / "out" / "spm"
    raw.mkdir(parents=True)
    for name in os.listdir(os.path.join(ROOT, "data", "debmt10")):
        if ".en-de." in name:
            (raw / name).write_bytes(open(os.path.join(ROOT, "data", "debmt10", name), "rb").read())
    before = digest(str(raw))
    done = run([cli("hltmt-prepare-data"), "--raw", str(raw), "--out", str(tmp_path / "out"), *PREPARE])
    assert_refused(done, f"--raw {raw} lies in {raw}, which this command replaces with its spm output")
    assert digest(str(raw)) == before


# ---- hltmt-adapters, hltmt-train-language-adapter, hltmt-report --------------------------------------------
def test_adapter_commands_refuse_an_output_that_is_one_of_their_inputs(trained, data_bin, tmp_path):
    adapters = tmp_path / "hi.adapters.pt"
    adapters.write_bytes(b"an adapter file of the user")
    text = tmp_path / "mono.hi"
    text.write_text("एक वाक्य\n", encoding="utf-8")
    before = {p: digest(p) for p in (str(adapters), str(text), trained[0], spm_of(data_bin))}
    done = run(
        [cli("hltmt-adapters"), "import", "--path", trained[0], "--adapters", str(adapters), "--out", str(adapters)]
    )
    assert_refused(done, f"--out {adapters} is --adapters {adapters}, an input of this command", status=2)
    language = [
        cli("hltmt-train-language-adapter"),
        "--path",
        trained[0],
        "--lang",
        "hi",
        "--text",
        str(text),
        "--spm",
        spm_of(data_bin),
    ]
    for out, what in ((text, "--text"), (trained[0], "--path"), (spm_of(data_bin), "--spm")):
        assert_refused(run([*language, "--out", str(out)]), f"--out {out} is {what} {out}, an input", status=2)
    assert before == {p: digest(p) for p in before}


@pytest.mark.fast
def test_report_writes_whole_files_and_reads_past_its_own(tmp_path):
    folder = tmp_path / "decode" / "hltmt" / "seed1"
    folder.mkdir(parents=True)
    (folder / "en-de.gen").write_text("T-0\tDas ist gut.\nD-0\t-1.0\tDas ist gut.\n", encoding="utf-8")
    report = [cli("hltmt-report"), "--decode-dir", str(tmp_path / "decode"), "--high", "de", "--machine", "test"]
    for _ in range(2):  # the second run finds the first one's files in --decode-dir
        done = run([*report, "--out", str(tmp_path / "decode")])
        assert done.returncode == 0, done.stderr[-2000:]
    assert {"results.md", "results.csv", "bleu.png"} <= set(os.listdir(tmp_path / "decode"))
    assert not [n for n in os.listdir(tmp_path / "decode") if n.endswith(".partial")]
    (tmp_path / "a_file").write_text("kept\n")
    assert_refused(run([*report, "--out", str(tmp_path / "a_file")]), "a_file: it is a file: name a folder", status=2)
    assert (tmp_path / "a_file").read_text() == "kept\n"


# ---- AtomicOutput ------------------------------------------------------------------------------------
def test_an_output_replaces_the_old_file_only_when_complete(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("the user's file\n")
    with pytest.raises(KeyboardInterrupt):
        with AtomicOutput(str(path), "--output") as f:
            f.write("half")
            raise KeyboardInterrupt
    assert path.read_text() == "the user's file\n" and os.listdir(tmp_path) == ["out.txt"]
    with AtomicOutput(str(path), "--output") as f:
        f.write("één\n")
    with AtomicOutput(str(tmp_path / "fig.png"), "--out", binary=True) as f:
        f.write(b"\x89PNG")
    assert path.read_bytes() == "één\n".encode("utf-8") and (tmp_path / "fig.png").read_bytes() == b"\x89PNG"
    assert sorted(os.listdir(tmp_path)) == ["fig.png", "out.txt"]


def test_an_output_that_cannot_be_written_is_one_line_naming_the_option(tmp_path, monkeypatch):
    with pytest.raises(OutputError, match=rf"^--output {tmp_path} is a folder: name a file$"):
        AtomicOutput(str(tmp_path), "--output")
    missing = tmp_path / "no" / "out.txt"
    with pytest.raises(OutputError, match=rf"^cannot write --output {missing}: No such file or directory$"):
        AtomicOutput(str(missing), "--output")
    path = tmp_path / "out.txt"
    path.write_text("kept\n")
    sink = AtomicOutput(str(path), "--output")
    sink.file.write("new\n")

    def cross_device(*args):
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    monkeypatch.setattr(os, "replace", cross_device)
    with pytest.raises(OutputError) as raised:
        sink.commit()
    monkeypatch.undo()
    assert str(raised.value) == f"could not write --output {path} (Invalid cross-device link): it is unchanged"
    sink.discard()
    assert path.read_text() == "kept\n" and os.listdir(tmp_path) == ["out.txt"]
