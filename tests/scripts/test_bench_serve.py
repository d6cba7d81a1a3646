"""scripts/bench_serve.py on a tiny load (the figures of docs/benchmarks.md come from its full run):
both modes of one engine measured in turns, every answer checked against hltmt-translate, the
servers stopped, the JSON written where told; its options refused in one line."""

import json
import os
import sys

import pytest

from conftest import ROOT, run

SCRIPT = os.path.join(ROOT, "scripts", "bench_serve.py")


@pytest.mark.fast
@pytest.mark.parametrize(
    "args, words",
    [
        (["--clients", "1,x"], "--clients must be whole numbers"),
        (["--engines", "onnx"], "--engines takes fairseq and ctranslate2"),
        (["--requests", "0"], "--requests must be at least 1"),
        (["--rounds", "0"], "--rounds must be at least 1"),
    ],
)
def test_bad_options_are_one_line(args, words):
    done = run([sys.executable, SCRIPT, *args])
    assert done.returncode == 2 and words in done.stderr, done.stderr


def test_a_tiny_run_measures_both_modes_and_checks_every_answer(tmp_path):
    out = tmp_path / "bench.json"
    done = run(
        [sys.executable, SCRIPT, "--engines", "fairseq", "--clients", "1,3", "--requests", "3", "--rounds", "2"]
        + ["--sentences", "2", "--burst", "12", "--max-len", "20", "--json", str(out)],
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert [(r["batching"], r["clients"]) for r in rows] == [(True, 1), (False, 1), (True, 3), (False, 3)]
    assert all(r["requests"] == 6 and r["not_identical"] == 0 and r["sentences_per_s"] > 0 for r in rows)
    assert all(r["p50_ms"] <= r["p99_ms"] and r["peak_mib"] > 50 for r in rows)
    beyond = result["beyond_the_queue"]["fairseq"]
    assert beyond["answered"] + beyond["refused_429"] + beyond["other"] == 36 and beyond["other"] == 0
    assert len(beyond["rss_mib_before_and_after_each_burst"]) == 4
    assert result["sentences"] == 20 and len(result["directions"]) == 10
    assert "| fairseq | off | 3 | 6 |" in done.stdout
