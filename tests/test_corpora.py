"""hltmt_plugin/corpora.py: the languages of WMT-10 and DebMT-10 and their high-resource splits,
checked against their sources (the data's README, the paper's split as the README states it)."""

import os
import re

import pytest

from conftest import ROOT
from hltmt_plugin import corpora

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

README = os.path.join(ROOT, "data", "debmt10", "README.md")


def readme_levels():
    """{language: 'high' / 'low'} of the README's table, in its order (most data first)."""
    rows = re.findall(
        r"^\| ([a-z]{2}) \| \d+ \| \d+ \| \d+ \| (high|low) \|$", open(README, encoding="utf-8").read(), re.M
    )
    return dict(rows)


def test_debmt10_is_the_readmes_table():
    levels = readme_levels()
    assert sorted(levels) == sorted(corpora.DEBMT10_LANGS)
    assert corpora.DEBMT10_HIGH == [x for x, level in levels.items() if level == "high"]
    assert corpora.DEBMT10_LOW == [x for x, level in levels.items() if level == "low"]
    assert os.path.isfile(os.path.join(ROOT, "data", "debmt10", f"train.en-{corpora.DEBMT10_LANGS[0]}.en"))


def test_wmt10_lists_ten_languages_and_the_papers_split():
    assert corpora.WMT10_LANGS == "fr cs de fi lv et ro hi tr gu".split()
    assert corpora.WMT10_HIGH == corpora.WMT10_LANGS[:6]
    # the README: the paper's split has lv high and tr low, DebMT-10's the other way round
    assert set(corpora.WMT10_HIGH) ^ set(corpora.DEBMT10_HIGH) == {"lv", "tr"}
    assert "lv is\nhigh-resource and tr low-resource" in open(README, encoding="utf-8").read()
