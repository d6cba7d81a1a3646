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
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)  # the commands of this environment


def installed_commands():
    """The console scripts setup.py installs, in its order."""
    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as f:
        return re.findall(r'"(hltmt-[a-z-]+) = hltmt_plugin\.cli\.\w+:main"', f.read())


def wall(argv, env):
    """Seconds from start to exit of one process; its exit status."""
    if not os.path.isfile(argv[0]):
        raise SystemExit(f"bench_startup: error: {argv[0]} is not installed in this environment")
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    return time.perf_counter() - start, done.returncode, done.stderr.decode("utf-8", "replace")


def measure(argv, repeats, env):
    """(median, min, max) of ``repeats`` runs of ``argv``; an error if one run fails."""
    times = []
    for _ in range(repeats):
        seconds, code, stderr = wall(argv, env)
        if code != 0:
            raise SystemExit(f"bench_startup: error: {' '.join(argv)} exited {code}: {stderr.strip()[-300:]}")
        times.append(seconds)
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
    rows = []
    for command in commands:
        rows.append(
            {
                "command": f"{command} --help",
                **dict(
                    zip(("median", "min", "max"), measure([os.path.join(BIN, command), "--help"], args.repeats, env))
                ),
            }
        )
    registration = measure([sys.executable, "-c", "import hltmt_plugin"], args.repeats, env)
    rows.append({"command": 'python -c "import hltmt_plugin"', **dict(zip(("median", "min", "max"), registration))})
    print(f"{args.repeats} runs each, one at a time; {os.cpu_count()} CPUs, load average {load:.2f} at the start\n")
    print("| command | median (s) | min (s) | max (s) |\n|---|---|---|---|")
    for row in rows:
        print(f"| `{row['command']}` | {row['median']:.2f} | {row['min']:.2f} | {row['max']:.2f} |")
    if args.json:
        from hltmt_plugin.atomic_files import write_text  # whole or not at all

        write_text(
            args.json,
            json.dumps({"repeats": args.repeats, "cpus": os.cpu_count(), "load": load, "rows": rows}, indent=1) + "\n",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
