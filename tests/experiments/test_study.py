"""hltmt-study at a tiny size (two targets, a few updates): every system trains, decodes and
is scored through the real commands; the report is recomputed from the results folder; the
seed-1 models translate from their own folder; a stopped study continues where it stopped."""

import csv
import json
import os
import re
import shutil

import pytest

from conftest import ROOT, assert_one_error_line, cli, run

STUDY = cli("hltmt-study")
RUNS = "mnmt:1,hltmt:1,lsmnmt:1,mnmt-staged:1,mnmt:2,hltmt:2"


def study(folder, *extra):
    return run(
        [
            STUDY,
            "--langs",
            "de,gu",
            "--high",
            "de",
            "--vocab",
            "600",
            "--max-train",
            "300",
            "--updates",
            "8",
            "--high-updates",
            "4",
            "--run-dir",
            str(folder / "run"),
            "--results",
            str(folder / "results"),
            "--runs",
            RUNS,
            "--progress",
            "5",
            *extra,
        ]
    )


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    folder = tmp_path_factory.mktemp("study")
    result = study(folder)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return folder, result.stdout


@pytest.mark.fast
def test_every_system_and_seed_is_scored_from_its_text(done):
    from sacrebleu.metrics import BLEU

    folder, out = done
    results = folder / "results"
    rows = list(csv.DictReader(open(results / "results.csv")))
    assert {(r["system"], r["seed"], r["direction"]) for r in rows} == {
        (s, seed, d) for s, seed in (x.split(":") for x in RUNS.split(",")) for d in ("en-de", "en-gu")
    }
    row = next(r for r in rows if (r["system"], r["seed"], r["direction"]) == ("hltmt", "2", "en-gu"))
    hyps = open(results / "runs" / "hltmt.seed2" / "en-gu.hyp").read().split("\n")[:-1]
    refs = open(results / "refs" / "en-gu.ref").read().split("\n")[:-1]
    assert len(hyps) == len(refs) > 0
    assert float(row["bleu"]) == round(BLEU().corpus_score(hyps, [refs]).score, 2)
    # the selection: no reference longer than 16 words, no training run over 8 updates
    assert max(len(r.split()) for r in refs) <= 16
    assert "num_updates 8" in open(results / "runs" / "mnmt.seed1" / "train.log").read()
    staged = open(results / "runs" / "mnmt-staged.seed1" / "train-high.log").read()
    assert "--lang-pairs en-de " in staged and "num_updates 4" in staged


def test_significance_and_report(done):
    folder, _ = done
    results = folder / "results"
    sig = list(csv.DictReader(open(results / "significance.csv")))
    assert {(r["baseline"], r["seed"], r["direction"]) for r in sig} == {
        ("mnmt", "1", "en-de"),
        ("mnmt", "1", "en-gu"),
        ("mnmt", "1", "all"),
        ("mnmt", "2", "en-de"),
        ("mnmt", "2", "en-gu"),
        ("mnmt", "2", "all"),
        ("lsmnmt", "1", "en-de"),
        ("lsmnmt", "1", "en-gu"),
        ("lsmnmt", "1", "all"),
        ("mnmt-staged", "1", "en-de"),
        ("mnmt-staged", "1", "en-gu"),
        ("mnmt-staged", "1", "all"),
    }
    assert all(0 <= float(r["bleu_p"]) <= 1 and 0 <= float(r["chrf_p"]) <= 1 for r in sig)
    md = open(results / "report.md").read()
    for text in (
        "## The regime the models reached",
        "has NOT reached the regime",
        "HLT-MT − MNMT (total)",
        "MNMT staged − MNMT (the stage schedule alone)",
        "| the paper, WMT-10 one-to-many",
        "HLT-MT vs MNMT, seed 2",
        "HLT-MT vs MNMT, staged data, seed 1",
        "- seed 1: de->m",
    ):
        assert text in md, text
    for png in ("bleu.png", "valid_loss.png", "gate_seed1.png", "gate_seed2.png"):
        assert open(results / png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    gate = json.load(open(results / "runs" / "hltmt.seed1" / "gate.json"))
    assert gate["langs"] == ["de"] and len(gate["map"]) == 1


def test_seed_one_models_translate_from_their_own_folder(done, tmp_path):
    folder, _ = done
    models = folder / "results" / "models"
    assert sorted(os.listdir(models)) == sorted(
        [
            "dict.en.txt",
            "dict.de.txt",
            "dict.gu.txt",
            "dict_fingerprint.json",
            "spm.model",
            "hltmt.pt",
            "lsmnmt.pt",
            "mnmt.pt",
            "mnmt-staged.pt",
        ]
    )
    copy = tmp_path / "models"
    shutil.copytree(models, copy)
    stored, away = folder / "run" / "data" / "bin", folder / "run" / "data" / "bin.away"
    os.rename(stored, away)  # the data folder the checkpoints name is gone
    try:
        for name in ("hltmt", "mnmt"):
            (tmp_path / "in.tsv").write_text("en\tde\tThe file is open.\nen\tgu\tSave the file.\n")
            out = run(
                [
                    cli("hltmt-translate"),
                    "--checkpoint",
                    str(copy / f"{name}.pt"),
                    "--input",
                    str(tmp_path / "in.tsv"),
                    "--no-progress",
                    "--device",
                    "cpu",
                ]
            )
            assert out.returncode == 0, out.stderr[-2000:]
            assert len(out.stdout.split("\n")) == 3
    finally:
        os.rename(away, stored)


def test_a_stopped_study_continues_where_it_stopped(done):
    folder, _ = done
    os.remove(folder / "results" / "runs" / "hltmt.seed2" / "scores.json")  # stopped before its scores
    again = study(folder, "--report-only")
    assert again.returncode == 0 and "HLT-MT vs MNMT, seed 2" not in open(folder / "results" / "report.md").read()
    again = study(folder)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "mnmt:1 already finished" in again.stdout and "hltmt:2 starts" in again.stdout
    assert "HLT-MT vs MNMT, seed 2" in open(folder / "results" / "report.md").read()
    log = open(folder / "run" / "logs" / "hltmt.seed2.train.log").read()
    assert log.count("$ ") == 1  # not trained again


def test_bad_runs_are_refused_in_one_line(tmp_path):
    bad = run([STUDY, "--runs", "transformer:1", "--run-dir", str(tmp_path)])
    assert bad.returncode == 2 and "expected SYSTEM:SEED" in bad.stderr and "Traceback" not in bad.stderr


def test_the_progress_line_follows_the_part_that_runs(tmp_path, capsys):
    """mnmt-staged's first run (the high-resource directions) is reported as itself, not as
    the second run's 0 updates."""
    import threading
    import time
    from types import SimpleNamespace

    from hltmt_plugin.experiments.study import Setting, watch

    logs = {name: tmp_path / f"{name}.log" for name in ("train-high", "train")}
    logs["train-high"].write_text(
        "epoch 001:    300 / 501 loss=8.9, num_updates=300, lr=0.002\n"
        "valid on 'valid' subset | loss 8.123 | nll_loss 7.4\n"
    )
    fake = SimpleNamespace(s=Setting(), log_path=lambda system, seed, name: str(logs[name]))
    active, stop = {("mnmt-staged", 1): "train-high", ("hltmt", 1): "decode"}, threading.Event()
    watcher = threading.Thread(target=watch, args=(fake, active, stop, 0.05))
    watcher.start()
    time.sleep(0.3)
    stop.set()
    watcher.join()
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert "hltmt:1 decoding" in line
    assert "mnmt-staged:1 300/2000 updates (high-resource directions only), valid loss 8.123" in line


# ---- options that cannot work, refused before anything is written
@pytest.mark.parametrize(
    "extra, message",
    [
        (["--runs", "mnmt:1,mnmt:1"], "--runs names mnmt:1 twice"),
        (["--langs", "de,gu", "--high", "fr"], "--high fr not in --langs (de,gu)"),
        (["--langs", "de,de"], "--langs names de twice"),
        (["--langs", "de,xx", "--high", "de"], "has no data for xx"),
    ],
)
def test_study_options_that_cannot_work_are_one_line(tmp_path, extra, message):
    done = run([STUDY, "--run-dir", str(tmp_path / "run"), *extra])
    assert done.returncode == 2 and message in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and not (tmp_path / "run").exists()


def test_results_go_under_the_run_folder_unless_named(tmp_path):
    from hltmt_plugin.experiments.study import Setting, Study, build_parser

    study_ = Study(build_parser().parse_args(["--run-dir", str(tmp_path / "run")]), Setting())
    assert study_.results == str(tmp_path / "run" / "results")
    assert not study_.results.startswith(os.path.join(ROOT, "docs"))


def test_a_run_folder_prepared_otherwise_is_refused(tmp_path):
    from hltmt_plugin.experiments.steps import StepFailed
    from hltmt_plugin.experiments.study import check_prepared

    made = {"raw": "raw", "langs": ["de", "gu"], "vocab": 8000, "max_train": 0, "max_en_words": 9, "max_xx_words": 9}
    marker = tmp_path / ".done-prepare"
    marker.write_text(json.dumps(made))
    check_prepared(str(marker), made)
    with pytest.raises(StepFailed, match=r"prepared otherwise \(vocab: prepared 8000, asked 4000\)"):
        check_prepared(str(marker), {**made, "vocab": 4000})


@pytest.mark.parametrize(
    "change, phrase",
    [
        (lambda r: r.pop("vocab"), "lacks 'vocab': a partial record"),
        (lambda r: r.update(vocab="8000"), "field 'vocab' must be a whole number"),
        (lambda r: r.update(langs=[]), "field 'langs' must hold at least 1 entries"),
        (lambda r: r.update(seed=1), "holds an unknown field 'seed'"),
    ],
)
def test_a_preparation_record_missing_or_wrong_in_a_field_is_one_line(tmp_path, change, phrase):
    from hltmt_plugin.experiments.steps import StepFailed
    from hltmt_plugin.experiments.study import check_prepared

    made = {"raw": "raw", "langs": ["de", "gu"], "vocab": 8000, "max_train": 0, "max_en_words": 9, "max_xx_words": 9}
    record = dict(made)
    change(record)
    marker = tmp_path / ".done-prepare"
    marker.write_text(json.dumps(record))
    with pytest.raises(StepFailed, match="preparation record .*" + re.escape(phrase)):
        check_prepared(str(marker), made)


def test_a_pair_whose_sides_do_not_match_line_by_line_is_one_line(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for split in ("train", "valid", "test"):
        for lang in ("de", "gu"):
            for side in ("en", lang):
                name = f"{split}.en-{lang}.{side}"
                shutil.copy(os.path.join(ROOT, "data", "debmt10", name), raw / name)
    lines = open(raw / "test.en-gu.gu", encoding="utf-8").readlines()
    (raw / "test.en-gu.gu").write_text("".join(lines[:-1]), encoding="utf-8")
    done = study(tmp_path, "--raw", str(raw))
    assert_one_error_line(done, "test.en-gu.gu", "misaligned")
    assert not os.path.exists(tmp_path / "results" / "results.csv")


def test_a_corrupt_result_record_in_report_only_is_one_line(tmp_path):
    results = tmp_path / "results"
    for system in ("mnmt", "hltmt"):
        folder = results / "runs" / f"{system}.seed1"
        folder.mkdir(parents=True)
        scores = {
            "en-de": {"bleu": 1.0, "chrf": 2.0, "sentences": 2},
            "en-gu": {"bleu": 1.0, "chrf": 2.0, "sentences": 2},
        }
        setting = {"updates": 10, "high_updates": 5}
        record = {"system": system, "seed": 1, "high": ["de"], "scores": scores, "setting": setting, "wall_seconds": 3}
        (folder / "scores.json").write_text(json.dumps(record))
        for pair in scores:
            (folder / f"{pair}.hyp").write_text("a\nb\n")
    (results / "refs").mkdir()
    for pair in ("en-de", "en-gu"):
        (results / "refs" / f"{pair}.ref").write_text("a\nb\n")
    gate = results / "runs" / "hltmt.seed1" / "gate.json"
    command = [STUDY, "--report-only", "--results", str(results), "--run-dir", str(tmp_path / "run")]
    for text, why in (
        ('{"langs": ["de"], "probs": [[0.7, 0.3]], "map": [0]}', None),
        ("{", "is not valid JSON"),
        ('{"langs": ["de"], "probs": [], "map": [0]}', "one row of one width per language"),
    ):
        gate.write_text(text)
        done = run(command)
        if why is None:
            assert done.returncode == 0 and (results / "gate_seed1.png").exists(), done.stderr[-2000:]
        else:
            assert_one_error_line(done, "hltmt-study: error: gate record", why)
    (results / "runs" / "mnmt.seed1" / "scores.json").write_text("{}")
    assert_one_error_line(run(command), "scores record", "is empty: a partial record")
