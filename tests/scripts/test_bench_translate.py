"""scripts/bench_translate.py: its one-line errors, the directions and sentences it serves,
the worker's command line and the summary it prints. The measurement itself (the study's
model, two modes) is in docs/benchmarks.md."""

import argparse
import os
import sys

import pytest

from conftest import ROOT, assert_one_error_line, run

BENCH = os.path.join(ROOT, "scripts", "bench_translate.py")
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import bench_translate as bt  # noqa: E402


def test_bad_option_and_missing_checkpoint_are_one_error_line(tmp_path):
    done = run([sys.executable, BENCH, "--rounds", "x", "--work", str(tmp_path)])
    assert done.returncode == 2
    assert_one_error_line(done, "--rounds", "invalid int value")
    done = run([sys.executable, BENCH, "--checkpoint", str(tmp_path / "none.pt"), "--work", str(tmp_path)])
    line = assert_one_error_line(done, "bench_translate: error:", "none.pt")
    assert line.startswith("bench_translate: error:")
    assert not (tmp_path / "items.json").exists()


def test_a_failing_child_is_one_error_line_with_its_exit_code():
    with pytest.raises(SystemExit) as stopped:
        bt.run_checked([sys.executable, "-c", "import sys; print('x'); sys.exit(3)"], dict(os.environ))
    assert str(stopped.value).startswith("bench_translate: error: ") and str(stopped.value).endswith(
        "... failed (exit 3)"
    )
    assert "\n" not in str(stopped.value)
    wall, rss, text = bt.run_checked([sys.executable, "-c", "print('out')"], dict(os.environ))
    assert text == "out\n" and wall > 0 and rss > 1


def test_the_directions_are_the_models_trained_ones_and_their_short_sentences(tmp_path):
    args = argparse.Namespace(checkpoint=os.path.join(bt.MODELS, "hltmt.pt"), spm=None, data=None)
    pairs = bt.resolve_model(args)  # the study's model: English into its ten languages, nothing else
    assert pairs == [("en", x) for x in sorted(["fr", "de", "cs", "tr", "fi", "et", "ro", "lv", "hi", "gu"])]
    assert args.spm == os.path.join(bt.MODELS, "spm.model")
    for lang in ("de", "gu"):
        for side in ("en", lang):
            lines = [f"{side}{lang} {i}" + (" long" * 12 if i == 1 else "") for i in range(5)]
            (tmp_path / f"test.en-{lang}.{side}").write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    assert bt.sentences(str(tmp_path), "gu", "en", 2) == ["gugu 0", "gugu 2"]  # the study's short segments only
    assert bt.sentences(str(tmp_path), "en", "gu", 9) == [f"engu {i}" for i in (0, 2, 3, 4)]
    with pytest.raises(SystemExit, match=r"^bench_translate: error: missing file .*test\.en-hi\.en"):
        bt.sentences(str(tmp_path), "hi", "en", 2)  # read as hltmt-prepare-data reads a test set: one error line
    directions = [("en", "de"), ("en", "gu"), ("de", "en"), ("gu", "en")]
    items = bt.select_items(str(tmp_path), directions, 3)
    assert items == bt.select_items(str(tmp_path), directions, 3)  # the same shuffle every run
    in_order = [(s, t, f"{s}{t if s == 'en' else s} {i}") for s, t in directions for i in (0, 2, 3)]
    assert sorted(items) == sorted(in_order) and items != in_order  # the first 3 of each direction, shuffled
    groups = bt.by_direction(items)
    assert list(groups) == list(dict.fromkeys((s, t) for s, t, _ in items))
    assert sorted(i for where in groups.values() for i in where) == list(range(12))
    assert all(items[i][:2] == key for key, where in groups.items() for i in where)


def options(**extra):
    values = dict(
        checkpoint="/m/c.pt",
        spm="/m/spm.model",
        data="/m/bin",
        beam=4,
        max_len=30,
        lenpen=0.8,
        max_tokens=900,
        threads=2,
        device="cpu",
    )
    return argparse.Namespace(**{**values, **extra})


def test_the_worker_command_parses_back_to_the_same_options():
    cmd = bt.worker_command("per-direction", options())
    assert cmd[:2] == [sys.executable, os.path.abspath(bt.__file__)]
    args = bt.build_parser().parse_args(cmd[2:])
    assert (args.worker, args.checkpoint, args.spm, args.data) == ("per-direction", "/m/c.pt", "/m/spm.model", "/m/bin")
    assert (args.beam, args.max_len, args.lenpen, args.max_tokens, args.threads, args.device) == (
        4,
        30,
        0.8,
        900,
        2,
        "cpu",
    )


def round_of(translate_s, wall_s, peak, outputs):
    return {"translate_s": translate_s, "wall_s": wall_s, "peak_rss_mib": peak, "outputs": outputs}


def test_the_summary_takes_medians_over_rounds_and_compares_the_modes():
    runs = {
        "mixed": [round_of(2.0, 4.0, 100.0, ["a", "b", "c", "d"]), round_of(4.0, 6.0, 300.0, ["x"] * 4)],
        "per-direction": [round_of(4.0, 8.0, 50.0, ["a", "b", "c", "z"]), round_of(4.0, 8.0, 50.0, ["a"] * 4)],
    }
    table = bt.mode_table(runs, 4)
    assert table["mixed"] == {
        "translate_sent_per_s": 4 / 3.0,
        "end_to_end_sent_per_s": 4 / 5.0,
        "wall_s": 5.0,
        "peak_rss_mib": 200.0,
    }
    same = bt.identical(runs)  # the first round's hypotheses
    assert same == 3
    ratios = bt.ratios_of(table)
    assert ratios["mixed/per-direction translating"] == pytest.approx(4 / 3.0)
    assert ratios["mixed/per-direction end to end"] == pytest.approx(8 / 5.0)
    assert ratios["mixed/per-direction peak memory"] == pytest.approx(200 / 50)
    lines = bt.report_lines(table, ratios, same, 4)
    assert lines[:2] == [
        "| mode | sentences/s translating | sentences/s end to end | wall s | peak RSS MiB |",
        "|---|---|---|---|---|",
    ]
    assert lines[2] == "| mixed | 1.3 | 0.8 | 5.0 | 200 |"
    assert lines[3] == "| per-direction | 1.0 | 0.5 | 8.0 | 50 |"
    assert lines[4] == "" and lines[5] == "- mixed/per-direction translating: **1.33**"
    assert lines[-1] == "- identical hypotheses: mixed = per-direction 3/4"
