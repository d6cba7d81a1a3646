"""scripts/scale_table.py: the rows each K's figures give, the Markdown table with each value's
ratio to the reference K, and the chart."""

import os
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))

import scale_table  # noqa: E402

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


def test_table_rows_hold_the_figures_every_k_has_with_ratios_to_k10():
    results = [
        {"k": 1, "dictionary": 500, "speed": {"rates": {"mnmt": [10.0, 30.0, 20.0]}}},
        {"k": 10, "dictionary": 600, "speed": {"rates": {"mnmt": [40.0]}}},
        {"k": 25},
    ]
    rows = scale_table.rows_of(results, ["mnmt"])
    assert rows == [
        ("pieces in the joint dictionary (before language tokens)", "", "", {1: 500, 10: 600}),
        ("training words per CPU-second (same batches, interleaved)", "mnmt", "words/s", {1: 20.0, 10: 40.0}),
    ]
    assert scale_table.reference_k(results) == 10 and scale_table.reference_k(results[:1]) == 1
    table = scale_table.markdown(rows, results).splitlines()
    assert table[0] == "| measure | system | unit | K=1 | K=10 | K=25 |"
    assert table[2] == "| pieces in the joint dictionary (before language tokens) |  |  | 500 (0.83x) | 600 |  |"
    assert table[3] == (
        "| training words per CPU-second (same batches, interleaved) | mnmt | words/s | 20.00 (2.00x time) | 40.00 |  |"
    )


def test_the_chart_draws_the_rows_of_every_panel(tmp_path):
    results = [
        {
            "k": k,
            "checkpoint_mib": {"mnmt": 2.0 * k, "hltmt": 3.0 * k},
            "speed": {"rates": {"mnmt": [100.0 / k], "hltmt": [90.0 / k]}, "flops": {"mnmt": k, "hltmt": 1.1 * k}},
        }
        for k in (10, 20)
    ]
    rows = scale_table.rows_of(results, ["mnmt", "hltmt"])
    assert ("  time ratio to plain MNMT at this K", "hltmt", "x", {10: 100 / 90, 20: 100 / 90}) in rows
    png = tmp_path / "scale.png"
    scale_table.plot(rows, results, str(png), "two Ks")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
