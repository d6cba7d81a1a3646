#!/usr/bin/env python3
"""How the cost of multilingual training grows with the number of languages (docs/benchmarks.md).

    python scripts/scale_bench.py --work runs/scale --json docs/scale.json --png docs/scale.png

For each K of --ks an English-centric corpus of K languages (2K directions) from DebMT-10's
real text (scale_corpus.py: the ten languages, then pseudo-languages with their own lines and
tokens), then, each in a process of its own (scale_children.py), with the tiny models:
hltmt-prepare-data phase by phase; fairseq-train from process start to the first update (task
set-up, data loading, model build, first update) and its checkpoint's size; training words/s of
the systems on the same mixed-direction batches, interleaved, with their arithmetic. Each
figure against K and as its ratio to K = 10 (scale_table.py). A benchmark measures; nothing
here passes or fails.

Times "from process start" add the imports every process pays (``args.import_span``,
measured once by :func:`scale_children.import_everything`) to the time after them.
"""

import argparse
import json
import os
import sys
import time

from hltmt_plugin.atomic_files import fresh_folder, write_text
from hltmt_plugin.errors import HltmtError
from scale_children import SYSTEMS, import_everything, run_measure, training_args
from scale_corpus import ROOT, ScaleError, check_fits, write_corpus
from scale_table import markdown, plot, reference_k, rows_of
from timing import HelpFormatter, add_spans, below, span

# the corpus: scale_corpus.py; the measures run in their own processes: scale_children.py;
# the table and the chart: scale_table.py
KIND = "scale_bench"  # the writer named in the marker of the folders it makes (and alone removes)


def build_parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--ks", default="10,25,50,100,200", help="numbers of languages besides English")
    p.add_argument("--lines", type=int, default=100, help="training lines per pair (the same for every K)")
    p.add_argument("--eval-lines", type=int, default=5, help="valid and test lines per pair")
    p.add_argument(
        "--vocab-size",
        type=int,
        default=2000,
        help="joint sentencepiece vocabulary (small enough that every K reaches it: the models of all K "
        "then differ only by their language tokens and language-specific modules)",
    )
    p.add_argument("--systems", default=",".join(SYSTEMS), help="systems timed")
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--updates", type=int, default=3, help="fairseq-train updates per start-up measure")
    p.add_argument("--batches", type=int, default=8, help="training batches per round (words/s)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (words/s)")
    p.add_argument("--work", default=os.path.join(ROOT, "runs", "scale"), help="working folder (corpora, data)")
    p.add_argument("--keep", action="store_true", help="keep each K's corpus and data in --work")
    p.add_argument("--timeout", type=int, default=3600, help="seconds allowed to each measure's process")
    p.add_argument("--json", default=None, help="also write every figure here")
    p.add_argument("--png", default=None, help="also draw the ratios to K=10 here")
    return p


def int_list(value, name):
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise ScaleError(f"{name} takes comma-separated whole numbers, got {value!r}") from None
    return out


def check_options(args):
    """Check the options (and that every corpus fits in DebMT-10) before anything runs: raises
    ScaleError (or OSError); sorts --ks and turns --ks and --systems into lists."""
    args.ks = int_list(args.ks, "--ks")
    if not args.ks or any(k < 1 for k in args.ks):
        raise ScaleError(f"--ks must list numbers of languages >= 1, got {args.ks}")
    if len(set(args.ks)) != len(args.ks):
        raise ScaleError(f"--ks lists a K twice: {args.ks}")
    args.ks = sorted(args.ks)
    names = (
        "lines",
        "eval_lines",
        "vocab_size",
        "max_tokens",
        "updates",
        "batches",
        "rounds",
        "timeout",
    )
    if below(args, names):
        raise ScaleError(below(args, names))
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in args.systems if s not in SYSTEMS]
    if unknown or "mnmt" not in args.systems:
        raise ScaleError(
            f"--systems: choose from {','.join(SYSTEMS)} (mnmt, the reference, included); got {','.join(args.systems)}"
        )
    args.systems = [s for s in SYSTEMS if s in args.systems]
    check_fits(args.ks, args.lines, args.eval_lines)
    os.makedirs(args.work, exist_ok=True)
    if not os.access(args.work, os.W_OK):
        raise ScaleError(f"--work {args.work} is not writable")
    for path in (args.json, args.png):
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise ScaleError(f"{path}: its folder does not exist")


def log(msg):
    print(f"[scale_bench] {msg}", flush=True)


def measure_k(args, k, work):
    """Every measure at one K (a folder of its own under ``work``, emptied at the end unless
    --keep); returns a dict of figures."""
    kdir = fresh_folder(os.path.join(work, f"k{k:03d}"), KIND)
    raw = os.path.join(kdir, "raw")
    langs = write_corpus(k, args.lines, args.eval_lines, raw)
    res = {"k": k, "langs": len(langs), "directions": 2 * k, "load_start": os.getloadavg()[0]}
    spec = {"langs": langs, "max_tokens": args.max_tokens, "data": os.path.join(kdir, "prep", "bin")}
    log(f"K={k}: hltmt-prepare-data ({k} pairs)")
    prep = run_measure(
        "prepare",
        {"langs": langs, "raw": raw, "out": os.path.join(kdir, "prep"), "vocab": args.vocab_size},
        args.timeout,
    )
    res["prepare"] = {**prep, "total": add_spans(args.import_span, prep["total"]), "imports": args.import_span}
    with open(os.path.join(spec["data"], "dict.en.txt"), encoding="utf-8") as f:
        res["dictionary"] = sum(1 for _ in f)
    res["train"], res["checkpoint_mib"] = measure_startup(args, k, kdir, spec)
    log(
        f"K={k}: training words/s, {', '.join(args.systems)} interleaved ({args.rounds} rounds of {args.batches} batches)"
    )
    speed = dict(spec, systems=args.systems, batches=args.batches, rounds=args.rounds)
    res["speed"] = run_measure("speed", speed, args.timeout, show=True)
    res["load_end"] = os.getloadavg()[0]
    if not args.keep:
        fresh_folder(kdir, KIND)
    return res


def measure_startup(args, k, kdir, spec):
    """fairseq-train of every system, one after another (CPU time: the others' load hardly counts);
    returns (train figures, checkpoint MiB), each by system."""
    train, checkpoint_mib = {}, {}
    for system in args.systems:
        log(f"K={k}: fairseq-train, {system}")
        save = fresh_folder(os.path.join(kdir, "checkpoints"), KIND)  # one system's at a time
        argv = training_args(dict(spec, updates=args.updates), system, save)
        train[system] = summarize_train(run_measure("train", {"argv": argv}, args.timeout), args.import_span)
        checkpoint_mib[system] = os.path.getsize(os.path.join(save, "checkpoint_last.pt")) / 2**20
    return train, checkpoint_mib


def _spans(rec, key):
    return [span(a, b) for a, b in rec.get(key, [])]


def summarize_train(rec, imports):
    """fairseq-train's time line: imports (measured once), its own option handling, task
    set-up, model build, trainer (criterion, Trainer, checkpoint look-up), train data + batch
    iterator, the wait for the first batch (fairseq's --num-workers 1 starts a loader
    process), the first update (which builds the optimizer); each a (wall, CPU) span."""
    start = rec["start"]
    setup, build, itr, step0 = (rec[k][0] for k in ("setup_task", "build_model", "get_train_iterator", "train_step"))
    later = _spans(rec, "train_step")[1:] or _spans(rec, "train_step")
    words = sum(rec["step_tokens"][1:] or rec["step_tokens"])
    return {
        "first_update": add_spans(imports, span(start, step0[1])),
        "imports": imports,
        "options": span(start, setup[0]),
        "setup_task": span(*setup),
        "build_model": span(*build),
        "trainer": span(build[1], itr[0]),
        "load_train": add_spans(*_spans(rec, "get_train_iterator")),
        "first_batch_wait": span(itr[1], step0[0]),
        "first_step": span(*step0),
        "step_words_per_cpu_s": words / add_spans(*later)["cpu"],
        "save": add_spans(*_spans(rec, "save_checkpoint")),
        "total": add_spans(imports, span(start, rec["end"])),
        "peak_rss_mib": rec["peak_rss_mib"],
    }


def measure_all(args):
    """measure_k at every K of --ks, in order; the list of their figures."""
    results = []
    for k in args.ks:
        t = time.time()
        results.append(measure_k(args, k, args.work))
        log(
            f"K={k} done in {time.time() - t:.0f}s (load {results[-1]['load_start']:.2f} -> "
            f"{results[-1]['load_end']:.2f})"
        )
    return results


def report(args, argv, results, t_all, torch_version):
    """Print the table and the run's summary line; write --png and --json."""
    rows = rows_of(results, args.systems)
    table = markdown(rows, results)
    print("\n" + table)
    meta = dict(ks=args.ks, lines=args.lines, eval_lines=args.eval_lines, vocab_size=args.vocab_size)
    meta.update(max_tokens=args.max_tokens, systems=args.systems, cpus=os.cpu_count(), torch=torch_version)
    meta.update(threads_per_measure=1, wall_s=time.time() - t_all, command=" ".join(["scripts/scale_bench.py", *argv]))
    print(
        f"\n(whole run {meta['wall_s']:.0f}s; load per K: "
        + ", ".join(f"K={r['k']} {r['load_start']:.2f}->{r['load_end']:.2f}" for r in results)
        + ")"
    )
    if args.png:
        plot(
            rows,
            results,
            args.png,
            f"Scale in languages: tiny models, {args.lines} lines per pair, CPU, "
            f"1 thread per process; ratio to K={reference_k(results)}",
        )
    if args.json:
        rows_out = [
            {"measure": m, "system": s, "unit": u, "values": {str(k): v for k, v in vals.items()}}
            for m, s, u, vals in rows
        ]
        write_text(args.json, json.dumps({"meta": meta, "results": results, "rows": rows_out}, indent=1), "--json")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    try:
        check_options(args)
    except (ScaleError, OSError) as error:
        print(f"scale_bench: error: {error}", file=sys.stderr)
        return 2

    t_all = time.time()
    args.import_span = import_everything()
    import torch

    log(
        f"imports (torch, fairseq, the plugin): {args.import_span['cpu']:.1f} s CPU ({args.import_span['wall']:.1f} s "
        "wall), counted in every 'from process start' figure"
    )

    log(
        f"K = {','.join(map(str, args.ks))}; {args.lines} training lines per pair; {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.2f}; torch {torch.__version__}; one OpenMP thread per measure"
    )
    try:
        results = measure_all(args)
    except (ScaleError, HltmtError) as error:  # a measure that failed; a --work folder scale_bench did not make
        print(f"scale_bench: error: {error}", file=sys.stderr)
        return 1
    report(args, argv, results, t_all, torch.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
