#!/usr/bin/env python3
"""How the cost of multilingual training grows with the number of languages.

    python scripts/scale_bench.py --work runs/scale --json docs/scale.json --png docs/scale.png

For each K (default 10, 25, 50, 100, 200) the script builds an English-centric corpus of K
languages (2K directions, en-xx and xx-en) from the real DebMT-10 text in ``data/debmt10/``:
the ten real languages first, then *pseudo-languages*: ``fr01`` is lines N..2N-1 of en-fr,
``cs01`` those of en-cs, ..., ``gu19`` lines 19N..20N-1 of en-gu. Each pseudo-language has its
own files, its own language token ``__fr01__`` and its own lines (no line is shared with
another language), so for fairseq and the plugin it is one more language. Every pair gets
the same ``--lines`` training lines and ``--eval-lines`` valid and test lines.

Measured for each K, with the tiny architecture (``--arch transformer_hltmt_tiny`` /
``hltmt_transformer_tiny``), each in its own process so that one measure's memory and
caches do not leak into another's:

- preparation: ``hltmt-prepare-data`` itself (joint sentencepiece, encoding, fairseq's
  binarization of every pair in its one process; its phases timed from its own log lines) at
  the K of ``--prepare-script-ks``, and at every K the same steps called one by one in a
  measuring process, each phase timed (its output is compared byte for byte with the
  script's);
- data: task set-up (dictionaries and language tokens), loading the train split, and each of
  two epochs of data loading (batch iterator + every batch collated, no model), with the
  process's resident memory, for fairseq's ``translation_multi_simple_epoch`` (plain MNMT)
  and ``hltmt_translation``;
- ``fairseq-train`` itself (a few updates, ``--log-format json``): wall time from process
  start to the first update, with its parts (imports, task set-up, model build, data), and
  the size of the ``checkpoint_last.pt`` it writes, for plain MNMT, HLT-MT (T = 3, the
  first third of the languages high-resource; ``--hlt-stage high`` with every other language
  a pivot, so that all 2K directions train from scratch, hard routing every step), HLT-MT +
  MAD-X adapters for every language, and HLT-MT + skills;
- training words/s of the same four systems in one process on the same mixed-direction
  batches (from the real multilingual sampler), rounds interleaved (``scripts/bench.py``'s
  training step), with the arithmetic each does (FLOPs) and the routing groups per batch;
- ``fairseq-generate`` start-up for one direction (en-fr): wall time from process start to
  the first translated batch, and its parts.

Each figure is reported as a function of K and as its ratio to K = 10 (or the smallest K
measured); the table is printed in Markdown and written with ``--json`` / ``--png``. A
benchmark measures; nothing here passes or fails.
"""
import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import signal
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "scripts")
PLUGIN = os.path.join(ROOT, "hltmt_plugin")
DEBMT10 = os.path.join(ROOT, "data", "debmt10")
REAL = ["fr", "cs", "de", "fi", "lv", "et", "ro", "hi", "tr", "gu"]  # DebMT-10, most data first
SYSTEMS = ["mnmt", "hltmt", "hltmt+adapters", "hltmt+skills"]
BENCH_NAME = {"mnmt": "baseline", "hltmt": "hltmt", "hltmt+adapters": "hltmt+adapters",
              "hltmt+skills": "hltmt+skills"}  # scripts/bench.py's names
ADAPTERS = ["--language-adapters", "--shared-adapters", "--decoder-adapters", "--invertible-adapters"]
SKILLS = ["--skill-ffn", "--skill-attention"]
GEN_SYSTEMS = ["mnmt", "hltmt", "hltmt+adapters"]
GEN_DIRECTION = ("en", "fr")


class ScaleError(Exception):
    pass


def log(msg):
    print(f"[scale_bench] {msg}", flush=True)


# ---------------------------------------------------------------------------------------
# the corpus


def languages(k):
    """The K non-English languages: the ten real ones (fewer if K < 10), then pseudo-languages
    ``fr01``, ``cs01``, ... (slice 1 of each real language), ``fr02``, ..."""
    if k <= len(REAL):
        return REAL[:k]
    return REAL + [f"{REAL[j % len(REAL)]}{j // len(REAL):02d}" for j in range(len(REAL), k)]


def source_of(lang):
    """(real language, slice number) a language's lines come from."""
    return (lang, 0) if lang in REAL else (lang[:2], int(lang[2:]))


def high_and_pool(langs):
    """HLT-MT's high-resource languages (the first third) and pool size T = min(3, H)."""
    high = langs[: max(1, round(len(langs) / 3))]
    return high, min(3, len(high))


def _read(path, count):
    with open(path, encoding="utf-8") as f:
        return [line for _, line in zip(range(count), f)]


def write_corpus(k, lines, eval_lines, raw):
    """``{train,valid,test}.en-XX.{en,XX}`` for the K languages; each language takes its own
    slice of its real language's lines. Raises ScaleError when DebMT-10 has too few lines."""
    langs = languages(k)
    need = {"train": lines, "valid": eval_lines, "test": eval_lines}
    slices = {}
    for lang in langs:
        real, s = source_of(lang)
        slices.setdefault(real, []).append((lang, s))
    os.makedirs(raw, exist_ok=True)
    for real, members in slices.items():
        top = max(s for _, s in members) + 1
        for split, n in need.items():
            texts = {side: _read(os.path.join(DEBMT10, f"{split}.en-{real}.{side}"), top * n) for side in ("en", real)}
            have = min(len(t) for t in texts.values())
            if have < top * n:
                raise ScaleError(f"K={k} needs {top} slices of {n} {split} lines of en-{real} ({top * n} lines) but "
                                 f"DebMT-10 has {have}: lower --lines / --eval-lines or the largest K")
            for lang, s in members:
                for side, out_side in (("en", "en"), (real, lang)):
                    with open(os.path.join(raw, f"{split}.en-{lang}.{out_side}"), "w", encoding="utf-8") as f:
                        f.writelines(texts[side][s * n:(s + 1) * n])
    return langs


def pairs_of(langs):
    return [f"en-{x}" for x in langs] + [f"{x}-en" for x in langs]


# ---------------------------------------------------------------------------------------
# children: each measure runs in its own process (python scale_bench.py --child KIND ...)


def stamp():
    """(wall, CPU) time now: every span is measured in both; the table uses CPU time, which the
    load of other processes on a shared machine does not inflate (each measure runs one
    thread), and the JSON keeps the wall time too."""
    return time.time(), time.process_time()


def span(a, b):
    return {"wall": b[0] - a[0], "cpu": b[1] - a[1]}


def rss_mib():
    """(current, peak) resident memory of this process in MiB."""
    cur = peak = 0.0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                cur = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    return cur, peak


def child_prepare(spec):
    """The preparation of hltmt-prepare-data in one interpreter: the same reading,
    sentencepiece model, encoding, and fairseq_cli.preprocess.main once per pair."""
    t = {"start": stamp()}
    import hltmt_plugin.cli.prepare_data as pd
    import fairseq_cli.preprocess  # noqa: F401 (imports timed here, not in the binarization)

    t["imports"] = stamp()
    langs, raw, out = spec["langs"], spec["raw"], spec["out"]
    data = {(s, lang): pd.load_pair(raw, s, lang, None) for s in pd.SPLITS for lang in langs}
    for lang in langs:
        en, xx, _ = pd.drop_unusable(*data[("train", lang)], 250)
        data[("train", lang)] = (en, xx)
    t["read"] = stamp()
    spm_dir, bin_dir = os.path.join(out, "spm"), os.path.join(out, "bin")
    os.makedirs(spm_dir, exist_ok=True)
    texts = [x for lang in langs for side in data[("train", lang)] for x in side]
    sp = pd.train_spm(texts, os.path.join(spm_dir, "spm"), spec["vocab"], 1)
    pd.write_dict(sp, os.path.join(spm_dir, "dict.txt"))
    t["spm"] = stamp()
    for (split, lang), (en, xx) in data.items():
        for side, lines in (("en", en), (lang, xx)):
            with open(os.path.join(spm_dir, f"{split}.en-{lang}.{side}"), "w", encoding="utf-8") as f:
                f.writelines(" ".join(p) + "\n" for p in sp.encode(lines, out_type=str))
    t["encode"] = stamp()
    for lang in langs:
        pd.binarize(spm_dir, bin_dir, lang, 1)
    for lang in ["en"] + langs:
        shutil.copy(os.path.join(spm_dir, "dict.txt"), os.path.join(bin_dir, f"dict.{lang}.txt"))
    with open(os.path.join(bin_dir, "langs.txt"), "w") as f:
        f.write("\n".join(["en"] + langs) + "\n")
    pd.write_fingerprint(bin_dir)  # what hltmt-prepare-data writes besides the data
    t["binarize"] = stamp()
    keys = list(t)
    return {"spans": {k: span(t[p], t[k]) for p, k in zip(keys, keys[1:])}}


def _training_args(spec, system, save_dir=None):
    """fairseq-train options of one system (see the module doc)."""
    langs = spec["langs"]
    high, pool = high_and_pool(langs)
    cli = [spec["data"], "--user-dir", PLUGIN, "--langs", ",".join(["en"] + langs),
           "--lang-pairs", ",".join(pairs_of(langs)), "--encoder-langtok", "tgt", "--max-tokens",
           str(spec["max_tokens"]), "--optimizer", "adam", "--lr", "1e-4", "--dropout", "0.1", "--seed", "1", "--cpu",
           "--label-smoothing", "0.1"]
    if system == "mnmt":
        cli += ["--task", "translation_multi_simple_epoch", "--arch", "transformer_hltmt_tiny",
                "--criterion", "label_smoothed_cross_entropy"]
    else:
        low = [x for x in langs if x not in high]
        cli += ["--task", "hltmt_translation", "--arch", "hltmt_transformer_tiny", "--criterion", "hltmt_cross_entropy",
                "--enable-lang-ids", "--high-resource-langs", ",".join(high), "--slp-pool-size", str(pool),
                "--hlt-stage", "high", "--pivot-langs", ",".join(["en"] + low), "--slp-hard-prob", "1"]
        cli += {"hltmt": [], "hltmt+adapters": ADAPTERS, "hltmt+skills": SKILLS}[system]
    if save_dir:
        cli += ["--save-dir", save_dir, "--max-update", str(spec["updates"]), "--log-format", "json",
                "--log-interval", "1", "--no-epoch-checkpoints", "--disable-validation"]
    return cli


def child_data(spec):
    """Task set-up, train split and two epochs of batches (no model), with resident memory."""
    from fairseq import options, tasks

    out = {"rss_mib": {"start": rss_mib()[0]}}
    args = options.parse_args_and_arch(options.get_training_parser(), _training_args(spec, spec["system"]))
    for name in ("max_source_positions", "max_target_positions"):  # what building the model sets in fairseq-train
        if getattr(args, name, None) is None:
            setattr(args, name, 1024)
    t = stamp()
    task = tasks.setup_task(args)
    out["setup_task"] = span(t, stamp())
    out["rss_mib"]["setup_task"] = rss_mib()[0]
    t = stamp()
    task.load_dataset("train", epoch=1)
    out["load_train"] = span(t, stamp())
    out["rss_mib"]["load_train"] = rss_mib()[0]
    out["epochs"] = []
    for epoch in (1, 2):
        t = stamp()
        itr = task.get_batch_iterator(dataset=task.dataset("train"), max_tokens=spec["max_tokens"],
                                      max_positions=(1024, 1024), ignore_invalid_inputs=True,
                                      required_batch_size_multiple=8, seed=1, epoch=epoch, num_workers=0)
        batches = itr.next_epoch_itr(shuffle=True)
        made = span(t, stamp())
        n = tokens = 0
        for sample in batches:
            n += 1
            tokens += int(sample["ntokens"])
        out["epochs"].append({"iterator": made, "total": span(t, stamp()), "batches": n, "tokens": tokens,
                              "rss_mib": rss_mib()[0]})
    out["peak_rss_mib"] = rss_mib()[1]
    return out


def _timed(owner, name, record, key):
    """Wrap owner.name so that each call's (start, end) stamps are appended to record[key]."""
    inner = getattr(owner, name)

    def wrapper(*args, **kwargs):
        start = stamp()
        try:
            return inner(*args, **kwargs)
        finally:
            record.setdefault(key, []).append((start, stamp()))

    setattr(owner, name, wrapper)
    return wrapper


def child_fairseq(spec):
    """fairseq-train or fairseq-generate itself (fairseq_cli's cli_main), with its steps timed."""
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
        _timed(task, "load_dataset", record, "load_dataset")
        _timed(task, "build_model", record, "build_model")
        _timed(task, "inference_step", record, "inference_step")
        return task

    ft.setup_task = setup_task
    tokens = record.setdefault("step_tokens", [])
    train_step = Trainer.train_step

    def step(self, samples, *args, **kwargs):
        tokens.append(sum(int(s.get("ntokens", 0)) for s in samples if s))
        return train_step(self, samples, *args, **kwargs)

    Trainer.train_step = step
    _timed(Trainer, "train_step", record, "train_step")
    _timed(Trainer, "get_train_iterator", record, "get_train_iterator")
    _timed(cu, "save_checkpoint", record, "save_checkpoint")
    _timed(cu, "load_model_ensemble", record, "load_model_ensemble")
    sys.argv = [spec["kind"]] + spec["argv"]
    if spec["kind"] == "fairseq-train":
        from fairseq_cli.train import cli_main
    else:
        from fairseq_cli.generate import cli_main
    cli_main()
    record["end"] = stamp()
    record["peak_rss_mib"] = rss_mib()[1]
    return record


def child_speed(spec):
    """Training words/s of the systems on the same mixed-direction batches (bench.py's step)."""
    import torch

    sys.path.insert(0, SCRIPTS)
    import bench

    torch.manual_seed(1)
    langs = spec["langs"]
    high, pool = high_and_pool(langs)
    ns = argparse.Namespace(data=spec["data"], langs=",".join(langs), high=",".join(high), pool_size=pool,
                            size="tiny", max_tokens=spec["max_tokens"], device="cpu", dtype="fp32",
                            rounds=spec["rounds"], clock="cpu")
    systems, build_s = {}, {}
    for name in spec["systems"]:
        t = stamp()
        systems[name] = bench.build(ns, BENCH_NAME[name])
        build_s[name] = span(t, stamp())
    first = systems["hltmt"] if "hltmt" in systems else next(iter(systems.values()))
    samples = bench.batches(ns, first["task"], spec["batches"])
    # routing groups per batch: distinct source languages, target languages, directions (the
    # target language from the __xx__ token --encoder-langtok tgt puts first, the source from
    # --enable-lang-ids)
    task = first["task"]
    pad, lang_dict = task.source_dictionary.pad(), task.data_manager.lang_dict
    groups = []
    for s in samples:
        src_tokens = s["net_input"]["src_tokens"]
        first_tok = src_tokens.gather(1, src_tokens.ne(pad).long().argmax(dim=1, keepdim=True)).view(-1)
        tgt = [task.source_dictionary[int(t)] for t in first_tok]
        src = [lang_dict[int(i)] for i in s["net_input"]["src_lang_id"].view(-1)]
        groups.append({"rows": len(tgt), "src": len(set(src)), "tgt": len(set(tgt)),
                       "directions": len(set(zip(src, tgt)))})
    rates, work = bench.time_training(ns, {BENCH_NAME[n]: s for n, s in systems.items()}, samples)
    words = sum(int(s["ntokens"]) for s in samples)
    # the cost of the routing groups, arithmetic held equal: the same batches with every row
    # relabelled to one direction (one group in every routed layer), interleaved with the real ones
    single = [one_group(s, task, "en", langs[0]) for s in samples]
    grouping = {n: bench.time_pair(ns, s, samples, single) for n, s in systems.items()}
    return {"build_s": build_s, "words": words, "batches": len(samples), "grouping": grouping,
            "rates": {n: rates[BENCH_NAME[n]] for n in systems},
            "flops": {n: work[BENCH_NAME[n]] for n in systems},
            "params": {n: sum(p.numel() for p in s["model"].parameters()) for n, s in systems.items()},
            "groups": groups, "threads": torch.get_num_threads()}


def one_group(sample, task, src_lang, tgt_lang):
    """The sample with every row relabelled to one direction: the same tokens, so the same
    arithmetic, but one routing group in every routed layer."""
    import torch

    net = dict(sample["net_input"])
    src = net["src_tokens"].clone()
    first = src.ne(task.source_dictionary.pad()).long().argmax(dim=1)
    src[torch.arange(src.size(0)), first] = task.data_manager.get_encoder_langtok(src_lang, tgt_lang, "tgt")
    net["src_tokens"] = src
    for key, lang in (("src_lang_id", src_lang), ("tgt_lang_id", tgt_lang)):
        if key in net:
            net[key] = torch.full_like(net[key], task.data_manager.lang_dict.index(lang))
    return dict(sample, net_input=net)


CHILDREN = {"prepare": child_prepare, "data": child_data, "fairseq": child_fairseq, "speed": child_speed}


def run_measure(kind, spec, work, timeout, show=False):
    """Run one measure in a fork of this process (which imported torch, fairseq and the plugin
    once: see ``import_everything``), so that each measure starts from the same clean state
    and its memory and caches end with it; returns its result (a dict) and its wall time."""
    fd, result_path = tempfile.mkstemp(suffix=".json", dir=work)
    os.close(fd)
    log_path = result_path[:-5] + ".log"
    sys.stdout.flush()
    sys.stderr.flush()
    start = time.time()
    pid = os.fork()
    if pid == 0:  # the measure
        code = 1
        try:
            out = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            if not show:
                os.dup2(out, 1)
            os.dup2(out, 2)
            result = CHILDREN[kind](dict(spec, parent_start=start))
            with open(result_path, "w") as f:
                json.dump(result, f)
            code = 0
        except BaseException:  # noqa: B902 - reported by the parent with the log's tail
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.time() - start > timeout:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise ScaleError(f"the {kind} measure ran past --timeout {timeout}s")
            time.sleep(0.02)
        wall = time.time() - start
        if os.waitstatus_to_exitcode(status) != 0:
            with open(log_path, errors="replace") as f:
                tail = f.read()[-3000:]
            raise ScaleError(f"the {kind} measure failed (exit {os.waitstatus_to_exitcode(status)}):\n{tail}")
        with open(result_path) as f:
            result = json.load(f)
    finally:
        for path in (result_path, log_path):
            if os.path.exists(path):
                os.remove(path)
    result["wall_s"] = wall
    return result


def import_everything():
    """Import what every measure needs, once (the time every process start pays before any
    work; it does not depend on K): a span (wall, CPU)."""
    t = stamp()
    import torch

    torch.set_num_threads(1)
    import fairseq_cli.generate  # noqa: F401
    import fairseq_cli.preprocess  # noqa: F401
    import fairseq_cli.train  # noqa: F401
    import sentencepiece  # noqa: F401

    import hltmt_plugin  # noqa: F401

    sys.path.insert(0, SCRIPTS)
    import bench  # noqa: F401
    import hltmt_plugin.cli.prepare_data  # noqa: F401

    return span(t, stamp())


# ---------------------------------------------------------------------------------------
# the measures of one K


def time_prepare_script(raw, out, langs, vocab, timeout):
    """hltmt-prepare-data itself: wall time of its phases from the times its log lines
    arrive; CPU time of the whole (it and any processes it starts)."""
    import resource

    cmd = [sys.executable, "-m", "hltmt_plugin.cli.prepare_data", "--raw", raw, "--out", out, "--langs",
           ",".join(langs), "--vocab-size", str(vocab), "--workers", "1"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
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
    return {"total": {"wall": end - t0, "cpu": cpu},
            "spm_wall_s": marks["encode_start"] - marks["spm_start"],
            "encode_wall_s": marks["binarize_start"] - marks["encode_start"],
            "binarize_wall_s": end - marks["binarize_start"], "before_spm_wall_s": marks["spm_start"] - t0}


def digest(folder):
    """A digest of the binarized data (every .bin / .idx file, in name order)."""
    h = hashlib.sha1()
    for name in sorted(os.listdir(folder)):
        if name.endswith((".bin", ".idx")):
            h.update(name.encode())
            with open(os.path.join(folder, name), "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def measure_k(args, k, work):
    """Every measure at one K; returns a dict of figures. Times "from process start" add the
    imports every process pays (``args.import_span``, measured once) to the time after them."""
    kdir = os.path.join(work, f"k{k:03d}")
    shutil.rmtree(kdir, ignore_errors=True)
    os.makedirs(kdir)
    raw = os.path.join(kdir, "raw")
    langs = write_corpus(k, args.lines, args.eval_lines, raw)
    res = {"k": k, "langs": len(langs), "directions": 2 * k, "load_start": os.getloadavg()[0]}
    spec = {"langs": langs, "max_tokens": args.max_tokens}

    log(f"K={k}: preparation in one process (sentencepiece + fairseq_cli.preprocess.main for {k} pairs)")
    prep = run_measure("prepare", {"langs": langs, "raw": raw, "out": os.path.join(kdir, "prep"),
                                   "vocab": args.vocab_size}, kdir, args.timeout)
    sp = prep["spans"]
    res["prepare_one_process"] = {"total": add(args.import_span, *sp.values()), "imports": args.import_span,
                                  "read": sp["read"], "spm": sp["spm"], "encode": sp["encode"],
                                  "binarize": sp["binarize"]}
    data = os.path.join(kdir, "prep", "bin")
    with open(os.path.join(data, "dict.en.txt"), encoding="utf-8") as f:
        res["dictionary"] = sum(1 for _ in f)
    if k in args.prepare_script_ks:
        log(f"K={k}: hltmt-prepare-data")
        out = os.path.join(kdir, "prep-script")
        res["prepare_script"] = time_prepare_script(raw, out, langs, args.vocab_size, args.timeout)
        res["prepare_script"]["same_output"] = digest(os.path.join(out, "bin")) == digest(data)
        shutil.rmtree(out)
    spec["data"] = data

    res["data"] = {}
    for system in ("mnmt", "hltmt"):
        log(f"K={k}: data loading, {system}")
        res["data"][system] = run_measure("data", dict(spec, system=system), kdir, args.timeout)

    res["train"], res["checkpoint_mib"], res["generate"] = {}, {}, {}
    for r in range(args.startup_rounds):  # systems interleaved; the fastest round of each is kept
        for system in args.systems:
            log(f"K={k}: fairseq-train, {system} (round {r + 1}/{args.startup_rounds})")
            save = os.path.join(kdir, f"ckpt-{system}")
            shutil.rmtree(save, ignore_errors=True)
            rec = run_measure("fairseq", {"kind": "fairseq-train", "argv": _training_args(
                dict(spec, updates=args.updates), system, save)}, kdir, args.timeout)
            keep_fastest(res["train"], system, summarize_train(rec, args.import_span), "first_update")
            ckpt = os.path.join(save, "checkpoint_last.pt")
            res["checkpoint_mib"][system] = os.path.getsize(ckpt) / 2 ** 20
            if system in GEN_SYSTEMS:
                log(f"K={k}: fairseq-generate {'-'.join(GEN_DIRECTION)}, {system}")
                rec = run_measure("fairseq", {"kind": "fairseq-generate", "argv": generate_args(spec, system, ckpt)},
                                  kdir, args.timeout)
                keep_fastest(res["generate"], system, summarize_generate(rec, args.import_span), "first_batch")
            shutil.rmtree(save)

    log(f"K={k}: training words/s, {', '.join(args.systems)} interleaved ({args.rounds} rounds of {args.batches} "
        "batches)")
    res["speed"] = run_measure("speed", dict(spec, systems=args.systems, batches=args.batches, rounds=args.rounds),
                               kdir, args.timeout, show=True)
    res["load_end"] = os.getloadavg()[0]
    if not args.keep:
        shutil.rmtree(kdir)
    return res


def keep_fastest(table, system, figures, key):
    if system not in table or figures[key]["cpu"] < table[system][key]["cpu"]:
        table[system] = figures


def add(*spans):
    return {"wall": sum(x["wall"] for x in spans), "cpu": sum(x["cpu"] for x in spans)}


def generate_args(spec, system, ckpt):
    src, tgt = GEN_DIRECTION
    cli = [spec["data"], "--user-dir", PLUGIN, "--langs", ",".join(["en"] + spec["langs"]),
           "--lang-pairs", f"{src}-{tgt}", "--encoder-langtok", "tgt", "-s", src, "-t", tgt, "--path", ckpt,
           "--gen-subset", "test", "--beam", "5", "--max-len-b", "20", "--batch-size", "16", "--cpu",
           "--required-batch-size-multiple", "1"]  # fairseq 0.12 drops a last partial batch otherwise
    if system == "mnmt":
        return cli + ["--task", "translation_multi_simple_epoch"]
    return cli + ["--task", "hltmt_translation", "--enable-lang-ids"]


def _span(rec, key, i=0):
    s, e = rec[key][i]
    return e - s


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
    return {"first_update": add(imports, span(start, step0[1])), "imports": imports,
            "options": span(start, setup[0]), "setup_task": span(*setup), "build_model": span(*build),
            "trainer": span(build[1], itr[0]), "load_train": add(*_spans(rec, "get_train_iterator")),
            "first_batch_wait": span(itr[1], step0[0]), "first_step": span(*step0),
            "step_words_per_cpu_s": words / add(*later)["cpu"], "save": add(*_spans(rec, "save_checkpoint")),
            "total": add(imports, span(start, rec["end"])), "peak_rss_mib": rec["peak_rss_mib"]}


def summarize_generate(rec, imports):
    start = rec["start"]
    first = rec["inference_step"][0]
    return {"first_batch": add(imports, span(start, first[1])), "imports": imports,
            "setup_task": span(*rec["setup_task"][0]), "load_model": span(*rec["load_model_ensemble"][0]),
            "load_test": span(*rec["load_dataset"][0]), "total": add(imports, span(start, rec["end"])),
            "peak_rss_mib": rec["peak_rss_mib"]}


# ---------------------------------------------------------------------------------------
# the table


def data_cpu(r, system):
    """CPU seconds of task set-up, loading the train split and the first epoch of batches."""
    d = r["data"][system]
    return d["setup_task"]["cpu"] + d["load_train"]["cpu"] + d["epochs"][0]["total"]["cpu"]


def rows_of(results, systems):
    """(measure, system, unit, {K: value}) for every figure; times in CPU seconds (see stamp)."""
    out = []

    def row(measure, system, unit, get):
        values = {}
        for r in results:
            try:
                values[r["k"]] = get(r)
            except (KeyError, IndexError, TypeError, ZeroDivisionError):
                pass
        if values:
            out.append((measure, system, unit, values))

    cpu = "CPU s"
    row("pieces in the joint dictionary (before language tokens)", "", "", lambda r: r["dictionary"])
    row("hltmt-prepare-data", "", cpu, lambda r: r["prepare_script"]["total"]["cpu"])
    row("  the same, wall time", "", "s", lambda r: r["prepare_script"]["total"]["wall"])
    row("  of which binarization (wall)", "", "s", lambda r: r["prepare_script"]["binarize_wall_s"])
    row("preparation, phase by phase", "", cpu, lambda r: r["prepare_one_process"]["total"]["cpu"])
    row("  of which sentencepiece training", "", cpu, lambda r: r["prepare_one_process"]["spm"]["cpu"])
    row("  of which binarization (fairseq_cli.preprocess.main per pair)", "", cpu,
        lambda r: r["prepare_one_process"]["binarize"]["cpu"])
    for system in ("mnmt", "hltmt"):
        d = lambda r, s=system: r["data"][s]  # noqa: E731
        row("task set-up (dictionaries, language tokens)", system, cpu, lambda r, d=d: d(r)["setup_task"]["cpu"])
        row("load train split (2K pair datasets)", system, cpu, lambda r, d=d: d(r)["load_train"]["cpu"])
        row("data loading, epoch 1 (batch iterator + collate all)", system, cpu,
            lambda r, d=d: d(r)["epochs"][0]["total"]["cpu"])
        row("data loading, epoch 2", system, cpu, lambda r, d=d: d(r)["epochs"][1]["total"]["cpu"])
        row("resident memory after 2 epochs of data", system, "MiB", lambda r, d=d: d(r)["epochs"][1]["rss_mib"])
    row("  HLT-MT / plain MNMT: task set-up + train split + epoch 1", "hltmt", "x",
        lambda r: data_cpu(r, "hltmt") / data_cpu(r, "mnmt"))
    for system in systems:
        t = lambda r, s=system: r["train"][s]  # noqa: E731
        row("fairseq-train: process start to first update", system, cpu, lambda r, t=t: t(r)["first_update"]["cpu"])
        row("  after the imports: task set-up", system, cpu, lambda r, t=t: t(r)["setup_task"]["cpu"])
        row("  model build", system, cpu, lambda r, t=t: t(r)["build_model"]["cpu"])
        row("  train data + batch iterator", system, cpu, lambda r, t=t: t(r)["load_train"]["cpu"])
        row("  first update (builds the optimizer)", system, cpu, lambda r, t=t: t(r)["first_step"]["cpu"])
        row("  checkpoint save", system, cpu, lambda r, t=t: t(r)["save"]["cpu"])
    for system in systems:
        if system != "mnmt":
            row("  start-up to first update, ratio to plain MNMT", system, "x",
                lambda r, s=system: r["train"][s]["first_update"]["cpu"] / r["train"]["mnmt"]["first_update"]["cpu"])
    med = lambda r, s: statistics.median(r["speed"]["rates"][s])  # noqa: E731
    for system in systems:
        row("training words per CPU-second (same batches, interleaved)", system, "words/s",
            lambda r, s=system: med(r, s))
    for system in systems:
        if system != "mnmt":
            row("  time ratio to plain MNMT at this K", system, "x", lambda r, s=system: med(r, "mnmt") / med(r, s))
            row("  predicted (arithmetic) ratio to plain MNMT", system, "x",
                lambda r, s=system: r["speed"]["flops"][s] / r["speed"]["flops"]["mnmt"])
    for system in systems:
        row("  the same batches, every row relabelled to one direction: time ratio mixed / one direction", system,
            "x", lambda r, s=system: r["speed"]["grouping"][s]["single"] / r["speed"]["grouping"][s]["mixed"])
    row("target words per batch", "", "", lambda r: r["speed"]["words"] / r["speed"]["batches"])
    row("sentences per batch", "", "", lambda r: statistics.mean(g["rows"] for g in r["speed"]["groups"]))
    row("routing groups per batch: source languages", "", "", lambda r: statistics.mean(
        g["src"] for g in r["speed"]["groups"]))
    row("routing groups per batch: target languages", "", "", lambda r: statistics.mean(
        g["tgt"] for g in r["speed"]["groups"]))
    for system in GEN_SYSTEMS:
        if system in systems:
            g = lambda r, s=system: r["generate"][s]  # noqa: E731
            row(f"fairseq-generate {'-'.join(GEN_DIRECTION)}: process start to first batch", system, cpu,
                lambda r, g=g: g(r)["first_batch"]["cpu"])
            row("  after the imports: task set-up", system, cpu, lambda r, g=g: g(r)["setup_task"]["cpu"])
            row("  checkpoint load", system, cpu, lambda r, g=g: g(r)["load_model"]["cpu"])
    for system in systems:
        row("checkpoint_last.pt (with the optimizer state)", system, "MiB", lambda r, s=system: r["checkpoint_mib"][s])
    for system in systems:
        row("parameters", system, "", lambda r, s=system: r["speed"]["params"][s])
    return out


def fmt(value, unit):
    if unit in ("", "words/s") and value >= 100:
        return f"{value:,.0f}"
    if unit == "x":
        return f"{value:.3f}"
    return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"


def reference_k(results):
    ks = [r["k"] for r in results]
    return 10 if 10 in ks else min(ks)


def markdown(rows, results):
    ks = [r["k"] for r in results]
    ref = reference_k(results)
    lines = ["| measure | system | unit | " + " | ".join(f"K={k}" for k in ks) + " |",
             "|---|---|---|" + "---|" * len(ks)]
    for measure, system, unit, values in rows:
        cells = []
        for k in ks:
            if k not in values:
                cells.append("")
                continue
            cell = fmt(values[k], unit)
            if k != ref and ref in values and values[ref] and unit != "x":
                ratio = values[k] / values[ref]
                if unit == "words/s":
                    cell += f" ({values[ref] / values[k]:.2f}x time)"
                else:
                    cell += f" ({ratio:.2f}x)"
            cells.append(cell)
        lines.append(f"| {measure} | {system} | {unit} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


COLOURS = {"mnmt": "#4c72b0", "hltmt": "#dd8452", "hltmt+adapters": "#55a868", "hltmt+skills": "#c44e52", "": "#8172b3"}
STYLES = ["-", "--", ":", "-."]  # the measures of one panel, in order


def plot(rows, results, path, title):
    """Six panels against K (log-log): each figure's ratio to the reference K, with the line
    'linear in K'; and, as values, the training time ratio to plain MNMT at each K beside its
    arithmetic. Colour: the system; line style: the measure."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # (set before its import, which logs at DEBUG)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = [r["k"] for r in results]
    ref = reference_k(results)
    gen = f"fairseq-generate {'-'.join(GEN_DIRECTION)}: process start to first batch"
    panels = [
        ("preparation (CPU seconds)", ["hltmt-prepare-data",
                                       "preparation, phase by phase",
                                       "  of which sentencepiece training",
                                       "  of which binarization (fairseq_cli.preprocess.main per pair)"], "ratio"),
        ("start-up (CPU seconds, imports included)", ["fairseq-train: process start to first update", gen,
                                                      "task set-up (dictionaries, language tokens)"], "ratio"),
        ("data (the corpus grows with K: 2K x lines)", ["load train split (2K pair datasets)",
                                                        "data loading, epoch 1 (batch iterator + collate all)",
                                                        "resident memory after 2 epochs of data"], "ratio"),
        ("model build and checkpoint save (CPU seconds)", ["  model build", "  checkpoint save"], "ratio"),
        ("training: time ratio to plain MNMT at the same K (solid: measured, same batches;\ndashed: arithmetic); "
         "dotted: mixed batches / the same batches as one direction",
         ["  time ratio to plain MNMT at this K", "  predicted (arithmetic) ratio to plain MNMT",
          "  the same batches, every row relabelled to one direction: time ratio mixed / one direction"], "value"),
        ("sizes", ["checkpoint_last.pt (with the optimizer state)", "parameters"], "ratio"),
    ]
    fig, axes = plt.subplots(3, 2, figsize=(12, 12.5))
    for ax, (name, measures, mode) in zip(axes.flat, panels):
        for measure, system, unit, values in rows:
            if measure not in measures or (mode == "ratio" and (ref not in values or len(values) < 2)):
                continue
            xs = [k for k in ks if k in values]
            if mode == "ratio":
                ys = [(values[ref] / values[k]) if unit == "words/s" else values[k] / values[ref] for k in xs]
            else:
                ys = [values[k] for k in xs]
            short = measure.strip().split(":")[0].split(" (")[0]
            ax.plot(xs, ys, marker="o", ms=3.5, lw=1.2, color=COLOURS.get(system, "#333333"),
                    ls=STYLES[measures.index(measure) % len(STYLES)], label=f"{short}{', ' + system if system else ''}")
        if mode == "ratio":
            ax.plot(ks, [k / ref for k in ks], color="grey", ls=(0, (1, 3)), lw=1.0, label=f"linear in K (K/{ref})")
            ax.set_yscale("log")
            ax.set_ylabel(f"ratio to K={ref}")
        else:
            ax.set_ylabel("ratio")
        ax.axhline(1.0, color="black", lw=0.6)
        ax.set_xscale("log")
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.minorticks_off() if mode == "value" else None
        ax.set_xlabel("K, languages besides English (2K directions)")
        ax.set_title(name, fontsize=9.5)
        ax.legend(fontsize=6.5, loc="upper left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------------------------------


def int_list(value, name):
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise ScaleError(f"{name} takes comma-separated whole numbers, got {value!r}") from None
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=type(
        "F", (argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter), {}))
    p.add_argument("--ks", default="10,25,50,100,200", help="numbers of languages besides English")
    p.add_argument("--lines", type=int, default=100, help="training lines per pair (the same for every K)")
    p.add_argument("--eval-lines", type=int, default=5, help="valid and test lines per pair")
    p.add_argument("--vocab-size", type=int, default=2000,
                   help="joint sentencepiece vocabulary (small enough that every K reaches it: the models of all K "
                        "then differ only by their language tokens and language-specific modules)")
    p.add_argument("--prepare-script-ks", default="auto",
                   help="the K of --ks at which hltmt-prepare-data itself is timed (in its own process, "
                        "the output compared with the phase-by-phase preparation's); auto: every K; '' for none")
    p.add_argument("--systems", default=",".join(SYSTEMS), help="systems timed")
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--updates", type=int, default=3, help="fairseq-train updates per start-up measure")
    p.add_argument("--startup-rounds", type=int, default=1,
                   help="fairseq-train / fairseq-generate runs per system and K, interleaved (the fastest is kept)")
    p.add_argument("--batches", type=int, default=8, help="training batches per round (words/s)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (words/s)")
    p.add_argument("--work", default=os.path.join(ROOT, "runs", "scale"), help="working folder (corpora, data)")
    p.add_argument("--keep", action="store_true", help="keep each K's corpus and data in --work")
    p.add_argument("--timeout", type=int, default=3600, help="seconds allowed to each measure's process")
    p.add_argument("--json", default=None, help="also write every figure here")
    p.add_argument("--png", default=None, help="also draw the ratios to K=10 here")
    args = p.parse_args(argv)
    try:
        args.ks = int_list(args.ks, "--ks")
        args.prepare_script_ks = (list(args.ks) if args.prepare_script_ks == "auto"
                                  else int_list(args.prepare_script_ks, "--prepare-script-ks"))
        if not args.ks or any(k < 1 for k in args.ks):
            raise ScaleError(f"--ks must list numbers of languages >= 1, got {args.ks}")
        if len(set(args.ks)) != len(args.ks):
            raise ScaleError(f"--ks lists a K twice: {args.ks}")
        args.ks = sorted(args.ks)
        extra = [k for k in args.prepare_script_ks if k not in args.ks]
        if extra:
            raise ScaleError(f"--prepare-script-ks {extra} not in --ks {args.ks}")
        for name in ("lines", "eval_lines", "vocab_size", "max_tokens", "updates", "startup_rounds", "batches", "rounds",
                     "timeout"):
            if getattr(args, name) < 1:
                raise ScaleError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
        args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
        unknown = [s for s in args.systems if s not in SYSTEMS]
        if unknown or "mnmt" not in args.systems:
            raise ScaleError(f"--systems: choose from {','.join(SYSTEMS)} (mnmt, the reference, included); "
                             f"got {','.join(args.systems)}")
        args.systems = [s for s in SYSTEMS if s in args.systems]
        for k in args.ks:  # every corpus fits in DebMT-10 before anything runs
            slices = max(source_of(x)[1] for x in languages(k)) + 1
            for real in REAL[:min(k, len(REAL))]:
                for split, n in (("train", args.lines), ("valid", args.eval_lines), ("test", args.eval_lines)):
                    have = _count(os.path.join(DEBMT10, f"{split}.en-{real}.{real}"))
                    if have < slices * n:
                        raise ScaleError(f"K={k} needs {slices} slices of {n} {split} lines of en-{real} "
                                         f"({slices * n}) but DebMT-10 has {have}: lower --lines / --eval-lines "
                                         f"or the largest K")
        os.makedirs(args.work, exist_ok=True)
        if not os.access(args.work, os.W_OK):
            raise ScaleError(f"--work {args.work} is not writable")
        for path in (args.json, args.png):
            if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
                raise ScaleError(f"{path}: its folder does not exist")
    except (ScaleError, OSError) as error:
        print(f"scale_bench: error: {error}", file=sys.stderr)
        return 2

    t_all = time.time()
    args.import_span = import_everything()
    import torch

    log(f"imports (torch, fairseq, the plugin): {args.import_span['cpu']:.1f} s CPU ({args.import_span['wall']:.1f} s "
        "wall), counted in every 'from process start' figure")

    log(f"K = {','.join(map(str, args.ks))}; {args.lines} training lines per pair; {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.2f}; torch {torch.__version__}; one OpenMP thread per measure")
    results = []
    try:
        for k in args.ks:
            t = time.time()
            results.append(measure_k(args, k, args.work))
            log(f"K={k} done in {time.time() - t:.0f}s (load {results[-1]['load_start']:.2f} -> "
                f"{results[-1]['load_end']:.2f})")
    except (ScaleError, subprocess.TimeoutExpired) as error:
        print(f"scale_bench: error: {error}", file=sys.stderr)
        return 1
    rows = rows_of(results, args.systems)
    table = markdown(rows, results)
    print("\n" + table)
    meta = {"ks": args.ks, "lines": args.lines, "eval_lines": args.eval_lines, "vocab_size": args.vocab_size,
            "max_tokens": args.max_tokens, "systems": args.systems, "cpus": os.cpu_count(),
            "torch": torch.__version__, "threads_per_measure": 1, "wall_s": time.time() - t_all,
            "command": " ".join(["scripts/scale_bench.py"] + argv)}
    print(f"\n(whole run {meta['wall_s']:.0f}s; load per K: " + ", ".join(
        f"K={r['k']} {r['load_start']:.2f}->{r['load_end']:.2f}" for r in results) + ")")
    if args.png:
        plot(rows, results, args.png, f"Scale in languages: tiny models, {args.lines} lines per pair, CPU, "
                                      f"1 thread per process; ratio to K={reference_k(results)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": results,
                       "rows": [{"measure": m, "system": s, "unit": u, "values": {str(k): v for k, v in vals.items()}}
                                for m, s, u, vals in rows]}, f, indent=1)
    return 0


def _count(path):
    if not os.path.isfile(path):
        raise ScaleError(f"{path} is missing: DebMT-10 must be in data/debmt10/")
    with open(path, "rb") as f:
        return sum(1 for _ in f)


if __name__ == "__main__":
    sys.exit(main())
