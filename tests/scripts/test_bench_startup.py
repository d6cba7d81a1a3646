"""A smoke run of scripts/bench_startup.py: one run of one command's --help and of the
registration, a table with both. It measures nothing here; the figures are in
docs/benchmarks.md."""

import json
import os
import sys

from conftest import ROOT, run

BENCH = os.path.join(ROOT, "scripts", "bench_startup.py")


def test_the_table_names_each_command_and_the_registration(tmp_path):
    out = tmp_path / "startup.json"
    done = run([sys.executable, BENCH, "--repeats", "1", "--commands", "hltmt-translate", "--json", str(out)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| `hltmt-translate --help` |" in done.stdout and '| `python -c "import hltmt_plugin"` |' in done.stdout
    rows = json.loads(out.read_text())["rows"]
    assert [r["command"] for r in rows] == ["hltmt-translate --help", 'python -c "import hltmt_plugin"']
    assert all(0 < r["min"] <= r["median"] <= r["max"] for r in rows)


def test_a_command_that_fails_is_an_error():
    done = run([sys.executable, BENCH, "--repeats", "1", "--commands", "hltmt-no-such-command"])
    assert done.returncode != 0 and "hltmt-no-such-command is not installed" in done.stderr
    assert "Traceback" not in done.stderr
