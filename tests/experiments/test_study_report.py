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
