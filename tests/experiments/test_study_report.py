"""The quality study's report (hltmt_plugin/experiments/study_report.py): what it says of the regime
the baseline reached."""

import pytest

from hltmt_plugin.experiments.study_report import REGIME_BLEU, regime_lines, regime_verdict

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


def test_the_regime_verdict_names_the_seeds_short_of_it_and_by_how_much():
    assert regime_verdict({1: REGIME_BLEU + 0.3, 2: REGIME_BLEU}) == "the baseline translates"
    assert (
        regime_verdict({1: REGIME_BLEU - 2, 2: REGIME_BLEU - 0.1})
        == "the baseline has NOT reached the regime this study asks for"
    )
    edge = regime_verdict({1: REGIME_BLEU + 0.28, 2: REGIME_BLEU - 0.03, 3: REGIME_BLEU + 1})
    assert edge.startswith("the baseline is at the edge") and "seed 2 is 0.03 BLEU short of it" in edge
    assert "seed 1" not in edge and "seed 3" not in edge


def test_the_regime_line_gives_each_seed_to_two_decimals():
    means = {("mnmt", 1): {"high": 10.277}, ("mnmt", 2): {"high": 9.973}, ("hltmt", 1): {"high": 12.3}}
    line = regime_lines(means, {}, {"updates": 5000})[0]
    assert "10.28 (seed 1), 9.97 (seed 2)" in line and "seed 2 is 0.03 BLEU short of it" in line


def test_the_significance_tests_log_nothing(caplog):
    """sacrebleu logs two lines a metric for each paired test (hundreds in a study): its logger
    is set to WARNING by the report."""
    import logging

    from hltmt_plugin.experiments.study_report import BASELINES, significance

    runs = {("hltmt", 1): {"en-de": ["the house is big", "a cat"]}}
    runs[(BASELINES[0], 1)] = {"en-de": ["the house is small", "a dog"]}
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("sacrebleu").setLevel(logging.NOTSET)
        rows = significance(runs, {"en-de": ["the house is big", "a cat"]})
    assert [row["direction"] for row in rows] == ["en-de", "all"]
    assert [r.getMessage() for r in caplog.records if r.name.startswith("sacrebleu")] == []
