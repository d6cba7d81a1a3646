"""A smoke run of the benchmark command (scripts/bench.py) at a tiny size: it must run every
system end to end and write figures that make sense. It measures nothing here; the figures
are in docs/benchmarks.md."""

import json
import os
import sys

from conftest import ROOT, run

BENCH = os.path.join(ROOT, "scripts", "bench.py")


def test_bench_runs_every_system_and_writes_its_figures(data_bin, tmp_path):
    """A four-language folder, no language flags: they come from the data (issue 14 item 6)."""
    out = tmp_path / "bench.json"
    done = run(
        [
            sys.executable,
            BENCH,
            "--data",
            data_bin,
            "--batches",
            "2",
            "--rounds",
            "1",
            "--gen-sentences",
            "4",
            "--gen-len",
            "4",
            "--json",
            str(out),
            "--png",
            str(tmp_path / "bench.png"),
        ]
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "# from the data folder: --langs de,fr,gu,hi --high fr,de --pool-size 2" in done.stdout
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
    # every ratio says what it is: speed rows are time ratios, size rows size ratios
    assert "| measure | system | baseline | system | ratio | the ratio is | predicted |" in done.stdout
    assert "ratio system/baseline" not in done.stdout
    speed, size = rows[("train words/s", "hltmt")], rows[("parameters", "hltmt")]
    assert speed["ratio_is"].startswith("time: system / baseline") and size["ratio_is"] == "size: system / baseline"
    assert abs(speed["ratio"] - speed["baseline"] / speed["value"]) < 1e-9
    assert abs(size["ratio"] - size["value"] / size["baseline"]) < 1e-9
    assert figures["clock"] == "cpu"  # one thread on a CPU: this process's CPU time


def test_bench_refuses_missing_data_and_unknown_systems(tmp_path):
    done = run([sys.executable, BENCH, "--data", str(tmp_path)])
    assert done.returncode != 0 and "no binarized data there" in done.stderr and "Traceback" not in done.stderr
    done = run([sys.executable, BENCH, "--data", str(tmp_path), "--systems", "hltmt,moe"])
    assert done.returncode != 0 and "unknown system moe" in done.stderr


def test_bench_help_shows_defaults_and_derivation():
    done = run([sys.executable, BENCH, "--help"])
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    for shown in (
        "tokens per training batch (default: 4096)",
        "interleaved rounds of every measure (default: 3)",
        "(default: all of them, from its langs.txt",
        "(default: min(3, number of high-resource",
        "one number, or SIZE=N for each size (default: tiny=60,small=40,base=20)",
    ):
        assert shown in text, shown


def test_bench_refuses_languages_the_data_does_not_have(data_bin):
    for extra, message in (
        (["--langs", "de,xx"], "--langs names xx"),
        (["--high", "cs"], "--high cs"),
        (["--pool-size", "3"], "--pool-size must lie in [1, 2]"),
        (["--fairseq-train", "--train-sizes", "huge"], "--train-sizes"),
        (["--fairseq-train", "--train-sizes", "tiny", "--train-updates", "tiny=1"], "at least 2 updates"),
    ):
        done = run([sys.executable, BENCH, "--data", data_bin, *extra])
        assert done.returncode != 0 and message in done.stderr and "Traceback" not in done.stderr, (extra, done.stderr)


def test_bench_times_and_profiles_the_real_fairseq_train_step(data_bin, tmp_path):
    """--fairseq-train: fairseq's Trainer of the plain transformer and HLT-MT in one process,
    updates alternating on the same batches, beside the arithmetic; --profile: its phases."""
    out = tmp_path / "train.json"
    options = ["--fairseq-train", "--train-sizes", "tiny", "--train-updates", "4", "--batches", "2", "--profile"]
    options += [
        "--profile-size",
        "tiny",
        "--profile-updates",
        "2",
        "--json",
        str(out),
        "--png",
        str(tmp_path / "t.png"),
    ]
    done = run([sys.executable, BENCH, "--data", data_bin, *options], timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(out.read_text())
    row = figures["rows"][0]
    assert row["size"] == "tiny" and row["cpu_ratio"] > 0 and len(row["halves"]) == 2 and 1.0 < row["predicted"] < 1.3
    prof = figures["profile"]
    phases = {p["phase"]: p for p in prof["phases"]}
    assert phases["update (Trainer.train_step)"]["hltmt_ms"] > 0
    for slp in ("SLP routing decision", "SLP modules"):
        assert phases[slp]["baseline_ms"] == 0 < phases[slp]["hltmt_ms"], slp
    assert (tmp_path / "t.png").stat().st_size > 1000
    assert "| tiny | " in done.stdout and "### One fairseq training step, tiny" in done.stdout
