"""hltmt-export: a checkpoint exported to CTranslate2 and served by hltmt-translate
(``--checkpoint FOLDER``, or ``--engine ctranslate2`` with the checkpoint) gives the
checkpoint's output lines; bad uses end in one line; without CTranslate2 both commands say
how to install it."""

import json
import os
import random
import signal
import stat
import subprocess
import time

import pytest

import hltmt_plugin.hub  # noqa: F401  (the plugin's safe loading, for the fixtures' checkpoints)
from conftest import ROOT, cli, digest, file_size_limit, run
from export_common import make_folder
from hub_common import BEAM, DIRECTIONS, MAX_LEN, sentences

EXPORT, TRANSLATE = cli("hltmt-export"), cli("hltmt-translate")


def lines_of(n=4):
    items = [(s, t, text) for s, t in DIRECTIONS for text in sentences(s, t, n)]
    random.Random(5).shuffle(items)
    return "".join(f"{s}\t{t}\t{text}\n" for s, t, text in items) + "xx\tde\tunknown\n"


def translate(checkpoint, *extra, input=None):
    return run(
        [
            TRANSLATE,
            "--checkpoint",
            checkpoint,
            "--beam",
            str(BEAM),
            "--max-len",
            str(MAX_LEN),
            "--device",
            "cpu",
            *extra,
        ],
        input=input,
    )


def one_error_line(done, prog):
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), done.stderr[-2000:]
    return lines[0]


@pytest.fixture(scope="module")
def exported(hltmt, tmp_path_factory):
    pytest.importorskip("ctranslate2")
    out = str(tmp_path_factory.mktemp("cli_export") / "hltmt")
    done = run([EXPORT, "--checkpoint", hltmt, "--out", out])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "model(s): m" in done.stdout and "universal (" in done.stdout
    assert "a pool model's recommended export is --quantization int8" in done.stdout  # float32 and several models
    return out


@pytest.mark.fast
def test_the_export_serves_the_checkpoints_lines_json_and_output_file(hltmt, exported, tmp_path):
    text = lines_of()
    expected = translate(hltmt, "--json", input=text)
    assert expected.returncode == 1  # the unknown language: a failed line
    out = tmp_path / "out.jsonl"
    found = translate(exported, "--json", "--output", str(out), "--threads", "1", input=text)
    assert found.returncode == 1 and found.stdout == ""
    mine = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    theirs = [json.loads(line) for line in expected.stdout.splitlines()]
    assert [(r["translation"], r["routing"], r.get("error")) for r in mine] == [
        (r["translation"], r["routing"], r.get("error")) for r in theirs
    ]
    assert "line 13: unknown language 'xx'" in found.stderr
    on_the_fly = translate(hltmt, "--engine", "ctranslate2", input=text)
    assert on_the_fly.stdout.splitlines() == [r["translation"] or "" for r in theirs]


def test_every_exported_engine_serves_a_checkpoint_through_a_temporary_export(hltmt):
    """--engine NAME with a checkpoint: each engine hltmt-export writes (hub/engines.EXPORTED)
    serves the checkpoint's lines from a folder it exports first."""
    from hltmt_plugin.hub.engines import EXPORTED

    text = "".join(f"en\t{tgt}\tThe file could not be saved.\n" for tgt in ("de", "fr", "hi"))
    expected = translate(hltmt, input=text)
    assert expected.returncode == 0, expected.stderr[-2000:]
    for engine in EXPORTED:
        found = translate(hltmt, "--engine", engine, "--threads", "1", input=text)
        assert found.returncode == 0 and found.stdout == expected.stdout, (engine, found.stderr[-2000:])


def test_bad_uses_end_in_one_line(hltmt, exported, tmp_path):
    assert "--engine fairseq" in one_error_line(
        translate(exported, "--engine", "fairseq", input="en\tde\tx\n"), "hltmt-translate"
    )
    assert "exists" in one_error_line(run([EXPORT, "--checkpoint", hltmt, "--out", exported]), "hltmt-export")
    assert "holds --checkpoint" in one_error_line(
        run([EXPORT, "--checkpoint", hltmt, "--out", os.path.dirname(hltmt), "--force"]), "hltmt-export"
    )
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in os.listdir(exported):
        if os.path.isfile(os.path.join(exported, name)):
            (copy / name).write_bytes(open(os.path.join(exported, name), "rb").read())
    assert "is missing" in one_error_line(translate(str(copy), input="en\tde\tx\n"), "hltmt-translate")


def test_without_ctranslate2_both_commands_say_how_to_install_it(hltmt, tmp_path):
    blocker = tmp_path / "block" / "ctranslate2"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('not installed here')\n")
    env = {"PYTHONPATH": str(blocker.parent)}
    line = one_error_line(
        run([EXPORT, "--checkpoint", hltmt, "--out", str(tmp_path / "x")], env_extra=env), "hltmt-export"
    )
    assert "CTranslate2 is not installed" in line and ".[ctranslate2]" in line
    assert not (tmp_path / "x").exists()
    folder = tmp_path / "fake"
    make_folder(folder)
    line = one_error_line(
        run([TRANSLATE, "--checkpoint", str(folder)], env_extra=env, input="en\tde\tx\n"), "hltmt-translate"
    )
    assert "exported model and CTranslate2 is not installed" in line


# ---- the export folder: written by atomic_files.write_folder ----------------------------------------------
def export_to(hltmt, out, *extra, **kwargs):
    return run([EXPORT, "--checkpoint", hltmt, "--out", str(out), *extra], **kwargs)


def umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_force_replaces_only_an_earlier_export_never_a_folder_of_the_user_or_of_the_run(
    hltmt, exported, data_bin, tmp_path
):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    assert "hltmt-export did not write it" in one_error_line(export_to(hltmt, mine, "--force"), "hltmt-export")
    parent = os.path.dirname(data_bin)  # holds spm/ and bin/, written by hltmt-prepare-data
    before = digest(parent)
    assert "hltmt-export did not write it" in one_error_line(export_to(hltmt, parent, "--force"), "hltmt-export")
    assert "hltmt-prepare-data wrote it, not hltmt-export" in one_error_line(
        export_to(hltmt, data_bin, "--force"), "hltmt-export"
    )
    inside = os.path.join(data_bin, "export")  # the data folder the checkpoint names, not on the command line
    assert "lies inside the data folder" in one_error_line(export_to(hltmt, inside, "--force"), "hltmt-export")
    assert digest(parent) == before and not os.path.exists(inside)
    assert (mine / "notes.txt").read_text() == "mine\n" and os.listdir(mine) == ["notes.txt"]
    earlier = tmp_path / "earlier"
    assert export_to(hltmt, earlier).returncode == 0
    (earlier / "notes.txt").write_text("added by the user\n")
    assert "holds notes.txt, which hltmt-export did not write" in one_error_line(
        export_to(hltmt, earlier, "--force"), "hltmt-export"
    )
    os.remove(earlier / "notes.txt")
    assert export_to(hltmt, earlier, "--force").returncode == 0  # an earlier export, as it wrote it
    assert sorted(os.listdir(tmp_path)) == ["earlier", "mine"]  # no temporary folder, no lock file
    assert os.stat(earlier).st_mode & 0o777 == 0o777 & ~umask()  # the umask's mode, not mkdtemp's 0o700
    assert os.stat(earlier / "dict.txt").st_mode & 0o777 == 0o666 & ~umask()


def checkout_leftovers():
    """New files of the checkout (untracked or ignored) that an export would leave: a lock, a
    temporary folder, a marker, a manifest."""
    status = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--untracked-files=all", "--", ".", ":(exclude).venv"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout
    marks = ("hltmt-", ".partial", "manifest.json", "model.bin")
    return {line for line in status.splitlines() if line[:2] in ("??", "!!") and any(m in line for m in marks)}


def test_places_that_are_not_a_new_folder_are_one_line_and_left_alone(hltmt, tmp_path):
    leftovers = checkout_leftovers()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "a_file").write_text("kept\n")
    (tmp_path / "empty").mkdir()
    for out, part in (
        (fifo, "FIFO"),
        ("/dev/null", "device"),
        (tmp_path / "a_file" / "x", "Not a directory"),
        ("/sys/hltmt-export", "cannot write --out /sys/hltmt-export"),  # a place nobody may write
    ):
        line = one_error_line(export_to(hltmt, out, "--force", timeout=120), "hltmt-export")
        assert part in line, line
    here = one_error_line(export_to(hltmt, ".", "--force", cwd=str(tmp_path / "empty")), "hltmt-export")
    assert "is the current folder" in here
    assert os.path.exists("/dev/null") and stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(os.listdir(tmp_path)) == ["a_file", "empty", "fifo"] and (tmp_path / "a_file").read_text() == "kept\n"
    assert export_to(hltmt, tmp_path / "empty").returncode == 0  # an empty folder is replaced
    assert checkout_leftovers() == leftovers  # nothing left in the checkout (the commands run there)


def test_two_exports_to_one_folder_one_proceeds_the_other_is_refused(hltmt, tmp_path):
    out = tmp_path / "out"
    runs = [
        subprocess.Popen(
            [EXPORT, "--checkpoint", hltmt, "--out", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        for _ in range(2)
    ]
    results = [(p.wait(timeout=600), p.stderr.read()) for p in runs]
    assert sorted(code for code, _ in results) == [0, 2], results
    refused = next(err for code, err in results if code == 2).strip().splitlines()
    assert len(refused) == 1 and ("being written by another process" in refused[0] or "exists" in refused[0])
    assert sorted(os.listdir(tmp_path)) == ["out"]


def wait_for(predicate, process, seconds=300):
    end = time.time() + seconds
    while not predicate():
        assert process.poll() is None and time.time() < end, "the command ended first"
        time.sleep(0.05)


def temporaries(folder):
    return [n for n in os.listdir(folder) if n.startswith(".")]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_export_leaves_nothing_or_what_the_next_run_removes(hltmt, tmp_path, sig):
    out = tmp_path / "out"
    process = subprocess.Popen([EXPORT, "--checkpoint", hltmt, "--out", str(out)], env={**os.environ})
    wait_for(lambda: any(n.endswith(".partial") for n in os.listdir(tmp_path)), process)
    process.send_signal(sig)
    assert process.wait(timeout=60) == -sig
    if sig == signal.SIGTERM:
        assert os.listdir(tmp_path) == []
        return
    assert temporaries(tmp_path) and not out.exists()  # a temporary folder and the lock file
    done = export_to(hltmt, out)
    assert done.returncode == 0, done.stderr[-2000:]
    assert os.listdir(tmp_path) == ["out"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_the_temporary_export_of_engine_ctranslate2_does_not_outlive_its_process(hltmt, tmp_path, sig):
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "OMP_NUM_THREADS": "1"}
    command = [TRANSLATE, "--checkpoint", hltmt, "--engine", "ctranslate2", "--src", "en", "--tgt", "de"]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env)
    exported = lambda: any(os.path.isdir(temp / n / "model") for n in os.listdir(temp))  # noqa: E731
    wait_for(exported, process)
    process.send_signal(sig)
    assert process.wait(timeout=60) == -sig
    process.stdin.close()
    if sig == signal.SIGTERM:
        assert os.listdir(temp) == []
        return
    assert os.listdir(temp)  # what SIGKILL left
    done = run(command, env_extra={"TMPDIR": str(temp)}, input="a test\n")
    assert done.returncode == 0, done.stderr[-2000:]
    assert os.listdir(temp) == []  # the next run removed it, and its own at exit


def test_a_file_size_limit_names_the_export_folder(hltmt, tmp_path):
    out = tmp_path / "out"
    done = export_to(hltmt, out, preexec_fn=file_size_limit(1 << 20))
    line = one_error_line(done, "hltmt-export")
    assert f"could not write --out {out} (File too large): nothing was written" == line[len("hltmt-export: error: ") :]
    assert "standard output" not in line and os.listdir(tmp_path) == []


@pytest.mark.fast
def test_the_help_names_both_engines_and_the_cards_options():
    from hltmt_plugin.cli.export import build_parser

    text = build_parser().format_help()
    assert "to CTranslate2 (the default) or to Hugging Face" in text and "--to {ctranslate2,transformers}" in text
    for option in ("--whole-groups", "--license", "--license-name", "--license-link", "--metrics", "--data-sizes"):
        assert option in text


@pytest.mark.fast
@pytest.mark.parametrize(
    "extra,message",
    [
        (["--to", "transformers", "--whole-groups"], "--whole-groups is CTranslate2's"),
        (["--license", "other"], "--license other needs --license-name"),
        (["--license", "mit", "--license-name", "mine"], "add --license other"),
        (["--bleu-signature", "nrefs:1"], "--bleu-signature and --chrf-signature go with --metrics FILE"),
    ],
)
def test_card_and_group_options_that_do_not_hold_are_one_line_and_write_nothing(tmp_path, capsys, extra, message):
    pytest.importorskip("ctranslate2")
    from hltmt_plugin.cli.export import main

    checkpoint = os.path.join(ROOT, "docs", "results", "cpu-study", "models", "mnmt.pt")
    assert main(["--checkpoint", checkpoint, "--out", str(tmp_path / "out"), "--verbose", *extra]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("hltmt-export: error: ") and message in line and not os.path.exists(tmp_path / "out")
