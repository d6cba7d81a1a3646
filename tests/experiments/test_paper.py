"""hltmt_plugin/experiments/paper.py: the paper's WMT-10 rows, one table per recipe, and the
example's README showing the same table."""

import os

import pytest

from conftest import ROOT
from hltmt_plugin.experiments import paper

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

README = os.path.join(ROOT, "examples", "wmt10", "README.md")


def test_the_examples_readme_shows_the_packages_table():
    text = open(README, encoding="utf-8").read()
    assert "\n".join(paper.readme_table()) in text, "examples/wmt10/README.md: paste paper.readme_table()"


def test_a_changed_figure_in_the_package_or_the_readme_is_seen(monkeypatch):
    text = open(README, encoding="utf-8").read()
    assert "\n".join(paper.readme_table()) not in text.replace("**23.1**", "**23.2**")
    xlmr = paper.RECIPES["xlmr"]
    rows = {**xlmr.rows, "hltmt": paper.PaperRow("HLT-MT", 23.0, "381M", 23.2)}
    monkeypatch.setitem(paper.RECIPES, "xlmr", paper.Recipe(xlmr.command, xlmr.systems, rows))
    assert "\n".join(paper.readme_table()) not in text


def test_each_recipe_gives_every_system_a_row_or_a_reason():
    for recipe in paper.RECIPES.values():
        assert set(recipe.rows) == set(recipe.systems) == {"mnmt", "hltmt", "lsmnmt"}
        for row in recipe.rows.values():
            assert (row.bleu is None) == bool(row.no_row), row
    assert paper.RECIPES["xlmr"].rows["mnmt"].bleu == 22.4 and paper.RECIPES["scratch"].rows["hltmt"].bleu is None
