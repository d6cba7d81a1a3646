"""Every measure of scripts/scale_bench.py at one K: the corpus and hltmt-prepare-data, data
loading, fairseq-train and fairseq-generate start-up, training words/s; and the figures each
child's record gives.

Times "from process start" add the imports every process pays (``args.import_span``,
measured once by :func:`scale_children.import_everything`) to the time after them.
"""

import os

from hltmt_plugin.atomic_files import fresh_folder
from scale_children import GEN_DIRECTION, GEN_SYSTEMS, generate_args, run_measure, training_args
from scale_corpus import write_corpus
from timing import add_spans, span

KIND = "scale_bench"  # the writer named in the marker of the folders it makes (and alone removes)


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
    res["data"] = measure_data(args, k, spec)
    res["train"], res["checkpoint_mib"], res["generate"] = measure_startup(args, k, kdir, spec)
    log(
        f"K={k}: training words/s, {', '.join(args.systems)} interleaved ({args.rounds} rounds of {args.batches} batches)"
    )
    speed = dict(spec, systems=args.systems, batches=args.batches, rounds=args.rounds)
    res["speed"] = run_measure("speed", speed, args.timeout, show=True)
    res["load_end"] = os.getloadavg()[0]
    if not args.keep:
        fresh_folder(kdir, KIND)
    return res


def measure_data(args, k, spec):
    """Data loading without a model, for plain MNMT's task and HLT-MT's."""
    out = {}
    for system in ("mnmt", "hltmt"):
        log(f"K={k}: data loading, {system}")
        out[system] = run_measure("data", dict(spec, system=system), args.timeout)
    return out


def measure_startup(args, k, kdir, spec):
    """fairseq-train of every system (and fairseq-generate of GEN_SYSTEMS from its checkpoint),
    --startup-rounds rounds with the systems interleaved, the fastest round of each kept;
    returns (train figures, checkpoint MiB, generate figures), each by system."""
    train, checkpoint_mib, generate = {}, {}, {}
    for r in range(args.startup_rounds):
        for system in args.systems:
            log(f"K={k}: fairseq-train, {system} (round {r + 1}/{args.startup_rounds})")
            save = fresh_folder(os.path.join(kdir, "checkpoints"), KIND)  # one system's at a time
            argv = training_args(dict(spec, updates=args.updates), system, save)
            rec = run_measure("fairseq", {"kind": "fairseq-train", "argv": argv}, args.timeout)
            keep_fastest(train, system, summarize_train(rec, args.import_span), "first_update")
            ckpt = os.path.join(save, "checkpoint_last.pt")
            checkpoint_mib[system] = os.path.getsize(ckpt) / 2**20
            if system in GEN_SYSTEMS:
                log(f"K={k}: fairseq-generate {'-'.join(GEN_DIRECTION)}, {system}")
                argv = generate_args(spec, system, ckpt)
                rec = run_measure("fairseq", {"kind": "fairseq-generate", "argv": argv}, args.timeout)
                keep_fastest(generate, system, summarize_generate(rec, args.import_span), "first_batch")
    return train, checkpoint_mib, generate


def keep_fastest(table, system, figures, key):
    """Keep ``figures`` as ``table[system]`` unless a round with less CPU time in ``key`` is there."""
    if system not in table or figures[key]["cpu"] < table[system][key]["cpu"]:
        table[system] = figures


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


def summarize_generate(rec, imports):
    """fairseq-generate's time line: process start (imports included) to the first translated
    batch, task set-up, checkpoint load, test split load; each a (wall, CPU) span."""
    start = rec["start"]
    first = rec["inference_step"][0]
    return {
        "first_batch": add_spans(imports, span(start, first[1])),
        "imports": imports,
        "setup_task": span(*rec["setup_task"][0]),
        "load_model": span(*rec["load_model_ensemble"][0]),
        "load_test": span(*rec["load_dataset"][0]),
        "total": add_spans(imports, span(start, rec["end"])),
        "peak_rss_mib": rec["peak_rss_mib"],
    }
