"""scripts/bench_export.py on the session's tiny model: the sentences it selects, one
alternating run (checkpoint, float32, int8) with its figures, and what it writes. The
measurement itself (the study's models) is in docs/benchmarks.md."""

import json
import os
import sys

import pytest

import hltmt_plugin.hub  # noqa: F401  (the plugin's safe loading, for the fixtures' checkpoints)
from conftest import ROOT, assert_one_error_line, run

BENCH = os.path.join(ROOT, "scripts", "bench_export.py")
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import bench_export as be  # noqa: E402


def test_the_studys_rule_picks_short_segments_of_each_direction():
    items = be.select_items(["en-de", "en-gu", "fr-en"], 4)
    assert [i[:2] for i in items] == [("en", "de")] * 4 + [("en", "gu")] * 4 + [("fr", "en")] * 4
    assert all(0 < len(i[2].split()) <= 12 and 0 < len(i[3].split()) <= 16 for i in items[:8])
    assert all(0 < len(i[3].split()) <= 12 and 0 < len(i[2].split()) <= 16 for i in items[8:])  # English the reference
    with (
        open(os.path.join(be.RAW, "test.en-de.en"), encoding="utf-8") as en,
        open(os.path.join(be.RAW, "test.en-de.de"), encoding="utf-8") as de,
    ):
        short = [(a.strip(), b.strip()) for a, b in zip(en, de) if len(a.split()) <= 12 and len(b.split()) <= 16]
    assert [i[2:] for i in items[:4]] == short[:4]  # the first short pairs, in the test set's order


def test_one_run_measures_every_engine_and_compares_their_lines(hltmt, tmp_path):
    pytest.importorskip("ctranslate2")
    out = tmp_path / "result.json"
    done = run(
        [
            sys.executable,
            BENCH,
            "--work",
            str(tmp_path / "work"),
            "--out",
            str(out),
            "--models",
            f"tiny={hltmt}",
            "--per-direction",
            "2",
            "--threads",
            "1",
            "--modes",
            "batch",
            "--beam",
            "2",
            "--max-len",
            "7",
            "--fixed-len",
        ]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert [(r["engine"], r["mode"]) for r in result["runs"]] == [(e, "batch") for e in be.ENGINES]
    # CTranslate2 alone on the same tokens, beside each of its runs; the other engines have none
    assert [bool(r["raw_sent_per_s"]) for r in result["runs"]] == [e in ("float32", "int8") for e in be.ENGINES]
    for r in result["runs"]:  # --fixed-len: every line 7 pieces (a piece is never the empty text)
        lines = json.loads(open(r["hyp"], encoding="utf-8").read())
        assert len(lines) == 6 and all(len(line.split()) <= 7 and line for line in lines), (r["engine"], lines)
    assert all(r["sent_per_s"] > 0 and r["peak_mib"] > 50 and r["sentences"] == 6 for r in result["runs"])
    quality = result["quality"]
    assert quality["tiny/float32"]["identical"] == quality["tiny/float32"]["lines"] == 6
    # each run's lines against the checkpoint's of the same threads and mode, counted by the run
    identical = {r["engine"]: r["identical_to_checkpoint"] for r in result["runs"]}
    assert identical["checkpoint"] == identical["float32"] == identical["transformers"] == 6
    assert identical["int8"] == quality["tiny/int8"]["identical"]
    # the run's conditions, written by the command
    assert result["started"] <= result["ended"] and result["started"].endswith("Z") and result["cpus"] >= 1
    assert result["commit"] != "?" and result["load_average_at_start"] >= 0
    assert quality["tiny/transformers"]["identical"] == 6
    assert 0 <= quality["tiny/int8"]["identical"] <= 6 and "bleu" in quality["tiny/int8"]
    # float32 kernels of two engines on the noised test model (every weight moved by 0.3, so its
    # logits are large): up to ~1.5e-3 seen; the study's trained models stay under 1e-4
    # (docs/benchmarks.md); an export that routes or converts a weight wrongly is off by > 0.1
    assert result["max_logprob_diff"]["tiny/float32"] < 5e-3
    assert result["sizes"]["tiny/int8"] < result["sizes"]["tiny/float32"]


def test_the_command_itself_is_measured_and_the_export_imports_no_torch(hltmt, tmp_path):
    pytest.importorskip("ctranslate2")
    out = tmp_path / "result.json"
    args = ["--work", str(tmp_path / "work"), "--out", str(out), "--models", f"tiny={hltmt}", "--per-direction", "1"]
    args += ["--threads", "1", "--modes", "single", "--beam", "2", "--via", "command", "--no-quality"]
    done = run([sys.executable, BENCH, *args])
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    runs = {r["engine"]: r for r in result["runs"]}
    assert set(runs) == set(be.ENGINES) and all(r["sentences"] == 3 and r["load_s"] > 0 for r in runs.values())
    # the command's peak memory: the checkpoint's process holds torch and fairseq, the export's neither
    assert runs["float32"]["peak_mib"] < runs["checkpoint"]["peak_mib"] - 100
    lines = {engine: json.loads(open(r["hyp"], encoding="utf-8").read()) for engine, r in runs.items()}
    assert lines["float32"] == lines["checkpoint"] and len(lines["int8"]) == 3 and result["max_logprob_diff"] == {}


def test_a_model_that_cannot_be_read_is_one_error_line(tmp_path):
    args = ["--work", str(tmp_path / "work"), "--models", f"x={tmp_path / 'none.pt'}", "--per-direction", "1"]
    done = run([sys.executable, BENCH, *args, "--threads", "1", "--modes", "batch", "--no-quality"])
    assert_one_error_line(done, "bench_export: error:", "none.pt does not exist")


def test_a_fixed_length_is_measured_through_the_api_only():
    with pytest.raises(SystemExit):  # argparse's one line: hltmt-translate has no --min-len
        be.parse_args(["--work", "w", "--fixed-len", "--via", "command"])
    assert be.parse_args(["--work", "w", "--fixed-len"]).fixed_len


def test_the_paper_size_models_are_the_main_jobs(tmp_path):
    """--paper-size builds the models of hltmt-main-job --size base over WMT-10's split: the
    recipe's lines are the job's own fairseq-train lines (after the data folder)."""
    import shlex

    job = [sys.executable, "-m", "hltmt_plugin.experiments.main_job", "--size", "base", "--cpu", "--dry-run"]
    done = run([*job, "--high", "fr,cs,de,fi,lv,et", "--run-dir", str(tmp_path / "recipe")])
    assert done.returncode == 0, done.stderr[-2000:]
    trains = [shlex.split(line) for line in done.stdout.splitlines() if "fairseq_cli.train" in line]
    lines = {"hltmt" if "--high-resource-langs" in argv else "mnmt": argv[4:] for argv in trains}
    assert be.recipe_commands(str(tmp_path)) == lines and sorted(lines) == ["hltmt", "mnmt"]
