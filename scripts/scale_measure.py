"""Every measure of scripts/scale_bench.py at one K: the corpus and its preparation (in one
measuring process, and hltmt-prepare-data itself), data loading, fairseq-train and
fairseq-generate start-up, training words/s; and the figures each child's record gives.

Times "from process start" add the imports every process pays (``args.import_span``,
measured once by :func:`scale_children.import_everything`) to the time after them.
"""

import hashlib
import os
import shutil
import subprocess
import time

from hltmt_plugin.experiments.recipe import prepare_command
from scale_children import GEN_DIRECTION, GEN_SYSTEMS, generate_args, run_measure, training_args
from scale_corpus import ROOT, ScaleError, write_corpus
from timing import add_spans, child_env, span


def log(msg):
    print(f"[scale_bench] {msg}", flush=True)


def measure_k(args, k, work):
    """Every measure at one K (a folder of its own under ``work``); returns a dict of figures."""
    kdir = os.path.join(work, f"k{k:03d}")
    shutil.rmtree(kdir, ignore_errors=True)
    os.makedirs(kdir)
    raw = os.path.join(kdir, "raw")
    langs = write_corpus(k, args.lines, args.eval_lines, raw)
    res = {"k": k, "langs": len(langs), "directions": 2 * k, "load_start": os.getloadavg()[0]}
    spec = {"langs": langs, "max_tokens": args.max_tokens}
    res.update(measure_preparation(args, k, kdir, raw, langs))
    spec["data"] = os.path.join(kdir, "prep", "bin")
    res["data"] = measure_data(args, k, kdir, spec)
    res["train"], res["checkpoint_mib"], res["generate"] = measure_startup(args, k, kdir, spec)
    log(
        f"K={k}: training words/s, {', '.join(args.systems)} interleaved ({args.rounds} rounds of {args.batches} "
        "batches)"
    )
    res["speed"] = run_measure(
        "speed",
        dict(spec, systems=args.systems, batches=args.batches, rounds=args.rounds),
        kdir,
        args.timeout,
        show=True,
    )
    res["load_end"] = os.getloadavg()[0]
    if not args.keep:
        shutil.rmtree(kdir)
    return res


def measure_preparation(args, k, kdir, raw, langs):
    """The preparation phase by phase in one measuring process (into ``kdir/prep``), the size
    of its dictionary, and at the K of --prepare-script-ks hltmt-prepare-data itself, its
    output compared with the measuring process's."""
    log(f"K={k}: preparation in one process (sentencepiece + fairseq_cli.preprocess.main for {k} pairs)")
    prep = run_measure(
        "prepare",
        {"langs": langs, "raw": raw, "out": os.path.join(kdir, "prep"), "vocab": args.vocab_size},
        kdir,
        args.timeout,
    )
    sp = prep["spans"]
    res = {
        "prepare_one_process": {
            "total": add_spans(args.import_span, *sp.values()),
            "imports": args.import_span,
            "read": sp["read"],
            "spm": sp["spm"],
            "encode": sp["encode"],
            "binarize": sp["binarize"],
        }
    }
    data = os.path.join(kdir, "prep", "bin")
    with open(os.path.join(data, "dict.en.txt"), encoding="utf-8") as f:
        res["dictionary"] = sum(1 for _ in f)
    if k in args.prepare_script_ks:
        log(f"K={k}: hltmt-prepare-data")
        out = os.path.join(kdir, "prep-script")
        res["prepare_script"] = time_prepare_script(raw, out, langs, args.vocab_size, args.timeout)
        res["prepare_script"]["same_output"] = digest(os.path.join(out, "bin")) == digest(data)
        shutil.rmtree(out)
    return res


def measure_data(args, k, kdir, spec):
    """Data loading without a model, for plain MNMT's task and HLT-MT's."""
    out = {}
    for system in ("mnmt", "hltmt"):
        log(f"K={k}: data loading, {system}")
        out[system] = run_measure("data", dict(spec, system=system), kdir, args.timeout)
    return out


def measure_startup(args, k, kdir, spec):
    """fairseq-train of every system (and fairseq-generate of GEN_SYSTEMS from its checkpoint),
    --startup-rounds rounds with the systems interleaved, the fastest round of each kept;
    returns (train figures, checkpoint MiB, generate figures), each by system."""
    train, checkpoint_mib, generate = {}, {}, {}
    for r in range(args.startup_rounds):
        for system in args.systems:
            log(f"K={k}: fairseq-train, {system} (round {r + 1}/{args.startup_rounds})")
            save = os.path.join(kdir, f"ckpt-{system}")
            shutil.rmtree(save, ignore_errors=True)
            rec = run_measure(
                "fairseq",
                {"kind": "fairseq-train", "argv": training_args(dict(spec, updates=args.updates), system, save)},
                kdir,
                args.timeout,
            )
            keep_fastest(train, system, summarize_train(rec, args.import_span), "first_update")
            ckpt = os.path.join(save, "checkpoint_last.pt")
            checkpoint_mib[system] = os.path.getsize(ckpt) / 2**20
            if system in GEN_SYSTEMS:
                log(f"K={k}: fairseq-generate {'-'.join(GEN_DIRECTION)}, {system}")
                rec = run_measure(
                    "fairseq",
                    {"kind": "fairseq-generate", "argv": generate_args(spec, system, ckpt)},
                    kdir,
                    args.timeout,
                )
                keep_fastest(generate, system, summarize_generate(rec, args.import_span), "first_batch")
            shutil.rmtree(save)
    return train, checkpoint_mib, generate


def time_prepare_script(raw, out, langs, vocab, timeout):
    """hltmt-prepare-data itself: wall time of its phases from the times its log lines
    arrive; CPU time of the whole (it and any processes it starts)."""
    import resource

    cmd = prepare_command(raw, out, langs, vocab=vocab, options=["--workers", "1"])
    env = child_env(1)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    marks = {}
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        now = time.time()
        if "training a" in line:
            marks.setdefault("spm_start", now)
        elif "encoding" in line:
            marks.setdefault("encode_start", now)
        elif "binarizing" in line:
            marks.setdefault("binarize_start", now)
        if now - t0 > timeout:
            proc.kill()
    err = proc.stderr.read()
    if proc.wait() != 0:
        raise ScaleError(f"hltmt-prepare-data failed for K={len(langs)}:\n{err[-3000:]}")
    end = time.time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (usage.ru_utime + usage.ru_stime)
    return {
        "total": {"wall": end - t0, "cpu": cpu},
        "spm_wall_s": marks["encode_start"] - marks["spm_start"],
        "encode_wall_s": marks["binarize_start"] - marks["encode_start"],
        "binarize_wall_s": end - marks["binarize_start"],
        "before_spm_wall_s": marks["spm_start"] - t0,
    }


def digest(folder):
    """A digest of the binarized data (every .bin / .idx file, in name order)."""
    h = hashlib.sha1()
    for name in sorted(os.listdir(folder)):
        if name.endswith((".bin", ".idx")):
            h.update(name.encode())
            with open(os.path.join(folder, name), "rb") as f:
                h.update(f.read())
    return h.hexdigest()


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
