"""hltmt_plugin/experiments/report.py: the groups and averages a run has directions for, the verdict on
convergence, each table of results.md, and its inputs' refusals."""

import pytest

from hltmt_plugin.experiments.report import (
    converged_summary,
    convergence_lines,
    fmt,
    groups_of,
    groups_present,
    mean_std,
    paper_lines,
    read_valid_logs,
    run_info_lines,
    score_all,
    score_lines,
    summarise,
    valid_lines,
    verdict_of,
)

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


def rows_of(directions):
    return [
        {"system": s, "seed": 1, "direction": d, "bleu": 10.0 + i, "chrf": 30.0 + i}
        for s in ("mnmt", "hltmt")
        for i, d in enumerate(directions)
    ]


def test_a_one_to_many_run_has_no_x_to_english_averages():
    table = summarise(rows_of(["en-de", "en-gu"]), high=["de"])
    assert groups_present(table, ["mnmt", "hltmt"]) == ["En->X high", "En->X low", "high", "low", "En->X", "all"]
    assert table[("hltmt", "bleu")]["En->X"] == [10.5]


def test_a_run_both_ways_has_every_average():
    table = summarise(rows_of(["en-de", "gu-en"]), high=["de"])
    assert groups_present(table, ["mnmt"]) == ["En->X high", "X->En low", "high", "low", "En->X", "X->En", "all"]


def test_a_direction_counts_in_its_side_its_level_and_all():
    assert groups_of("en-de", ["de"]) == ["En->X high", "high", "En->X", "all"]
    assert groups_of("gu-en", ["de"]) == ["X->En low", "low", "X->En", "all"]


def test_a_group_average_is_taken_per_seed_then_over_seeds():
    rows = [
        {"system": "hltmt", "seed": seed, "direction": d, "bleu": b, "chrf": 0.0}
        for seed, d, b in ((1, "en-de", 10.0), (1, "en-gu", 20.0), (2, "en-de", 30.0), (2, "en-gu", 40.0))
    ]
    table = summarise(rows, high=["de"])
    assert table[("hltmt", "bleu")]["en-de"] == [10.0, 30.0]
    assert table[("hltmt", "bleu")]["all"] == [15.0, 35.0]  # seed 1's mean, seed 2's mean
    assert fmt(table[("hltmt", "bleu")]["all"]) == "25.00 ± 14.14" and fmt([7.0]) == "7.00"
    assert mean_std([]) != mean_std([]) and mean_std([2.0]) == (2.0, 0.0)  # (nan, nan): no values


def test_the_verdict_names_the_systems_whose_curves_still_fall():
    assert verdict_of({"mnmt": ("flat", ""), "hltmt": ("flat", "")}).startswith("**Converged**")
    line = verdict_of({"mnmt": ("flat", ""), "hltmt": ("falling", "-9%")})
    assert line.startswith("**NOT CONVERGED**: hltmt falling") and "mnmt" not in line
    assert verdict_of({}).startswith("**Convergence not shown**")


def test_a_system_is_flat_only_when_every_seed_is():
    flat = [(u, 1.0) for u in (100, 200, 300, 400)]
    falling = [(u, 4.0 - u / 100) for u in (100, 200, 300, 400)]
    summary = converged_summary({"mnmt": {1: flat, 2: flat}, "hltmt": {1: flat, 2: falling}})
    assert summary["mnmt"][0] == "flat" and summary["hltmt"][0] == "falling"


def test_the_tables_put_the_baseline_first_and_the_difference_last():
    conv = convergence_lines({"hltmt": ("flat", "a"), "mnmt": ("falling", "b")}, "mnmt")
    assert conv[-2:] == ["| mnmt | falling | b |", "| hltmt | flat | a |"]
    valid = valid_lines({"hltmt": [(1, 2.0, 1.5, 2.8, 300)], "mnmt": [(1, 3.0, 2.5, 5.6, 300)]}, "mnmt")
    assert valid[-2:] == ["| mnmt | 300 | 3.00 | 2.50 | 5.60 |", "| hltmt | 300 | 2.00 | 1.50 | 2.80 |"]
    table = summarise(rows_of(["en-de", "gu-en"]), high=["de"])
    lines = score_lines(table, ["mnmt", "hltmt"], ["en-de"], "mnmt", "hltmt", "bleu", "BLEU")
    assert lines[3] == "| direction | mnmt | hltmt | hltmt − mnmt |"
    assert lines[5] == "| en-de | 10.00 | 10.00 | +0.00 |" and lines[6].startswith("| **avg En->X high** |")


def test_the_paper_lines_set_our_deltas_beside_the_papers():
    table = summarise(rows_of(["en-de"]), high=["de"])
    table[("hltmt", "bleu")]["En->X"] = [12.0]
    lines = paper_lines(table, ["mnmt", "hltmt"], "mnmt", "xlmr")
    assert lines[-3:] == [
        "|---|---|---|---|---|",
        "| XLM-R (mnmt) | 22.4 | +0.0 | 10.00 | +0.00 |",
        "| HLT-MT (hltmt) | 23.1 | +0.7 | 12.00 | +2.00 |",
    ]
    lines = paper_lines(table, ["mnmt", "hltmt"], "mnmt")  # from scratch: the paper has no HLT-MT row
    assert lines[-2:] == [
        "| MNMT (mnmt) | 22.0 | +0.0 | 10.00 | +0.00 |",
        "| HLT-MT (hltmt) | no N-N row; the paper's ablation, two stages and SLP without XLM-R: 22.8 |  | 12.00 | +2.00 |",
    ]
    assert paper_lines(table, ["hltmt"], "mnmt") == []  # no baseline: nothing to set beside


def test_the_run_info_lists_the_facts_and_a_table_of_the_systems():
    lines = run_info_lines({"facts": {"gpu": "H100"}, "systems": {"mnmt": {"updates": 10}, "hltmt": {"tok/s": 5}}})
    assert lines[3] == "- gpu: H100" and "| system | updates | tok/s |" in lines
    assert lines[-1] == "| hltmt |  | 5 |"


def test_a_valid_log_spec_without_a_system_or_a_glob_is_refused(tmp_path):
    for spec in ("mnmt", "=x*.log", "mnmt="):
        with pytest.raises(ValueError, match="expected SYSTEM=GLOB"):
            read_valid_logs([spec])
    (tmp_path / "mnmt").mkdir()
    with pytest.raises(ValueError, match="no .gen files under"):
        score_all(str(tmp_path))


def test_the_run_info_is_read_through_its_schema(tmp_path):
    """run.json's facts and figures are texts or numbers under names; anything else is one line."""
    import json

    from hltmt_plugin import records
    from hltmt_plugin.errors import HltmtError
    from hltmt_plugin.experiments.report import RUN_INFO

    good = {"facts": {"size": "quick", "total wall (s)": 12}, "systems": {"mnmt": {"updates": 10}}, "phases_s": {}}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(good))
    assert records.read_json(str(path), RUN_INFO, "--run-info") == good
    for bad in (
        {**good, "facts": {"size": ["a", "list"]}},
        {**good, "systems": {"mnmt": {"updates": {"nested": 1}}}},
        {**good, "surprise": 1},
        {"systems": {}},
    ):
        path.write_text(json.dumps(bad))
        with pytest.raises(HltmtError, match="--run-info"):
            records.read_json(str(path), RUN_INFO, "--run-info")
