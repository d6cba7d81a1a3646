"""The scale-in-languages benchmark (scripts/scale_bench.py, issue 17) at its smallest
settings: it must build its corpora, run every measure end to end and write a table, figures
and a chart that make sense. It measures nothing here; the figures are in docs/benchmarks.md."""

import json
import os
import sys

from conftest import ROOT, run

SCALE = os.path.join(ROOT, "scripts", "scale_bench.py")
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import scale_bench  # noqa: E402


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
    assert rows[("resident memory after 2 epochs of data", "hltmt")]["10"] > 50
    # more languages, more language-specific parameters
    assert rows[("parameters", "hltmt+adapters")]["10"] > rows[("parameters", "hltmt+adapters")]["1"]
    assert rows[("routing groups per batch: source languages", "")]["10"] > 1
    assert "| fairseq-generate en-fr: process start to first batch | hltmt |" in done.stdout
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
