"""A smoke run of the benchmark command (scripts/bench.py) at a tiny size: it must run every
system end to end and write figures that make sense. It measures nothing here; the figures
are in docs/benchmarks.md."""
import json
import os
import sys

from conftest import ROOT, run

BENCH = os.path.join(ROOT, "scripts", "bench.py")


def test_bench_runs_every_system_and_writes_its_figures(data_bin, tmp_path):
    out = tmp_path / "bench.json"
    done = run([sys.executable, BENCH, "--data", data_bin, "--langs", "de,fr,gu,hi", "--high", "de,fr",
                "--pool-size", "2", "--batches", "2", "--rounds", "1", "--gen-sentences", "4", "--gen-len", "4",
                "--json", str(out), "--png", str(tmp_path / "bench.png")])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert (tmp_path / "bench.png").stat().st_size > 1000
    rows = {(r["measure"], r["system"]): r for r in figures["rows"]}
    for system in ("hltmt", "hltmt high", "hltmt+adapters", "hltmt+skills"):
        assert rows[("train words/s", system)]["value"] > 0
        assert rows[("training memory (MiB, model)", system)]["ratio"] > 1.0  # more parameters than the baseline
        assert rows[("parameters", system)]["ratio"] > 1.0
    for system in ("hltmt", "hltmt+adapters", "hltmt+skills"):
        for d in ("en-de", "en-gu"):
            assert rows[(f"beam-5 tokens/s {d}", system)]["value"] > 0
    # the arithmetic of HLT-MT is the baseline's plus one module per target token: a bit more
    assert 1.0 < rows[("train words/s", "hltmt")]["predicted"] < 1.3
    assert "| train words/s | hltmt |" in done.stdout


def test_bench_refuses_missing_data_and_unknown_systems(tmp_path):
    done = run([sys.executable, BENCH, "--data", str(tmp_path)])
    assert done.returncode != 0 and "no binarized data there" in done.stderr and "Traceback" not in done.stderr
    done = run([sys.executable, BENCH, "--data", str(tmp_path), "--systems", "hltmt,moe"])
    assert done.returncode != 0 and "unknown system moe" in done.stderr
