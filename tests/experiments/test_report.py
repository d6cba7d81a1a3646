"""hltmt_plugin/experiments/report.py's tables: the averages a run has directions for."""

import pytest

from hltmt_plugin.experiments.report import groups_present, summarise

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
