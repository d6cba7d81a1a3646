"""scripts/group_bench.py (issue 17): one adapter site, per-group matmuls against torch's
grouped matmul, at its smallest settings."""

import os
import sys

from conftest import ROOT, run

GROUP_BENCH = os.path.join(ROOT, "scripts", "group_bench.py")


def test_group_bench_times_both_forms_after_checking_they_agree():
    done = run(
        [
            sys.executable,
            GROUP_BENCH,
            "--groups",
            "1,3",
            "--languages",
            "4",
            "--rows",
            "6",
            "--tokens",
            "3",
            "--dim",
            "8",
            "--hidden",
            "4",
            "--reps",
            "1",
        ]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [
        line.split("|")[1:-1] for line in done.stdout.splitlines() if line.startswith("| 1 ") or line.startswith("| 3 ")
    ]
    assert [r[0].strip() for r in rows] == ["1", "3"]
    assert float(rows[0][2]) == 1.0 and all(float(r[1]) > 0 for r in rows)
    assert all(float(r[3]) > 0 for r in rows) or "no grouped_mm" in rows[0][3]


def test_group_bench_refuses_more_groups_than_rows_with_one_line():
    done = run([sys.executable, GROUP_BENCH, "--groups", "7", "--rows", "6"])
    assert (
        done.returncode != 0
        and "--groups must lie in [1, min(--languages, --rows) = 6]" in done.stderr
        and "Traceback" not in done.stderr
    )
