"""How the benchmarks measure time and memory, and how they run a measure in a child process:
one small module every benchmark script imports, so that a figure in docs/benchmarks.md means
the same thing whichever script wrote it.

- :class:`Clock`: this process's CPU time (one thread on a shared machine, where other
  processes' load inflates wall time but not this process's CPU time) or wall time (several
  threads, or a GPU), the device synchronised around every reading; :func:`per_call`,
  :func:`alternating` (step functions taking turns batch by batch, so load hits each alike);
- :func:`stamp`, :func:`span`, :func:`add_spans`: (wall, CPU) readings and the spans between them;
  :func:`rss_mib`: this process's resident memory;
- :func:`run_measured`: a command's wall time, its own peak memory, CPU time and output;
  :func:`child_env`;
- :func:`run_child` / :func:`child_main`: a measure in a child process of a bench script, its
  spec on the child's standard input and its result on the last line of its standard output
  (both JSON, read by :mod:`hltmt_plugin.records`: no file between them);
- :func:`timed`, :func:`run_fairseq_train`: fairseq-train in this process, its steps stamped;
- :func:`median`, :func:`markdown_table`, :func:`markdown_row`.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from hltmt_plugin import records

CHILD = "--child"  # a bench script's first argument when it runs one measure as a child process


class BenchError(Exception):
    """What a benchmark reports as its one error line (``NAME: error: ...``)."""


class Clock:
    """``kind`` "cpu": ``time.process_time``; "wall": ``time.perf_counter``. On a CUDA device
    every reading waits for the device's queued work first, so that a span covers the work."""

    def __init__(self, kind: str = "wall", device: str = "cpu"):
        if kind not in ("cpu", "wall"):
            raise ValueError(f"clock kind must be cpu or wall, got {kind!r}")
        self.kind, self.device = kind, device
        self._read = time.process_time if kind == "cpu" else time.perf_counter

    def sync(self):
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()

    def now(self) -> float:
        self.sync()
        return self._read()

    def seconds(self, fn: Callable[[], object]) -> Tuple[float, object]:
        """(seconds ``fn()`` took, what it returned)."""
        t0 = self.now()
        result = fn()
        return self.now() - t0, result


def per_call(fn: Callable[[], object], reps: int, clock: Clock, warmup: int = 3) -> float:
    """Seconds per call of ``fn`` over ``reps`` calls, after ``warmup`` calls that are not timed."""
    for _ in range(warmup):
        fn()
    spent, _ = clock.seconds(lambda: [fn() for _ in range(reps)])
    return spent / reps


def alternating(
    steps: Dict[str, Callable], lists: Dict[str, Sequence], clock: Clock, update0: int = 0
) -> Dict[str, float]:
    """Seconds each step function spends on its list of batches (``lists[name]``, all of one
    length), called as ``steps[name](batch, update0 + i)``; the functions take turns batch by
    batch, their order turning round every batch."""
    names = list(steps)
    spent = {name: 0.0 for name in names}
    for i in range(len(next(iter(lists.values())))):
        for name in names if i % 2 == 0 else names[::-1]:
            seconds, _ = clock.seconds(lambda: steps[name](lists[name][i], update0 + i))
            spent[name] += seconds
    return spent


Stamp = Tuple[float, float]


def stamp() -> Stamp:
    """(wall, CPU) time now."""
    return time.time(), time.process_time()


def span(a: Stamp, b: Stamp) -> Dict[str, float]:
    """The wall and CPU seconds from stamp ``a`` to stamp ``b``."""
    return {"wall": b[0] - a[0], "cpu": b[1] - a[1]}


def add_spans(*spans: Dict[str, float]) -> Dict[str, float]:
    return {"wall": sum(x["wall"] for x in spans), "cpu": sum(x["cpu"] for x in spans)}


def rss_mib() -> Tuple[float, float]:
    """(current, peak) resident memory of this process in MiB (Linux's /proc/self/status)."""
    cur = peak = 0.0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                cur = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    return cur, peak


# Runs the measured command as its child and reports, on the descriptor its first argument
# names, that child's exit code, peak resident memory, CPU time (its ``wait4`` usage) and wall
# time from start to exit. Linux keeps a process's peak across fork and exec, so a command
# started by a large process directly would report that process's memory as its own peak;
# started from this small one, it reports its own.
LAUNCHER = """import os, sys, time
start = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.close(int(sys.argv[1]))
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
code, cpu, wall = os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime, time.perf_counter() - start
os.write(int(sys.argv[1]), f"{code} {usage.ru_maxrss} {cpu} {wall}".encode())
"""


class Measured(NamedTuple):
    """What :func:`run_measured` gives of a finished command."""

    code: int  # its exit code
    wall_s: float  # from its start to its exit
    peak_mib: float  # its own peak resident memory (and that of the children it waited for)
    cpu_s: float  # user + system
    out: str  # its standard output
    err: str  # its standard error


def run_measured(
    cmd: List[str], env: Optional[dict] = None, cwd: Optional[str] = None, stdin_path: Optional[str] = None
) -> Measured:
    """Run ``cmd`` to its end under :data:`LAUNCHER` (``stdin_path``: its standard input): its
    exit code, wall time, own peak memory, CPU time and output (the launcher's start left out)."""
    read, write = os.pipe()
    with (
        tempfile.TemporaryFile("w+", encoding="utf-8") as out,
        tempfile.TemporaryFile("w+", encoding="utf-8") as err,
        open(stdin_path or os.devnull, encoding="utf-8") as stdin,
        os.fdopen(read) as report,
    ):
        launcher = [sys.executable, "-c", LAUNCHER, str(write), *cmd]
        try:
            done = subprocess.run(launcher, stdin=stdin, stdout=out, stderr=err, env=env, cwd=cwd, pass_fds=(write,))
        finally:
            os.close(write)
        fields = report.read().split()
        out.seek(0)
        err.seek(0)
        if not fields:  # the launcher itself ended without a report
            return Measured(done.returncode or 1, 0.0, 0.0, 0.0, out.read(), err.read())
        code, peak, cpu, wall = int(fields[0]), int(fields[1]) / 1024.0, float(fields[2]), float(fields[3])
        return Measured(code, wall, peak, cpu, out.read(), err.read())


def child_env(threads: Optional[int] = None, **extra: str) -> dict:
    """The environment of a measured child process: Python's warnings off, ``threads`` OpenMP and
    MKL threads (default: ``OMP_NUM_THREADS`` as set here, else 1), and ``extra`` variables."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", **extra)
    if threads is None:
        env.setdefault("OMP_NUM_THREADS", "1")
    else:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """A bench's --help: its module docstring as written, and every option's default (unless its
    help already says what the default is, or there is none)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.default in (None, False) or action.default is argparse.SUPPRESS:
            return text
        return super()._get_help_string(action)


def below(args, names: Iterable[str], low: int = 1) -> Optional[str]:
    """The one-line problem of the first option of ``names`` (``args``' attributes) below ``low``; None if none is."""
    for name in names:
        if getattr(args, name) < low:
            return f"--{name.replace('_', '-')} must be >= {low}, got {getattr(args, name)}"
    return None


def run_child(script: str, kind: str, spec: dict, env: Optional[dict] = None, what: Optional[str] = None):
    """``python SCRIPT --child KIND`` with ``spec`` as JSON on its standard input (``env``: default
    :func:`child_env`); the JSON value on the last line of its standard output. A failed child
    is one :class:`BenchError` naming ``what`` (default KIND) with the tail of its output."""
    cmd = [sys.executable, script, CHILD, kind]
    done = subprocess.run(cmd, input=json.dumps(spec), capture_output=True, text=True, env=env or child_env())
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise BenchError(f"{what or kind} failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    return records.parse_json(lines[-1], f"the result of {what or kind}")


def child_main(argv: Sequence[str], kinds: Dict[str, Callable[[dict], object]]) -> Optional[int]:
    """The child side of :func:`run_child`: when ``argv`` is ``--child KIND``, ``kinds[KIND]``
    run on the spec read from standard input, its result printed as the last line; 0. ``None``
    when ``argv`` asks for no child."""
    if list(argv[:1]) != [CHILD] or len(argv) != 2 or argv[1] not in kinds:
        return None
    result = kinds[argv[1]](records.parse_json(sys.stdin.read(), f"the spec of {argv[1]}"))
    print(json.dumps(result), flush=True)
    return 0


def timed(owner, name: str, record: dict, key: str, after: Optional[Callable] = None):
    """Wrap ``owner.name`` so that each call appends its (start, end) stamps to ``record[key]``;
    ``after(args, result)``, when given, runs after the end stamp (outside the span)."""
    inner = getattr(owner, name)

    def wrapper(*args, **kwargs):
        start, result = stamp(), None
        try:
            result = inner(*args, **kwargs)
            return result
        finally:
            record.setdefault(key, []).append((start, stamp()))
            if after is not None:
                after(args, result)

    setattr(owner, name, wrapper)
    return wrapper


def run_fairseq_train(argv: List[str]) -> dict:
    """fairseq-train itself (fairseq_cli's ``cli_main`` on ``argv``) in this process, its steps
    stamped: the (start, end) stamps of every call of setup_task, load_dataset, build_model,
    train_step (each update; its target tokens in ``step_tokens``), get_train_iterator and
    save_checkpoint, the stamps at the ``start`` (before fairseq's imports) and the ``end``, and the peak
    resident memory (``peak_rss_mib``)."""
    start = stamp()
    import fairseq.checkpoint_utils as cu
    import fairseq.tasks as ft
    from fairseq.trainer import Trainer

    record = {"start": start}
    setup = ft.setup_task

    def setup_task(*args, **kwargs):
        t = stamp()
        task = setup(*args, **kwargs)
        record.setdefault("setup_task", []).append((t, stamp()))
        for method in ("load_dataset", "build_model"):
            timed(task, method, record, method)
        return task

    ft.setup_task = setup_task
    tokens = record.setdefault("step_tokens", [])
    count = lambda args, _: tokens.append(sum(int(s.get("ntokens", 0)) for s in args[1] if s))  # noqa: E731
    timed(Trainer, "train_step", record, "train_step", after=count)
    timed(Trainer, "get_train_iterator", record, "get_train_iterator")
    timed(cu, "save_checkpoint", record, "save_checkpoint")
    sys.argv = ["fairseq-train", *argv]
    from hltmt_plugin import compat

    compat.install()  # this process now runs one of fairseq's commands: the workarounds a command gets
    from fairseq_cli.train import cli_main

    cli_main()
    record["end"] = stamp()
    record["peak_rss_mib"] = rss_mib()[1]
    return record


def median(values: Iterable[Optional[float]]) -> Optional[float]:
    """The median of the values that are not ``None``; ``None`` when there are none."""
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def markdown_row(cells: Iterable[object]) -> str:
    """One line of a Markdown table: its cells between bars."""
    return "| " + " | ".join(map(str, cells)) + " |"


def markdown_table(header: Sequence[str], rows: Iterable[Iterable[object]]) -> str:
    """A Markdown table: the ``header`` line, its rule, then one line per row of cells."""
    return "\n".join([markdown_row(header), "|" + "---|" * len(header), *map(markdown_row, rows)])
