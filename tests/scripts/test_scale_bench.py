"""The scale-in-languages benchmark (scripts/scale_bench.py) at its smallest settings: it must
build its corpora, run every measure end to end and write a table, figures and a chart that
make sense; hltmt-prepare-data itself timed phase by phase in a measuring process, and a real
fairseq-train run's time line. It measures nothing here; the figures are in docs/benchmarks.md."""

import json
import os
import subprocess
import sys

from conftest import ROOT, run

SCRIPTS = os.path.join(ROOT, "scripts")
SCALE = os.path.join(SCRIPTS, "scale_bench.py")
sys.path.insert(0, SCRIPTS)

import scale_bench  # noqa: E402
from scale_children import training_args  # noqa: E402
from scale_corpus import write_corpus  # noqa: E402
from timing import span, stamp  # noqa: E402


def test_scale_bench_runs_every_measure_and_writes_its_figures(tmp_path):
    out, png = tmp_path / "scale.json", tmp_path / "scale.png"
    done = run(
        [
            sys.executable,
            SCALE,
            "--ks",
            "1,10",
            "--lines",
            "8",
            "--eval-lines",
            "2",
            "--batches",
            "1",
            "--rounds",
            "1",
            "--updates",
            "1",
            "--work",
            str(tmp_path / "work"),
            "--json",
            str(out),
            "--png",
            str(png),
        ],
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert png.stat().st_size > 1000
    figures = json.loads(out.read_text())
    rows = {(r["measure"], r["system"]): r["values"] for r in figures["rows"]}
    for system in scale_bench.SYSTEMS:
        for measure in (
            "fairseq-train: process start to first update",
            "training words per CPU-second (same batches, interleaved)",
            "checkpoint_last.pt (with the optimizer state)",
        ):
            assert set(rows[(measure, system)]) == {"1", "10"} and min(rows[(measure, system)].values()) > 0
    assert rows[("hltmt-prepare-data", "")]["1"] > 0
    assert rows[("  of which sentencepiece training", "")]["10"] > 0
    assert rows[("  train data + batch iterator", "hltmt")]["10"] > 0 and rows[("  model build", "mnmt")]["1"] > 0
    # more languages, more language-specific parameters
    assert rows[("parameters", "hltmt+adapters")]["10"] > rows[("parameters", "hltmt+adapters")]["1"]
    assert rows[("sentences per batch", "")]["10"] > 1
    assert "K=10" in done.stdout and "(whole run" in done.stdout


def test_scale_bench_refuses_bad_options_with_one_line(tmp_path):
    for extra, message in (
        (["--ks", "10,x"], "whole numbers"),
        (["--ks", "0"], ">= 1"),
        (["--ks", "10,10"], "lists a K twice"),
        (["--lines", "0"], "--lines must be >= 1"),
        (["--ks", "200", "--lines", "500"], "DebMT-10 has"),
        (["--systems", "hltmt"], "mnmt"),
        (["--systems", "mnmt,moe"], "choose from"),
    ):
        done = run([sys.executable, SCALE, "--work", str(tmp_path), *extra])
        assert done.returncode == 2, (extra, done.stderr)
        assert message in done.stderr and "Traceback" not in done.stderr, (extra, done.stderr)


def measured(kind, spec, work):
    """``run_measure`` as the scale bench calls it: from a process that imported torch but ran
    nothing in it (a fork of a pytest worker whose earlier tests ran torch's thread pools can
    hang in its first parallel operation)."""
    code = (
        f"import json, sys; sys.path.insert(0, {SCRIPTS!r}); from scale_children import run_measure; "
        f"print(json.dumps(run_measure({kind!r}, json.loads(sys.argv[1]), 300)))"
    )
    done = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_hltmt_prepare_data_itself_is_timed_phase_by_phase(tmp_path):
    raw = str(tmp_path / "raw")
    langs = write_corpus(2, 8, 2, raw)
    prep = measured("prepare", {"langs": langs, "raw": raw, "out": str(tmp_path / "a"), "vocab": 300}, str(tmp_path))
    assert {"total", "load_data", "sentencepiece_model", "encode_splits", "binarize"} <= set(prep)
    assert prep["total"]["cpu"] > prep["binarize"]["cpu"] > 0 and prep["sentencepiece_model"]["cpu"] > 0
    assert {"dict.en.txt", "dict.fr.txt", "langs.txt"} <= set(os.listdir(tmp_path / "a" / "bin"))
    assert (tmp_path / "a" / "bin" / "train.en-fr.fr.bin").stat().st_size > 0  # its output, as the command writes it


def test_a_fairseq_train_run_gives_its_time_line(data_bin, tmp_path):
    spec = {"data": data_bin, "langs": ["de", "fr", "gu", "hi"], "max_tokens": 1024, "updates": 2}
    save = str(tmp_path / "ckpt")
    argv = training_args(spec, "hltmt", save)
    rec = measured("train", {"argv": argv}, str(tmp_path))
    t = stamp()
    imports = span(t, t)
    line = scale_bench.summarize_train(rec, imports)
    assert line["first_update"]["cpu"] > line["first_step"]["cpu"] > 0 and line["build_model"]["cpu"] > 0
    assert line["step_words_per_cpu_s"] > 0 and line["save"]["cpu"] > 0 and line["peak_rss_mib"] > 50
    assert os.path.isfile(os.path.join(save, "checkpoint_last.pt"))
