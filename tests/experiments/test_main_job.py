"""The main job (hltmt-main-job) on a DebMT-10 slice (smoke size, two languages): every step through the real
CLIs, the report, resuming, and bad input stopped before any training."""

import csv
import os
import sys

import pytest

from conftest import cli, run

JOB = cli("hltmt-main-job")
PREPARE = cli("hltmt-prepare-data")


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    folder = tmp_path_factory.mktemp("job")
    done = run(
        [
            JOB,
            "--size",
            "smoke",
            "--langs",
            "de,gu",
            "--high",
            "de",
            "--run-dir",
            str(folder),
            "--hltmt-schedule",
            "two-run",
        ]
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return folder, done.stdout


@pytest.mark.fast
def test_the_job_reports_every_direction_of_every_system(job):
    folder, out = job
    for n, step in enumerate(
        ["prepare", "train_mnmt.seed1", "train_hltmt_high.seed1", "train_hltmt_all.seed1", "decode.seed1", "report"], 1
    ):
        assert f"step {n}/6 {step}" in out
    assert "HLT-MT stage all" in open(folder / "logs" / "train_hltmt_all.seed1.log").read()
    # fairseq runs as this Python's module (works with a pip --target install), on the CPU here
    first = open(folder / "logs" / "train_mnmt.seed1.log").readline()
    assert first.startswith(f"$ {sys.executable} -m fairseq_cli.train ") and " --cpu" in first
    assert "--bf16" not in first and "--fp16" not in first
    assert "device cpu (fp32)" in out and "2 worker(s)" in out  # decoding in parallel processes
    rows = list(csv.DictReader(open(folder / "report" / "results.csv")))
    assert {(r["system"], r["direction"]) for r in rows} == {
        (s, d) for s in ("mnmt", "hltmt") for d in ("en-de", "en-gu", "de-en", "gu-en")
    }
    assert all(r["sentences"] == "12" for r in rows)
    md = open(folder / "report" / "results.md").read()
    assert "| direction | mnmt | hltmt | hltmt − mnmt |" in md and "**avg X->En low**" in md
    assert "nrefs:1|case:mixed|eff:no|tok:13a" in md and "Routing map after stage 1: de->m0" in md
    assert "## Validation at the end of training" in md and "| mnmt | 12 |" in md and "| hltmt | 6 |" in md
    assert "these models are far from converged" in md
    for png in ("bleu.png", "gate_heatmap.png"):
        assert open(folder / "report" / png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_a_rerun_resumes_after_the_last_completed_step(job):
    folder, _ = job
    os.remove(folder / ".done-report")
    os.remove(folder / "decode" / "hltmt" / "seed1" / "gu-en.gen")
    os.remove(folder / ".done-decode.seed1")
    done = run(
        [
            JOB,
            "--size",
            "smoke",
            "--langs",
            "de,gu",
            "--high",
            "de",
            "--run-dir",
            str(folder),
            "--hltmt-schedule",
            "two-run",
        ]
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "step 2/6 train_mnmt.seed1: already done, skipped" in done.stdout
    assert "decode seed 1 [8/8] hltmt gu-en" in done.stdout and "[1/8]" not in done.stdout


def test_one_run_schedule_side_by_side_trains_both_stages_in_one_fairseq_run(tmp_path):
    folder = tmp_path / "job"  # the default schedule, the two systems' runs at once (what quick does)
    job = [JOB, "--size", "smoke", "--langs", "de,gu", "--high", "de", "--run-dir", str(folder), "--train-jobs", "2"]
    done = run(job)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for n, step in enumerate(["prepare", "train.seed1", "decode.seed1", "report"], 1):
        assert f"step {n}/4 {step}" in done.stdout
    assert "2 training run(s) at once" in done.stdout
    assert "[train_mnmt.seed1] " in done.stdout and "[train_hltmt.seed1] " in done.stdout  # each line says whose
    log = open(folder / "logs" / "train_hltmt.seed1.log").read()
    assert "routing map fixed from the final stage-high gate: de->m0" in log
    assert "[train_" not in log and "num_updates 12" in open(folder / "logs" / "train_mnmt.seed1.log").read()
    md = open(folder / "report" / "results.md").read()
    assert "| mnmt | 12 |" in md and "| hltmt | 12 |" in md and "Routing map after stage 1: de->m0" in md
    # validated every 4 updates (the size's valid_interval): each system's loss curve has points enough to judge
    for system in ("mnmt", "hltmt"):
        assert f"| {system} | falling |" in md or f"| {system} | flat |" in md, md
    # stopped while MNMT trained: a rerun trains MNMT only, then decodes again
    for marker in (".done-train.seed1", ".done-train_mnmt.seed1", ".done-decode.seed1", ".done-report"):
        os.remove(folder / marker)
    os.remove(folder / "decode" / "mnmt" / "seed1" / "en-de.gen")
    again = run(job)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "[train_mnmt.seed1] " in again.stdout and "[train_hltmt.seed1] " not in again.stdout


def write_pair(folder, split, lang, en, xx):
    (folder / f"{split}.en-{lang}.en").write_text("".join(x + "\n" for x in en))
    (folder / f"{split}.en-{lang}.{lang}").write_text("".join(x + "\n" for x in xx))


@pytest.fixture()
def raw(tmp_path):
    folder = tmp_path / "raw"
    folder.mkdir()
    for split in ("train", "valid", "test"):
        write_pair(folder, split, "de", ["a b c", "d e"], ["x y z", "u v"])
    return folder


@pytest.mark.parametrize(
    "breakage, message",
    [
        (lambda f: write_pair(f, "train", "de", ["a", "b", "c"], ["x", "y"]), "has 3 lines but"),
        (lambda f: os.remove(f / "valid.en-de.de"), "missing file"),
        (lambda f: write_pair(f, "test", "de", [], []), "split test of en-de is empty"),
        (lambda f: (f / "train.en-de.de").write_bytes(b"\xff\xfe bad\nok\n"), "is not valid UTF-8"),
    ],
)
def test_bad_data_stops_before_any_training(raw, tmp_path, breakage, message):
    breakage(raw)
    done = run([PREPARE, "--raw", str(raw), "--out", str(tmp_path / "out"), "--langs", "de"])
    assert done.returncode != 0 and "hltmt-prepare-data: error:" in done.stderr and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out" / "bin").exists()


def test_an_unknown_language_stops_the_job_before_any_training(raw, tmp_path):
    done = run([JOB, "--size", "smoke", "--raw", str(raw), "--langs", "de,xx", "--run-dir", str(tmp_path / "job")])
    assert done.returncode != 0
    assert "no data for language(s) xx" in done.stderr and "hltmt-main-job: error:" in done.stderr
    assert not (tmp_path / "job" / "models").exists()


@pytest.mark.parametrize(
    "options, message",
    [
        (["--bf16"], "--bf16 is not offered: fairseq 0.12's --bf16 is its TPU path"),
        (["--gpu"], "--gpu: torch sees no CUDA device"),
        (["--gpu", "--cpu"], "--gpu and --cpu exclude each other"),
        (["--precision", "fp16", "--cpu"], "--precision fp16 needs a GPU"),
    ],
)
def test_device_and_precision_mistakes_are_one_line_before_any_work(tmp_path, options, message):
    if "--gpu" in options and options != ["--gpu", "--cpu"]:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
    done = run([JOB, "--size", "smoke", "--langs", "de", "--run-dir", str(tmp_path / "job"), *options])
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hltmt-main-job: error:") and message in lines[0], done.stderr
    assert not (tmp_path / "job").exists()


@pytest.mark.parametrize(
    "options, message",
    [
        (["--langs", "de,gu", "--high", "fr"], "--high fr not in --langs (de,gu)"),
        (["--langs", "gu,hi"], "no high-resource language among --langs (gu,hi)"),
        (["--langs", "de,de"], "--langs names de twice"),
    ],
)
def test_languages_that_cannot_work_are_one_line_before_any_work(tmp_path, options, message):
    done = run([JOB, "--size", "smoke", "--cpu", "--dry-run", "--run-dir", str(tmp_path / "job"), *options])
    assert done.returncode == 2 and done.stdout == "", done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hltmt-main-job: error:") and message in lines[0], done.stderr
