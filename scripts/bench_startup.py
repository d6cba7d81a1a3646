#!/usr/bin/env python3
"""How fast each installed command answers ``--help``: wall time of the whole process (start,
imports, help text, exit), several runs per command, median, min and max; and, for scale, the
time of ``python -c "import hltmt_plugin"`` (the registration with fairseq: torch and fairseq
imported), which a command pays only once its arguments are read.

    python scripts/bench_startup.py --repeats 7 [--commands hltmt-translate,hltmt-study] [--json out.json]

Prints a Markdown table (docs/benchmarks.md holds the figures and the command). The commands
run one after another, never side by side; the load average before the first run is printed
with the table, since another busy process on the machine shows in every figure.
"""

import argparse
import json
import os
import re
import statistics
import sys

from timing import markdown_table, run_measured

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)  # the commands of this environment
KEYS = ("median", "min", "max")


def installed_commands():
    """The console scripts setup.py installs, in its order."""
    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as f:
        return re.findall(r'"(hltmt-[a-z-]+) = hltmt_plugin\.cli\.\w+:main"', f.read())


def measure(argv, repeats, env):
    """(median, min, max) of the wall time, start to exit, of ``repeats`` runs of ``argv``; an
    error if one run fails."""
    if not os.path.isfile(argv[0]):
        raise SystemExit(f"bench_startup: error: {argv[0]} is not installed in this environment")
    times = []
    for _ in range(repeats):
        done = run_measured(argv, env=env, cwd=ROOT)
        if done.code != 0:
            raise SystemExit(f"bench_startup: error: {' '.join(argv)} exited {done.code}: {done.err.strip()[-300:]}")
        times.append(done.wall_s)
    return statistics.median(times), min(times), max(times)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=7, help="runs per command (default 7)")
    p.add_argument("--commands", default=None, help="comma-separated commands (default: every installed one)")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    commands = args.commands.split(",") if args.commands else installed_commands()
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    load = os.getloadavg()[0]
    runs = [(f"{command} --help", [os.path.join(BIN, command), "--help"]) for command in commands]
    runs.append(('python -c "import hltmt_plugin"', [sys.executable, "-c", "import hltmt_plugin"]))
    rows = [{"command": name, **dict(zip(KEYS, measure(cmd, args.repeats, env)))} for name, cmd in runs]
    print(f"{args.repeats} runs each, one at a time; {os.cpu_count()} CPUs, load average {load:.2f} at the start\n")
    cells = [[f"`{row['command']}`", *(f"{row[key]:.2f}" for key in KEYS)] for row in rows]
    print(markdown_table(["command", "median (s)", "min (s)", "max (s)"], cells))
    if args.json:
        from hltmt_plugin.atomic_files import write_text  # whole or not at all

        write_text(
            args.json,
            json.dumps({"repeats": args.repeats, "cpus": os.cpu_count(), "load": load, "rows": rows}, indent=1) + "\n",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
