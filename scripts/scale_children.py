"""The measures of scripts/scale_bench.py that each run in a process of their own.

:func:`run_measure` forks the benchmark's process (which imported torch, fairseq and the
plugin once, :func:`import_everything`) and runs one of :data:`CHILDREN` there, so that each
measure starts from the same state and its memory and caches end with it:

- ``prepare``: hltmt-prepare-data itself, each phase timed;
- ``train``: fairseq-train itself, its steps timed (task set-up and data loading among them);
- ``speed``: training words/s of the systems on the same mixed-direction batches.

Also here: the fairseq-train options of each system (the experiment recipe's).
"""

import argparse
import json
import os
import signal
import sys
import tempfile
import time
import traceback

from bench_systems import ADAPTERS, LR, SKILLS
from hltmt_plugin import records
from hltmt_plugin.experiments.recipe import Comparison, Hyper, directions, prepare_command
from scale_corpus import ScaleError, high_and_pool
from timing import add_spans, run_fairseq_train, span, stamp, timed

SYSTEMS = ["mnmt", "hltmt", "hltmt+adapters", "hltmt+skills"]
BENCH_NAME = {system: "baseline" if system == "mnmt" else system for system in SYSTEMS}  # scripts/bench.py's names


def child_prepare(spec):
    """hltmt-prepare-data itself (its ``main``, in this measuring process), its phases stamped:
    reading the text, the sentencepiece model, encoding, and binarizing each pair."""
    import hltmt_plugin.cli.prepare_data as pd

    record = {"start": stamp()}
    for name in ("load_data", "sentencepiece_model", "encode_splits", "binarize"):
        timed(pd, name, record, name)
    cmd = prepare_command(spec["raw"], spec["out"], spec["langs"], vocab=spec["vocab"], options=["--workers", "1"])
    if pd.main(cmd[3:]) != 0:
        raise ScaleError(f"hltmt-prepare-data failed for K={len(spec['langs'])}")
    record["end"] = stamp()
    spans = {key: add_spans(*(span(a, b) for a, b in record[key])) for key in record if key not in ("start", "end")}
    return {"total": span(record["start"], record["end"]), **spans}


def comparison(spec):
    """The recipe's comparison of a K's data: every direction of its languages, on the CPU."""
    langs = spec["langs"]
    return Comparison(spec["data"], langs, directions(langs), high_and_pool(langs)[0])


def training_args(spec, system, save_dir):
    """fairseq-train's options (after the program) of one system: the recipe's, HLT-MT in stage
    high with every language but the high-resource ones a pivot (so that all 2K directions
    train from the start), hard routing at every update, and its adapters or skills; a run of
    ``spec["updates"]`` updates into ``save_dir``, a JSON progress line each, no validation."""
    langs = spec["langs"]
    high, pool = high_and_pool(langs)
    hyper = Hyper(lr=LR, max_tokens=spec["max_tokens"])
    own = ["--sampling-method", "concat", "--seed", "1"]  # fairseq's own order of the data (no temperature)
    if system != "mnmt":
        pivots = ["en"] + [x for x in langs if x not in high]
        own += ["--enable-lang-ids", "--pivot-langs", ",".join(pivots), "--slp-hard-prob", "1"]
        own += {"hltmt": [], "hltmt+adapters": ADAPTERS, "hltmt+skills": SKILLS}[system]
    name = "mnmt" if system == "mnmt" else "hltmt"
    own += ["--log-format", "json", "--disable-validation"]
    return comparison(spec).train_args(
        name, hyper, seed=1, updates=spec["updates"], save_dir=save_dir, log_interval=1, options=own, pool=pool
    )


def child_train(spec):
    """fairseq-train itself, with its steps timed (:func:`timing.run_fairseq_train`)."""
    return run_fairseq_train(spec["argv"])


def child_speed(spec):
    """Training words/s of the systems on the same mixed-direction batches (bench.py's step)."""
    import torch

    from bench_speed import time_training
    from bench_systems import batches, build

    torch.manual_seed(1)
    langs = spec["langs"]
    high, pool = high_and_pool(langs)
    ns = argparse.Namespace(
        data=spec["data"],
        langs=",".join(langs),
        high=",".join(high),
        pool_size=pool,
        size="tiny",
        max_tokens=spec["max_tokens"],
        device="cpu",
        dtype="fp32",
        rounds=spec["rounds"],
        clock="cpu",
    )
    systems, build_s = {}, {}
    for name in spec["systems"]:
        t = stamp()
        systems[name] = build(ns, BENCH_NAME[name])
        build_s[name] = span(t, stamp())
    first = systems["hltmt"] if "hltmt" in systems else next(iter(systems.values()))
    samples = batches(ns, first["task"], spec["batches"])
    rates, work = time_training(ns, {BENCH_NAME[n]: s for n, s in systems.items()}, samples)
    words = sum(int(s["ntokens"]) for s in samples)
    return {
        "build_s": build_s,
        "words": words,
        "batches": len(samples),
        "sentences": sum(len(s["id"]) for s in samples),
        "rates": {n: rates[BENCH_NAME[n]] for n in systems},
        "flops": {n: work[BENCH_NAME[n]] for n in systems},
        "params": {n: sum(p.numel() for p in s["model"].parameters()) for n, s in systems.items()},
        "threads": torch.get_num_threads(),
    }


CHILDREN = {"prepare": child_prepare, "train": child_train, "speed": child_speed}


def run_measure(kind, spec, timeout, show=False):
    """Run one measure in a fork of this process (which imported torch, fairseq and the plugin
    once: see ``import_everything``), so that each measure starts from the same clean state
    and its memory and caches end with it; its result (a dict) and its wall time. Its output
    and its result go through unnamed temporary files, and whatever it puts in the temporary
    folder (which ``os._exit`` does not clean) goes into one removed after it: nothing is left
    behind."""
    with (
        tempfile.TemporaryFile("w+") as log,
        tempfile.TemporaryFile("w+") as out,
        tempfile.TemporaryDirectory(prefix="hltmt-measure-") as scratch,
    ):
        sys.stdout.flush()
        sys.stderr.flush()
        start = time.time()
        pid = os.fork()
        if pid == 0:  # the measure
            code = 1
            try:
                tempfile.tempdir = os.environ["TMPDIR"] = scratch
                os.dup2(log.fileno(), 2)
                sys.stderr = log
                if not show:
                    os.dup2(log.fileno(), 1)
                    sys.stdout = log
                out.write(json.dumps(CHILDREN[kind](dict(spec, parent_start=start))))
                out.flush()
                code = 0
            except BaseException:  # noqa: B902 - reported by the parent with the log's tail
                traceback.print_exc(file=log)
            finally:
                sys.stdout.flush()
                log.flush()
                os._exit(code)
        code = wait_for(pid, start + timeout, kind)
        if code != 0:
            log.seek(0)
            raise ScaleError(f"the {kind} measure failed (exit {code}):\n{log.read()[-3000:]}")
        out.seek(0)
        result = records.parse_json(out.read(), f"the result of the {kind} measure")
    result["wall_s"] = time.time() - start
    return result


def wait_for(pid, deadline, kind):
    """The exit code of the child ``pid``; killed (a ScaleError) when it runs past ``deadline``."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.time() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise ScaleError(f"the {kind} measure ran past --timeout")
        time.sleep(0.02)


def import_everything():
    """Import what every measure needs, once (the time every process start pays before any
    work; it does not depend on K): a span (wall, CPU)."""
    t = stamp()
    import torch

    torch.set_num_threads(1)
    import fairseq_cli.preprocess  # noqa: F401
    import fairseq_cli.train  # noqa: F401
    import sentencepiece  # noqa: F401

    import bench_speed  # noqa: F401
    import hltmt_plugin  # noqa: F401
    import hltmt_plugin.cli.prepare_data  # noqa: F401

    return span(t, stamp())
