#!/usr/bin/env python3
"""Side-by-side speed of the plain fairseq ``transformer`` and HLT-MT (alone, with adapters,
with skills) of the same sizes.

    python scripts/bench.py --data runs/bench-data/bin                   # CPU (hltmt-prepare-data --out runs/bench-data)
    python scripts/bench.py --data DATA --device cuda --dtype bf16         # GPU

One process builds every system on the same task and data, takes the same training batches
(a fixed list from the real multilingual sampler: mixed directions) and measures, with the
systems interleaved round by round so that machine noise hits all of them alike:

- training target words/s of each system: ``hltmt`` (stage all, fixed map), ``hltmt high``
  (stage high, hard/soft drawn per update with p = 0.5), ``hltmt+adapters`` (MAD-X: language,
  shared, decoder and invertible adapters), ``hltmt+skills`` (SkillNet-X skill FFNs and
  language-specific attention) and the baseline;
- a mixed-direction batch against single-direction batches of the same tokens (HLT-MT);
- beam-5 generation tokens/s on test sentences of one high- and one low-resource direction,
  every hypothesis held to the same length (``min_len = max_len``) so that each system runs
  the same number of search steps whatever its (untrained) outputs would be;
- parameters, and training memory: on any device the bytes a training step holds (weights,
  gradients and Adam's two moments, plus the activations saved for the backward pass, counted
  with ``torch.autograd.graph.saved_tensors_hooks``); on CUDA also the measured
  ``torch.cuda.max_memory_allocated`` of a training run in its own process.

The *predicted* time ratio of a system is its arithmetic over the baseline's on the same
work, counted with ``torch.utils.flop_counter.FlopCounterMode`` (matrix products and
attention; routed modules count only the rows they ran on). A benchmark measures; nothing
here passes or fails.
"""
import argparse
import inspect
import json
import os
import re
import statistics
import subprocess
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGIN = os.path.join(ROOT, "hltmt_plugin")

ADAPTERS = ["--language-adapters", "--shared-adapters", "--decoder-adapters", "--invertible-adapters"]
SKILLS = ["--skill-ffn", "--skill-attention"]
# name -> (HLT-MT model?, extra options); every system sees --enable-lang-ids batches
SYSTEMS = {
    "baseline": (False, []),
    "hltmt": (True, []),
    "hltmt high": (True, ["--hlt-stage", "high"]),
    "hltmt+adapters": (True, ADAPTERS),
    "hltmt+skills": (True, SKILLS),
}
# what the ratio column holds, per kind of row: speed rows give a time ratio (so > 1 is slower)
RATIO_IS = {"speed": "time: system / baseline (= baseline speed / system speed)",
            "size": "size: system / baseline"}
TARGET = 1.06  # the target for HLT-MT's time ratios (1.10 for its training memory)
DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
ARCHS = {"tiny": ("transformer_hltmt_tiny", "hltmt_transformer_tiny"),
         "small": ("transformer_hltmt_small", "hltmt_transformer_small"),
         "base": ("transformer", "hltmt_transformer")}


DEBMT10_HIGH = ["fr", "de", "cs", "tr", "fi", "et"]  # data/debmt10/README.md: the high-resource languages
DEBMT10_LOW = ["ro", "lv", "hi", "gu"]


class BenchError(Exception):
    pass


def pairs_of(args):
    langs = args.langs.split(",")
    return ["en"] + langs, [f"en-{x}" for x in langs] + [f"{x}-en" for x in langs]


def data_languages(data):
    """The non-English languages of a binarized folder: its langs.txt (hltmt-prepare-data
    writes it), else every dict.XX.txt; English-centric data has train.en-XX.*.idx files."""
    path = os.path.join(data, "langs.txt")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            langs = [x.strip() for x in f if x.strip()]
    else:
        langs = sorted(name[len("dict."):-len(".txt")] for name in os.listdir(data)
                       if name.startswith("dict.") and name.endswith(".txt"))
    return [x for x in langs if x != "en"]


def train_sentences(data, lang):
    """Training sentence pairs of en-XX in a binarized folder (0 if there are none)."""
    from fairseq.data import data_utils

    for prefix in (f"train.en-{lang}.en", f"train.{lang}-en.en"):
        if os.path.isfile(os.path.join(data, prefix + ".idx")):
            dataset = data_utils.load_indexed_dataset(os.path.join(data, prefix), None)
            return len(dataset) if dataset is not None else 0
    return 0


def derive_languages(args):
    """Fill --langs, --high and --pool-size from the data folder where they were not given:
    every language of the data; the high-resource ones are DebMT-10's (fr, de, cs, tr, fi, et)
    among them when the data holds DebMT-10 languages, otherwise those with at least half the
    training sentences of the largest pair; T = min(3, number of high-resource languages)."""
    found = data_languages(args.data)
    if args.langs is None:
        if not found:
            raise BenchError(f"--data {args.data}: no languages found (no langs.txt, no dict.XX.txt besides en); "
                             "give --langs")
        args.langs = ",".join(found)
        args.derived.append(f"--langs {args.langs}")
    langs = [x for x in args.langs.split(",") if x]
    missing = [x for x in langs if not os.path.isfile(os.path.join(args.data, f"dict.{x}.txt"))]
    if missing:
        raise BenchError(f"--langs names {','.join(missing)}, which --data {args.data} has no dictionary for "
                         f"(it has {','.join(found) or 'none'})")
    if args.high is None:
        high = [x for x in DEBMT10_HIGH if x in langs]
        if not high or not set(langs) <= set(DEBMT10_HIGH + DEBMT10_LOW):
            sizes = {x: train_sentences(args.data, x) for x in langs}
            top = max(sizes.values()) if sizes else 0
            high = [x for x in langs if top and sizes[x] >= top / 2]
        args.high = ",".join(high)
        args.derived.append(f"--high {args.high}")
    high = [x for x in args.high.split(",") if x]
    if not high or any(x not in langs for x in high):
        raise BenchError(f"--high {args.high}: the high-resource languages must be some of --langs ({args.langs})")
    if args.pool_size is None:
        args.pool_size = min(3, len(high))
        args.derived.append(f"--pool-size {args.pool_size}")
    if not 1 <= args.pool_size <= len(high):
        raise BenchError(f"--pool-size must lie in [1, {len(high)}] (the number of high-resource languages), "
                         f"got {args.pool_size}")


def build(args, name):
    from fairseq import options, tasks

    is_hltmt, extra = SYSTEMS[name]
    langs, pairs = pairs_of(args)
    pairs = getattr(args, "pairs", None) or pairs
    cli = [args.data, "--user-dir", PLUGIN, "--task", "hltmt_translation", "--arch", ARCHS[args.size][is_hltmt],
           "--langs", ",".join(langs), "--lang-pairs", ",".join(pairs), "--encoder-langtok", "tgt",
           "--enable-lang-ids", "--hlt-stage", "all", "--max-tokens", str(args.max_tokens), "--optimizer", "adam",
           "--lr", "1e-4", "--dropout", "0.1", "--seed", "1", *extra]
    if is_hltmt:
        cli += ["--high-resource-langs", args.high, "--slp-pool-size", str(args.pool_size)]
    if args.device == "cpu":
        cli.append("--cpu")
    parsed = options.parse_args_and_arch(options.get_training_parser(), cli)
    task = tasks.setup_task(parsed)
    torch.manual_seed(1)
    model = task.build_model(parsed).to(args.device)
    if is_hltmt and "--hlt-stage" not in extra:  # stage all: a fixed map, as after stage high
        model.slp_router.fix_map_to(torch.arange(len(args.high.split(","))) % args.pool_size)
    return {"args": parsed, "task": task, "model": model,
            "lang_ids": "src_lang_id" in inspect.signature(model.encoder.forward).parameters}


def batches(args, task, n):
    from fairseq import utils

    task.load_dataset("train", epoch=1)
    itr = task.get_batch_iterator(dataset=task.dataset("train"), max_tokens=args.max_tokens,
                                  max_positions=(1024, 1024), seed=1, epoch=1, required_batch_size_multiple=8,
                                  ignore_invalid_inputs=True)
    out = []
    for sample in itr.next_epoch_itr(shuffle=True):
        out.append(utils.move_to_cuda(sample) if args.device == "cuda" else sample)
        if len(out) == n:
            break
    return out


def for_model(system, sample):
    """The sample as this model takes it (the plain transformer has no language-id inputs)."""
    if system["lang_ids"]:
        return sample
    net = {k: v for k, v in sample["net_input"].items() if k not in ("src_lang_id", "tgt_lang_id")}
    return {**sample, "net_input": net}


def train_step_fn(args, system):
    from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

    model = system["model"]
    criterion = LabelSmoothedCrossEntropyCriterion(system["task"], False, 0.1)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    dtype = DTYPES[args.dtype]

    def step(sample, update):
        model.train()
        model.set_num_updates(update)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(args.device, dtype=dtype, enabled=dtype is not None):
            loss, _, _ = criterion(model, for_model(system, sample))
        loss.backward()
        optimizer.step()

    return step


def clock(args):
    """The clock the measures use: CPU time of this process (``--clock cpu``: one thread on a
    shared machine, where other processes' load inflates wall time but not the CPU time this
    process spends), or wall time (``--clock wall``: several threads, or a GPU)."""
    return time.process_time() if getattr(args, "clock", "wall") == "cpu" else time.perf_counter()


def sync(args):
    if args.device == "cuda":
        torch.cuda.synchronize()


def flops(fn):
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def alternating(args, steps, lists, update0=0):
    """Seconds each step function spends on its list of batches, the functions alternating
    batch by batch (their order turning round each batch), so that the machine's load hits
    every one alike; ``lists`` maps each name to its batches (all of one length)."""
    names = list(steps)
    spent = {name: 0.0 for name in names}
    for i in range(len(next(iter(lists.values())))):
        for name in names if i % 2 == 0 else names[::-1]:
            sync(args)
            t0 = clock(args)
            steps[name](lists[name][i], update0 + i)
            sync(args)
            spent[name] += clock(args) - t0
    return spent


def time_training(args, systems, samples):
    """Words/s per system over rounds of the batches, the systems alternating batch by batch;
    also the FLOPs of one round."""
    steps = {name: train_step_fn(args, s) for name, s in systems.items()}
    for name, step in steps.items():  # warm-up
        for i, s in enumerate(samples[:3]):
            step(s, i)
    words = sum(int(s["ntokens"]) for s in samples)
    rates = {name: [] for name in systems}
    for r in range(args.rounds):
        spent = alternating(args, steps, {name: samples for name in steps}, 1000 * r)
        for name in steps:
            rates[name].append(words / spent[name])
        print(f"# training round {r + 1}/{args.rounds}: " + ", ".join(
            f"{name} {v[-1]:,.0f}" for name, v in rates.items()) + " words/s", flush=True)
    work = {name: flops(lambda: [step(s, i) for i, s in enumerate(samples)]) for name, step in steps.items()}
    return rates, work


def generation_setup(args, direction):
    """The test batches of one direction and a beam-5 generator that runs every hypothesis to
    the same length."""
    from fairseq import options, tasks, utils

    src, tgt = direction.split("-")
    langs, _ = pairs_of(args)
    inference = options.parse_args_and_arch(options.get_generation_parser(), [
        args.data, "--user-dir", PLUGIN, "--task", "hltmt_translation", "--langs", ",".join(langs),
        "--lang-pairs", direction, "--encoder-langtok", "tgt", "--enable-lang-ids", "-s", src, "-t", tgt,
        "--path", __file__])
    task = tasks.setup_task(inference)  # the data side only: the models are the ones being timed
    task.load_dataset("test")
    itr = task.get_batch_iterator(dataset=task.dataset("test"), max_tokens=4000, max_sentences=args.gen_batch_size or None,
                                  max_positions=(1024, 1024), seed=1)
    samples, n = [], 0
    for sample in itr.next_epoch_itr(shuffle=False):
        samples.append(utils.move_to_cuda(sample) if args.device == "cuda" else sample)
        n += len(sample["id"])
        if n >= args.gen_sentences:
            break
    gen_args = argparse.Namespace(beam=5, max_len_a=0, max_len_b=args.gen_len, min_len=args.gen_len,
                                  unnormalized=False, lenpen=1, unkpen=0, temperature=1.0, match_source_len=False,
                                  no_repeat_ngram_size=0, sampling=False, diverse_beam_groups=-1,
                                  diverse_beam_strength=0.5, diversity_rate=-1, prefix_size=0, sampling_topk=-1,
                                  sampling_topp=-1.0, constraints=None, print_alignment=None, retain_dropout=False,
                                  score_reference=False)
    return task, samples, gen_args


def generate_fn(args, task, samples, gen_args, system):
    generator = task.build_generator([system["model"]], gen_args)
    dtype = DTYPES[args.dtype]

    def run():
        system["model"].eval()
        toks = 0
        with torch.no_grad(), torch.autocast(args.device, dtype=dtype, enabled=dtype is not None):
            for sample in samples:
                for nbest in task.inference_step(generator, [system["model"]], for_model(system, sample)):
                    toks += len(nbest[0]["tokens"])
        return toks

    return run


def time_generation(args, systems, directions):
    """Beam-5 tokens/s per (system, direction), rounds interleaved; also the FLOPs of one pass."""
    rates, work = {}, {}
    for direction in directions:
        task, samples, gen_args = generation_setup(args, direction)
        runs = {name: generate_fn(args, task, samples, gen_args, s) for name, s in systems.items()}
        for run in runs.values():
            run()  # warm-up
        for r in range(args.rounds):
            for name, run in runs.items():
                sync(args)
                t0 = clock(args)
                toks = run()
                sync(args)
                rates.setdefault((name, direction), []).append(toks / (clock(args) - t0))
        for name, run in runs.items():
            work[(name, direction)] = flops(run)
        print(f"# generation {direction}: " + ", ".join(
            f"{name} {statistics.median(rates[(name, direction)]):,.0f}" for name in systems) + " tokens/s", flush=True)
    return rates, work


def one_direction(sample, task, lang):
    """A copy of sample whose rows all carry lang's target-language token."""
    src = sample["net_input"]["src_tokens"].clone()
    first = src.ne(task.source_dictionary.pad()).long().argmax(dim=1)
    src[torch.arange(src.size(0)), first] = task.data_manager.get_encoder_langtok("en", lang, "tgt")
    return {**sample, "net_input": {**sample["net_input"], "src_tokens": src}}


def time_pair(args, system, first, second):
    """Words/s of the same model on two lists of batches of the same tokens, after one step of
    each, alternating batch by batch."""
    step = train_step_fn(args, system)
    words = sum(int(s["ntokens"]) for s in first)
    rates = {"mixed": [], "single": []}
    step(first[0], 0)
    step(second[0], 1)
    for r in range(args.rounds):
        spent = alternating(args, {"mixed": step, "single": step}, {"mixed": first, "single": second}, 1000 * r)
        for name in rates:
            rates[name].append(words / spent[name])
    return {k: statistics.median(v) for k, v in rates.items()}


def params(model):
    return sum(p.numel() for p in model.parameters())


def training_bytes(args, system, samples):
    """Bytes one training step holds at its peak: weights, their gradients and Adam's two
    moments (trainable parameters only), plus the largest set of activations a batch saves
    for the backward pass."""
    model = system["model"]
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    frozen = sum(p.numel() * p.element_size() for p in model.parameters() if not p.requires_grad)
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

    criterion = LabelSmoothedCrossEntropyCriterion(system["task"], False, 0.1)
    peak = 0
    model.train()
    for i, sample in enumerate(samples):
        seen = {}

        def pack(t):
            storage = t.untyped_storage()
            if storage.data_ptr() not in weights:
                seen[storage.data_ptr()] = storage.nbytes()
            return t

        model.set_num_updates(i)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss, _, _ = criterion(model, for_model(system, sample))
        peak = max(peak, sum(seen.values()))
        del loss
    return 4 * trainable + frozen + peak


def cuda_memory_child(args, name):
    """Measured peak CUDA memory of a training loop of one system, in its own process (MiB)."""
    system = build(args, name)
    samples = batches(args, system["task"], args.batches)
    step = train_step_fn(args, system)
    torch.cuda.reset_peak_memory_stats()
    for i, sample in enumerate(samples):
        step(sample, i)
    print(json.dumps({"peak_mib": torch.cuda.max_memory_allocated() / 2 ** 20}))


def plot(figures, path, title):
    """Bars: measured time (or size) ratio per system and measure; dots: the predicted ratio."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # (set before its import, which logs at DEBUG)
    import matplotlib
  # the imports above leave the root logger at DEBUG
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [f for f in figures if f["measure"] != "parameters"]
    labels = [f"{f['system']}: {f['measure']}" for f in rows]
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(rows) + 1.6))
    y = range(len(rows))
    ax.barh(list(y), [f["ratio"] - 1 for f in rows], left=1, color="#4c72b0", label="measured")
    pred = [(i, f["predicted"]) for i, f in enumerate(rows) if f["predicted"] is not None]
    ax.scatter([p for _, p in pred], [i for i, _ in pred], color="#dd8452", zorder=3, label="predicted (arithmetic)")
    ax.axvline(1.0, color="black", lw=0.8)
    ax.axvline(TARGET, color="grey", ls="--", lw=0.8,
               label=f"{TARGET}: the target for HLT-MT's time ratios (none for adapters, skills)")
    ax.set_yticks(list(y), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ratio to the plain fairseq transformer of the same size: time (system time / baseline time = "
                  "baseline speed / system speed), or size\n> 1: the system is slower (or larger)", fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------------------
# the real training step: fairseq-train itself

# name -> (HLT-MT?, criterion); every run trains the stage-high directions (each high-resource
# language with English, both ways) on the same batches; HLT-MT routes hard at every update
TRAIN_SYSTEMS = {
    "baseline": (False, "label_smoothed_cross_entropy"),
    "hltmt": (True, "hltmt_cross_entropy"),
    "hltmt lsce": (True, "label_smoothed_cross_entropy"),  # the same model, fairseq's criterion
}


def high_pairs(args):
    high = args.high.split(",")
    return [f"en-{x}" for x in high] + [f"{x}-en" for x in high]


def fairseq_train_cmd(args, system, size, save_dir, updates):
    """fairseq-train of one system: plain ``transformer`` on fairseq's own
    ``translation_multi_simple_epoch`` task, or ``hltmt_transformer`` of the same sizes on
    ``hltmt_translation`` (stage high, hard routing at every update); same data, options and
    seed, so the same batches."""
    is_hltmt, criterion = TRAIN_SYSTEMS[system]
    langs, _ = pairs_of(args)
    cli = [args.data, "--user-dir", PLUGIN, "--langs", ",".join(langs), "--lang-pairs", ",".join(high_pairs(args)),
           "--encoder-langtok", "tgt", "--arch", ARCHS[size][is_hltmt], "--criterion", criterion,
           "--label-smoothing", "0.1", "--optimizer", "adam", "--lr", "1e-4", "--dropout", "0.1", "--seed", "1",
           "--max-tokens", str(args.max_tokens), "--max-update", str(updates), "--log-format", "json",
           "--log-interval", str(args.train_log_interval), "--save-dir", save_dir, "--no-save",
           "--disable-validation"]
    if is_hltmt:
        cli += ["--task", "hltmt_translation", "--high-resource-langs", args.high, "--slp-pool-size",
                str(args.pool_size), "--hlt-stage", "high", "--slp-hard-prob", "1"]
    else:
        cli += ["--task", "translation_multi_simple_epoch"]
    if args.device == "cpu":
        cli.append("--cpu")
    return cli


def child_env():
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


TRAIN_INNER = re.compile(r"\btrain_inner\b[ |:]*(\{.*\})\s*$")


def train_log(stdout):
    """The ``train_inner`` records of a ``--log-format json`` fairseq-train log (fairseq's own
    format, ``... | INFO | train_inner | {...}``, or the logging default, ``INFO:train_inner:{...}``)."""
    out = []
    for line in stdout.splitlines():
        found = TRAIN_INNER.search(line)
        if found:
            out.append(json.loads(found.group(1)))
    return out


def run_fairseq_train(args, system, size, updates):
    """One fairseq-train run (fairseq_cli.train's own cli_main, in a child process that also
    notes each update's CPU time); its words/s from the JSON log (the median over log
    intervals, the first one, with the start-up, left out), its words per CPU-second of the
    updates after that first interval, and the batches it saw."""
    import tempfile

    warm = args.train_log_interval
    with tempfile.TemporaryDirectory() as save:
        spec_path, out = os.path.join(save, "spec.json"), os.path.join(save, "out.json")
        with open(spec_path, "w") as f:
            json.dump({"tool": "none", "warmup": warm, "updates": updates - warm, "out": out,
                       "argv": fairseq_train_cmd(args, system, size, save, updates)}, f)
        done = subprocess.run([sys.executable, __file__, "--profile-child", spec_path], capture_output=True,
                              text=True, env=child_env())
        if done.returncode != 0:
            raise BenchError(f"fairseq-train of {system} ({size}) failed:\n{(done.stdout + done.stderr)[-3000:]}")
        with open(out) as f:
            timed = json.load(f)
    records = train_log(done.stdout + done.stderr)
    if len(records) < 2:
        raise BenchError(f"fairseq-train of {system} ({size}) logged {len(records)} interval(s): raise "
                         f"--train-updates above 2 x --train-log-interval")
    later = records[1:]
    return {"wps": statistics.median(float(r["wps"]) for r in later),
            "wps_intervals": [float(r["wps"]) for r in records],
            "cpu_wps": timed["words"] / timed["cpu"], "step_wall_wps": timed["words"] / timed["wall"],
            "batches": [(r["wpb"], r["bsz"]) for r in records]}


def predicted_train_ratio(args, size, n):
    """The arithmetic of an HLT-MT training step over the baseline's, on the stage-high batches."""
    sub = argparse.Namespace(**vars(args))
    sub.size, sub.pairs = size, high_pairs(args)
    systems = {name: build(sub, name) for name in ("baseline", "hltmt")}
    samples = batches(sub, systems["hltmt"]["task"], n)
    work = {name: flops(lambda s=system: [train_step_fn(sub, s)(b, i) for i, b in enumerate(samples)])
            for name, system in systems.items()}
    return work["hltmt"] / work["baseline"]


def time_fairseq_train(args):
    """Words/s of fairseq-train itself, baseline against HLT-MT of the same sizes, runs
    interleaved (the order reversed every other round); ratios per size."""
    names = ["baseline"] + [n for n in args.train_systems.split(",") if n and n != "baseline"]
    sizes = args.train_sizes.split(",")
    runs = {(size, name): [] for size in sizes for name in names}
    for r in range(args.rounds):
        for size in sizes:
            order = names if r % 2 == 0 else names[::-1]
            for name in order:
                t = time.time()
                runs[(size, name)].append(run_fairseq_train(args, name, size, args.train_updates[size]))
                got = runs[(size, name)][-1]
                print(f"# round {r + 1}/{args.rounds} {size} {name}: {got['wps']:,.0f} words/s (log), "
                      f"{got['cpu_wps']:,.0f} words per CPU-second ({time.time() - t:.0f}s, load "
                      f"{os.getloadavg()[0]:.2f})", flush=True)
    import tempfile

    pairs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            t = time.time()
            got = run_pair(args, size, args.train_updates[size], ["phases"], os.path.join(tmp, f"{size}.json"))
            b, h = got["update_cpu"]["baseline"], got["update_cpu"]["hltmt"]
            half = len(b) // 2
            pairs[size] = {"cpu_ratio": sum(h) / sum(b), "wall_ratio": got["wall"]["hltmt"] / got["wall"]["baseline"],
                           "halves": [sum(h[:half]) / sum(b[:half]), sum(h[half:]) / sum(b[half:])] if half else [],
                           "baseline_cpu_wps": got["words"] / sum(b), "cpu_wps": got["words"] / sum(h)}
            print(f"# {size}: fairseq's Trainer.train_step of both systems in one process, {len(b)} updates "
                  f"alternating: time ratio {pairs[size]['cpu_ratio']:.3f} (CPU), {pairs[size]['wall_ratio']:.3f} (wall)"
                  f" ({time.time() - t:.0f}s, load {os.getloadavg()[0]:.2f})", flush=True)
    rows = []
    for size in sizes:
        pred = predicted_train_ratio(args, size, min(args.batches, 5))
        base = [x for x in runs[(size, "baseline")]]
        for name in names[1:]:
            ours = runs[(size, name)]
            med = {key: (statistics.median(x[key] for x in base), statistics.median(x[key] for x in ours))
                   for key in ("wps", "cpu_wps")}
            same = all(a["batches"] == b["batches"] for a, b in zip(ours, base))
            rows.append({"size": size, "system": name, "baseline_wps": med["wps"][0], "wps": med["wps"][1],
                         "ratio": med["wps"][0] / med["wps"][1], "baseline_cpu_wps": med["cpu_wps"][0],
                         "cpu_wps": med["cpu_wps"][1], "cpu_ratio": med["cpu_wps"][0] / med["cpu_wps"][1],
                         "predicted": pred, "same_batches": same, "one_process": pairs[size] if name == "hltmt" else None,
                         "rounds": [b["wps"] / o["wps"] for b, o in zip(base, ours)],
                         "cpu_rounds": [b["cpu_wps"] / o["cpu_wps"] for b, o in zip(base, ours)]})
    print("\n| size | system | fairseq-train runs: words/s of the JSON log, baseline / system | time ratio | per "
          "round | the same runs: words per CPU-second of the updates | time ratio | per round | fairseq's "
          "Trainer.train_step, both in one process, updates alternating: time ratio (CPU; two halves) | predicted "
          "(arithmetic) | same batches |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        pair = row["one_process"]
        print(f"| {row['size']} | {row['system']} | {row['baseline_wps']:,.0f} / {row['wps']:,.0f} | "
              f"{row['ratio']:.3f} | {', '.join(f'{x:.3f}' for x in row['rounds'])} | "
              f"{row['baseline_cpu_wps']:,.0f} / {row['cpu_wps']:,.0f} | {row['cpu_ratio']:.3f} | "
              f"{', '.join(f'{x:.3f}' for x in row['cpu_rounds'])} | "
              + (f"**{pair['cpu_ratio']:.3f}** ({', '.join(f'{x:.3f}' for x in pair['halves'])})" if pair else "")
              + f" | {row['predicted']:.3f} | {'yes' if row['same_batches'] else 'NO'} |")
    print("\n(time ratio = baseline words/s / system words/s: > 1 when HLT-MT is slower. The JSON log's words/s "
          "is fairseq's wall-clock figure; the CPU figure counts the process's CPU time in the updates. Separate "
          "runs meet the machine's load at different times; the one-process figure alternates the two systems "
          "update by update on the same batches, so load hits both alike.)")
    return {"rows": rows, "runs": {f"{size} {name}": v for (size, name), v in runs.items()}}


# ---------------------------------------------------------------------------------------
# profiling the real training step


def _phase_patches():
    """(key, owner, attribute) of the methods timed as phases of a training step: fairseq's and,
    where they exist, the plugin's (a key's nested calls count once: the outermost)."""
    import importlib

    def get(module, *path):
        try:
            obj = importlib.import_module(module)
            for name in path:
                obj = getattr(obj, name)
            return obj
        except (ImportError, AttributeError):
            return None

    spots = [
        ("update (Trainer.train_step)", "fairseq.trainer", "Trainer", "train_step"),
        ("  task.train_step", "fairseq.tasks.fairseq_task", "FairseqTask", "train_step"),
        ("  task.train_step", "hltmt_plugin.tasks.hltmt_translation", "HltmtTranslationTask", "train_step"),
        ("    criterion forward (model + loss)", "fairseq.criterions.label_smoothed_cross_entropy",
         "LabelSmoothedCrossEntropyCriterion", "forward"),
        ("    criterion forward (model + loss)", "hltmt_plugin.criterions.hltmt_cross_entropy",
         "HltmtCrossEntropyCriterion", "forward"),
        ("      model forward", "fairseq.models.transformer.transformer_base", "TransformerModelBase", "forward"),
        ("      model forward", "hltmt_plugin.models.hltmt_transformer", "HltmtTransformerModel", "forward"),
        ("        encoder", "fairseq.models.transformer.transformer_encoder", "TransformerEncoderBase", "forward"),
        ("        encoder", "hltmt_plugin.models.hltmt_transformer", "HltmtTransformerEncoder", "forward"),
        ("        encoder", "hltmt_plugin.models.encoder", "HltmtTransformerEncoder", "forward"),
        ("          language record (per batch)", "hltmt_plugin.languages", "LanguageTable", "record"),
        ("        decoder layers + SLP", "fairseq.models.transformer.transformer_decoder", "TransformerDecoderBase",
         "extract_features"),
        ("        decoder layers + SLP", "hltmt_plugin.models.hltmt_transformer", "HltmtTransformerDecoder",
         "extract_features"),
        ("        decoder layers + SLP", "hltmt_plugin.models.decoder", "HltmtTransformerDecoder", "extract_features"),
        ("          decoder layers", "fairseq.models.transformer.transformer_decoder", "TransformerDecoderBase",
         "extract_features_scriptable"),
        ("          SLP routing decision", "hltmt_plugin.modules.language_router", "LanguageRouter", "decide"),
        ("            route plan (RoutePlan)", "hltmt_plugin.modules.routing", "RoutePlan", "__init__"),
        ("            module ids", "hltmt_plugin.modules.language_router", "LanguageRouter", "module_ids"),
        ("          SLP modules", "hltmt_plugin.modules.language_pool", "SelectiveLanguagePool", "forward"),
        ("        output projection", "fairseq.models.transformer.transformer_decoder", "TransformerDecoderBase",
         "output_layer"),
        ("      log-softmax (get_lprobs_and_target)", "fairseq.criterions.label_smoothed_cross_entropy",
         "LabelSmoothedCrossEntropyCriterion", "get_lprobs_and_target"),
        ("      label-smoothed NLL", "fairseq.criterions.label_smoothed_cross_entropy", "label_smoothed_nll_loss", None),
        ("      label-smoothed NLL", "hltmt_plugin.criterions.hltmt_cross_entropy", "label_smoothed_nll_loss", None),
        ("    backward", "fairseq.optim.fairseq_optimizer", "FairseqOptimizer", "backward"),
        ("  HLT-MT: _note_gradients", "hltmt_plugin.tasks.hltmt_translation", "HltmtTranslationTask",
         "_note_gradients"),
        ("  HLT-MT: idle-gradient rule, note", "hltmt_plugin.tasks.distributed", "IdleGradients", "note"),
        ("  clip_grad_norm", "fairseq.trainer", "Trainer", "clip_grad_norm"),
        ("  task.optimizer_step", "fairseq.tasks.fairseq_task", "FairseqTask", "optimizer_step"),
        ("  task.optimizer_step", "hltmt_plugin.tasks.hltmt_translation", "HltmtTranslationTask", "optimizer_step"),
        ("    HLT-MT: _drop_idle_gradients", "hltmt_plugin.tasks.hltmt_translation", "HltmtTranslationTask",
         "_drop_idle_gradients"),
        ("    HLT-MT: idle-gradient rule, drop", "hltmt_plugin.tasks.distributed", "IdleGradients", "drop"),
        ("    Adam step", "fairseq.optim.adam", "Adam", "step"),
        ("  set_num_updates", "fairseq.trainer", "Trainer", "set_num_updates"),
        ("  logging outputs (reduce and log)", "fairseq.trainer", "Trainer", "_reduce_and_log_stats"),
    ]
    out = []
    for key, module, owner, attr in spots:
        if attr is None:  # a module-level function
            target = get(module)
            if target is not None and hasattr(target, owner):
                out.append((key, target, owner))
        else:
            target = get(module, owner)
            if target is not None and attr in vars(target):
                out.append((key, target, attr))
    return out


def _install_phase_timers(records, active):
    """Wrap the phase methods: while ``active["on"]`` names a system, each outermost call adds
    its CPU time to ``records[system][phase]`` (calls, seconds)."""
    depth = {}
    for key, owner, attr in _phase_patches():
        inner = getattr(owner, attr)

        def wrapper(*a, __inner=inner, __key=key, **k):
            if not active["on"] or depth.get(__key):
                return __inner(*a, **k)
            depth[__key] = 1
            t = time.process_time()  # one thread: CPU time
            try:
                return __inner(*a, **k)
            finally:
                depth[__key] = 0
                got = records.setdefault(active["on"], {}).setdefault(__key, [0, 0.0])
                got[0] += 1
                got[1] += time.process_time() - t

        setattr(owner, attr, wrapper)


def profile_child(spec_path):
    """fairseq-train itself (fairseq_cli.train's cli_main) with each update's wall and CPU time
    noted after a warm-up; the result goes to spec["out"]."""
    with open(spec_path) as f:
        spec = json.load(f)
    from fairseq.trainer import Trainer

    state = {"n": 0, "wall": 0.0, "cpu": 0.0, "words": 0}
    inner = Trainer.train_step

    def train_step(self, samples, *a, **k):
        state["n"] += 1
        t, c = time.perf_counter(), time.process_time()
        try:
            return inner(self, samples, *a, **k)
        finally:
            if spec["warmup"] < state["n"] <= spec["warmup"] + spec["updates"]:
                state["cpu"] += time.process_time() - c
                state["wall"] += time.perf_counter() - t
                state["words"] += sum(int(s.get("ntokens", 0)) for s in samples if s)

    Trainer.train_step = train_step
    sys.argv = ["fairseq-train"] + spec["argv"]
    from fairseq_cli.train import cli_main

    cli_main()
    with open(spec["out"], "w") as f:
        json.dump({"wall": state["wall"], "cpu": state["cpu"], "words": state["words"]}, f)
    return 0


def build_trainer(argv):
    """What fairseq_cli.train.main builds from these options: task, model, criterion, Trainer,
    the (empty) checkpoint look-up and the epoch's batch iterator."""
    from fairseq import checkpoint_utils, options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))
    utils.import_user_module(cfg.common)
    utils.set_torch_seed(cfg.common.seed)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    trainer = Trainer(cfg, task, model, criterion)
    _, epoch_itr = checkpoint_utils.load_checkpoint(cfg.checkpoint, trainer)
    trainer.begin_epoch(epoch_itr.epoch)
    return trainer, epoch_itr


def profile_pair_child(spec_path):
    """The real fairseq training step of both systems in one process: fairseq's own Trainer
    (task.train_step, criterion, backward, clip, task.optimizer_step with fairseq's Adam) of the
    baseline and of HLT-MT, built as fairseq-train builds them, fed the same batches, updates
    alternating one by one so that the machine's noise hits both alike. Three passes over the
    same updates: phases (CPU time of fairseq's and the plugin's methods), cProfile (Python
    functions), torch.profiler (operators)."""
    import cProfile

    from fairseq import metrics
    from torch.profiler import ProfilerActivity, profile

    with open(spec_path) as f:
        spec = json.load(f)
    import hltmt_plugin  # noqa: F401

    records, active = {}, {"on": None}
    _install_phase_timers(records, active)
    names = list(spec["argv"])
    trainers = {}
    for name in names:
        trainers[name], epoch_itr = build_trainer(spec["argv"][name])
    itr = epoch_itr.next_epoch_itr(shuffle=True)  # the last one built; every system's batches are the same
    warm, n = spec["warmup"], spec["updates"]
    samples = [next(itr) for _ in range(warm + n)]
    out = {"cpu": {name: 0.0 for name in names}, "wall": {name: 0.0 for name in names},
           "update_cpu": {name: [] for name in names}, "words": sum(int(s["ntokens"]) for s in samples[warm:])}
    profs = {name: cProfile.Profile() for name in names}
    ops = {name: {} for name in names}

    def update(name, sample, tool):
        trainer = trainers[name]
        if tool == "cprofile":
            profs[name].enable()
        t, c = time.perf_counter(), time.process_time()
        active["on"] = name if tool == "phases" else None
        try:
            with metrics.aggregate("train_inner"):
                if tool == "torch":
                    with profile(activities=[ProfilerActivity.CPU]) as prof:
                        trainer.train_step([sample])
                    for e in prof.key_averages():
                        got = ops[name].setdefault(e.key, {"self_us": 0.0, "count": 0})
                        got["self_us"] += e.self_cpu_time_total
                        got["count"] += e.count
                else:
                    trainer.train_step([sample])
        finally:
            active["on"] = None
            if tool == "cprofile":
                profs[name].disable()
            if tool == "phases":
                out["cpu"][name] += time.process_time() - c
                out["wall"][name] += time.perf_counter() - t
                out["update_cpu"][name].append(time.process_time() - c)

    for i, sample in enumerate(samples[:warm]):
        for name in names:
            update(name, sample, None)
    for tool in spec["tools"]:
        for i, sample in enumerate(samples[warm:]):
            for name in names if i % 2 == 0 else names[::-1]:
                update(name, sample, tool)
    out["phases"] = records
    out["ops"] = ops
    if "cprofile" in spec["tools"]:
        for name in names:
            profs[name].dump_stats(f"{spec['out']}.{name}.prof")
    with open(spec["out"], "w") as f:
        json.dump(out, f)
    return 0


def _function_stats(path):
    """Own time and calls of each Python function of a cProfile dump, by (file, line, name)."""
    import pstats

    return {(os.path.basename(file), line, func): (nc, tt)
            for (file, line, func), (_cc, nc, tt, _ct, _callers) in pstats.Stats(path).stats.items()}


def run_pair(args, size, n, tools, out):
    """profile_pair_child for both systems at one size; its result."""
    import tempfile

    with tempfile.TemporaryDirectory() as save:
        spec_path = os.path.join(save, "spec.json")
        with open(spec_path, "w") as f:
            json.dump({"warmup": 3, "updates": n, "out": out, "tools": tools,
                       "argv": {name: fairseq_train_cmd(args, name, size, os.path.join(save, name), 10 ** 6)
                                for name in ("baseline", "hltmt")}}, f)
        done = subprocess.run([sys.executable, __file__, "--profile-pair-child", spec_path], capture_output=True,
                              text=True, env=child_env())
    if done.returncode != 0:
        raise BenchError(f"the training steps of {size} in one process failed:\n{(done.stdout + done.stderr)[-3000:]}")
    with open(out) as f:
        return json.load(f)


def profile_fairseq_train(args):
    """Where HLT-MT's extra time in a real fairseq training step goes (size --profile-size):
    fairseq's Trainer of both systems in one process, updates alternating (see
    profile_pair_child); per update, the CPU time of each phase, then the Python functions
    (cProfile) and the operators (torch.profiler) whose own time differs most."""
    os.makedirs(args.profile, exist_ok=True)
    size, n, warm = args.profile_size, args.profile_updates, 3
    out = os.path.join(args.profile, f"{size}.json")
    got = run_pair(args, size, n, ["phases", "cprofile", "torch"], out)
    report = {"size": size, "updates": n, "warmup": warm}
    records = got["phases"]
    order = []
    for key, _owner, _attr in _phase_patches():
        if key not in order:
            order.append(key)
    total = {name: got["cpu"][name] / n for name in ("baseline", "hltmt")}
    diff = total["hltmt"] - total["baseline"]
    print(f"\n### One fairseq training step, {size}: both systems in one process, fairseq's Trainer, the same "
          f"{n} batches, updates alternating (CPU time per update; words per CPU-second: baseline "
          f"{got['words'] / got['cpu']['baseline']:,.0f}, HLT-MT {got['words'] / got['cpu']['hltmt']:,.0f}, time "
          f"ratio {total['hltmt'] / total['baseline']:.3f})\n")
    print("| phase | calls per update (baseline / HLT-MT) | baseline | HLT-MT | HLT-MT - baseline | share of the "
          "difference |")
    print("|---|---|---|---|---|---|")
    report["phases"] = []
    for key in order:
        b, h = (records.get(name, {}).get(key, [0, 0.0]) for name in ("baseline", "hltmt"))
        if not b[0] and not h[0]:
            continue
        d = (h[1] - b[1]) / n
        report["phases"].append({"phase": key.strip(), "baseline_ms": b[1] / n * 1000, "hltmt_ms": h[1] / n * 1000,
                                 "calls": [b[0] / n, h[0] / n]})
        print(f"| {key} | {b[0] / n:.0f} / {h[0] / n:.0f} | {b[1] / n * 1000:.1f} ms | {h[1] / n * 1000:.1f} ms | "
              f"{d * 1000:+.1f} ms | {f'{100 * d / diff:.0f}%' if diff > 0 else ''} |")
    report["update_ms"] = {k: v * 1000 for k, v in total.items()}
    report["time_ratio"] = total["hltmt"] / total["baseline"]

    stats = {name: _function_stats(f"{out}.{name}.prof") for name in ("baseline", "hltmt")}
    keys = set(stats["baseline"]) | set(stats["hltmt"])
    zero = (0, 0.0)
    diffs = sorted(keys, key=lambda k: stats["hltmt"].get(k, zero)[1] - stats["baseline"].get(k, zero)[1], reverse=True)
    print("\nPython functions whose own time per update differs most (cProfile, which slows Python calls: "
          "compare the two columns, not with the phases):\n")
    print("| function (file:line name) | calls per update (baseline / HLT-MT) | baseline | HLT-MT | difference |")
    print("|---|---|---|---|---|")
    report["functions"] = []
    for k in diffs[:args.profile_top]:
        b, h = stats["baseline"].get(k, zero), stats["hltmt"].get(k, zero)
        report["functions"].append({"function": f"{k[0]}:{k[1]} {k[2]}", "baseline_ms": b[1] / n * 1000,
                                    "hltmt_ms": h[1] / n * 1000, "calls": [b[0] / n, h[0] / n]})
        print(f"| {k[0]}:{k[1]} {k[2]} | {b[0] / n:.0f} / {h[0] / n:.0f} | {b[1] / n * 1000:.2f} ms | "
              f"{h[1] / n * 1000:.2f} ms | {(h[1] - b[1]) / n * 1000:+.2f} ms |")

    ops = got["ops"]
    zero_op = {"self_us": 0.0, "count": 0}
    tb, th = (sum(v["self_us"] for v in ops[name].values()) / n / 1000 for name in ("baseline", "hltmt"))
    names = sorted(set(ops["baseline"]) | set(ops["hltmt"]), key=lambda o: ops["hltmt"].get(o, zero_op)["self_us"]
                   - ops["baseline"].get(o, zero_op)["self_us"], reverse=True)
    print(f"\nOperators (torch.profiler, self time per update): baseline {tb:.1f} ms, HLT-MT {th:.1f} ms "
          f"({th / tb:.3f}x); those whose time differs most:\n")
    print("| operator | calls per update (baseline / HLT-MT) | baseline | HLT-MT | difference |")
    print("|---|---|---|---|---|")
    report["operators"] = []
    for o in names[:args.profile_top]:
        b, h = ops["baseline"].get(o, zero_op), ops["hltmt"].get(o, zero_op)
        report["operators"].append({"operator": o, "baseline_ms": b["self_us"] / n / 1000,
                                    "hltmt_ms": h["self_us"] / n / 1000, "calls": [b["count"] / n, h["count"] / n]})
        print(f"| {o} | {b['count'] / n:.0f} / {h['count'] / n:.0f} | {b['self_us'] / n / 1000:.2f} ms | "
              f"{h['self_us'] / n / 1000:.2f} ms | {(h['self_us'] - b['self_us']) / n / 1000:+.2f} ms |")
    report["operator_totals_ms"] = {"baseline": tb, "hltmt": th}
    return report


def parse_train_options(args):
    """Check --train-sizes / --train-updates / --train-systems; updates become {size: N}."""
    sizes = [x for x in args.train_sizes.split(",") if x]
    bad = [x for x in sizes if x not in ARCHS]
    if bad or not sizes:
        raise BenchError(f"--train-sizes: choose from {','.join(ARCHS)}, got {args.train_sizes!r}")
    names = [x for x in args.train_systems.split(",") if x]
    bad = [x for x in names if x not in TRAIN_SYSTEMS]
    if bad:
        raise BenchError(f"--train-systems: unknown system {','.join(bad)}; choose from {','.join(TRAIN_SYSTEMS)}")
    updates = {}
    for item in args.train_updates.split(","):
        size, _, n = item.rpartition("=")
        if not n.strip().isdigit() or (size and size not in ARCHS):
            raise BenchError(f"--train-updates takes N or SIZE=N,..., got {args.train_updates!r}")
        for key in ([size] if size else ARCHS):
            updates[key] = int(n)
    missing = [x for x in sizes if x not in updates]
    if missing:
        raise BenchError(f"--train-updates gives no number for size {','.join(missing)}")
    for size in sizes:
        if updates[size] < 2 * args.train_log_interval:
            raise BenchError(f"--train-updates {size}={updates[size]}: at least 2 x --train-log-interval "
                             f"({2 * args.train_log_interval}) updates, the first interval being left out")
    args.train_sizes, args.train_updates = ",".join(sizes), updates


def fairseq_train_main(args):
    print(f"# fairseq-train, {args.device}, OMP_NUM_THREADS={child_env()['OMP_NUM_THREADS']} per run, torch "
          f"{torch.__version__}, load {os.getloadavg()[0]:.2f}; data {args.data}: --langs {args.langs} --high "
          f"{args.high} --pool-size {args.pool_size}; directions {','.join(high_pairs(args))}", flush=True)
    out = {"device": args.device, "threads": child_env()["OMP_NUM_THREADS"], "torch": torch.__version__,
           "langs": args.langs, "high": args.high, "pool_size": args.pool_size, "max_tokens": args.max_tokens,
           "updates": args.train_updates, "log_interval": args.train_log_interval}
    out["fairseq_train"] = time_fairseq_train(args)
    if args.profile:
        out["profile"] = profile_fairseq_train(args)
    if args.png:
        plot_train(out["fairseq_train"]["rows"], args.png)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


def plot_train(rows, path):
    """Bars: measured time ratio of fairseq-train per size; dots: the arithmetic's prediction."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # (set before its import, which logs at DEBUG)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 0.8 * len(rows) + 2.8))
    labels = [f"{r['system']}, {r['size']}" for r in rows]
    y = list(range(len(rows)))
    h = 0.27
    ax.barh([i - h for i in y], [r["ratio"] - 1 for r in rows], height=h, left=1, color="#4c72b0",
            label="fairseq-train runs: words/s of the JSON log (wall clock)")
    ax.barh(list(y), [r["cpu_ratio"] - 1 for r in rows], height=h, left=1, color="#55a868",
            label="the same runs: words per CPU-second of the updates")
    ax.barh([i + h for i in y], [(r["one_process"] or {}).get("cpu_ratio", 1) - 1 for r in rows], height=h, left=1,
            color="#c44e52", label="fairseq's Trainer.train_step, both systems in one process, alternating (CPU)")
    ax.scatter([r["predicted"] for r in rows], y, color="#dd8452", zorder=3, label="predicted (arithmetic)")
    for i, r in enumerate(rows):
        ax.plot(r["rounds"], [i - h] * len(r["rounds"]), "|", color="black", ms=7)
        ax.plot(r["cpu_rounds"], [i] * len(r["cpu_rounds"]), "|", color="black", ms=7)
        if r["one_process"]:
            ax.plot(r["one_process"]["halves"], [i + h] * len(r["one_process"]["halves"]), "|", color="black", ms=7)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("time ratio HLT-MT / plain transformer of the same size (= baseline words/s / HLT-MT words/s)\n"
                  "ticks: the single rounds (runs), or the two halves of the alternating updates", fontsize=8)
    ax.set_title("fairseq-train itself: the whole training step", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2)  # below: the bars fill the axes
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as written, and every option's default in --help (unless its help
    already says what the default is, or there is none)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.default in (None, False) or action.default is argparse.SUPPRESS:
            return text
        return super()._get_help_string(action)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--profile-child"]:
        return profile_child(argv[1])
    if argv[:1] == ["--profile-pair-child"]:
        return profile_pair_child(argv[1])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--data", required=True, help="binarized data from hltmt-prepare-data")
    p.add_argument("--langs", default=None,
                   help="non-English languages of the data (default: all of them, from its langs.txt or dict.XX.txt)")
    p.add_argument("--high", default=None,
                   help="high-resource languages (default: DebMT-10's fr,de,cs,tr,fi,et among --langs; for other "
                        "languages those with at least half the training sentences of the largest pair)")
    p.add_argument("--pool-size", type=int, default=None,
                   help="T, HLT-MT's pool modules (default: min(3, number of high-resource languages))")
    p.add_argument("--systems", default=",".join(SYSTEMS), help="systems timed against the baseline")
    p.add_argument("--size", default="tiny", choices=sorted(ARCHS), help="model sizes (in-process measures)")
    p.add_argument("--max-tokens", type=int, default=4096, help="tokens per training batch")
    p.add_argument("--batches", type=int, default=20, help="training batches per round")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every measure")
    p.add_argument("--gen-directions", default=None,
                   help="directions timed for beam search (default: en-de,en-gu when the data has them, else "
                        "en-<first high-resource>,en-<first other language>)")
    p.add_argument("--gen-sentences", type=int, default=100, help="test sentences per direction")
    p.add_argument("--gen-len", type=int, default=20, help="target length every hypothesis is held to")
    p.add_argument("--gen-batch-size", type=int, default=0,
                   help="sentences per generation batch (0: up to 4,000 tokens; 1: interactive latency)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"],
                   help="where the models run (cuda when there is one)")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"], help="autocast dtype")
    p.add_argument("--clock", default="auto", choices=["auto", "cpu", "wall"],
                   help="what the speeds are measured in: cpu (this process's CPU time: robust to other processes' "
                        "load, right for one thread), wall; auto: cpu on a CPU with one torch thread, wall otherwise")
    p.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--json", default=None, help="also write the figures here")
    p.add_argument("--png", default=None, help="also draw the ratios here")
    g = p.add_argument_group("the real training step: fairseq-train itself, instead of the measures above")
    g.add_argument("--fairseq-train", action="store_true",
                   help="time fairseq-train runs of the plain transformer and HLT-MT of the same sizes (words/s from "
                        "its --log-format json log; the stage-high directions, hard routing at every update), "
                        "interleaved over --rounds, at each of --train-sizes")
    g.add_argument("--train-sizes", default="tiny,small,base", help=f"model sizes ({','.join(ARCHS)})")
    g.add_argument("--train-updates", default="tiny=60,small=40,base=20",
                   help="updates per fairseq-train run: one number, or SIZE=N for each size")
    g.add_argument("--train-log-interval", type=int, default=5, help="updates per logged words/s figure")
    g.add_argument("--train-systems", default="hltmt",
                   help=f"systems run against the baseline: {', '.join(n for n in TRAIN_SYSTEMS if n != 'baseline')} "
                        "('hltmt lsce': the HLT-MT model with fairseq's label_smoothed_cross_entropy, to tell the "
                        "criterion's cost from the model's)")
    g.add_argument("--profile", default=None, metavar="DIR",
                   help="with --fairseq-train: also profile the real training step of both systems (fairseq's "
                        "Trainer, both in one process, updates alternating): phases, cProfile, torch.profiler; the "
                        "profiles are kept in DIR")
    g.add_argument("--profile-size", default="small", choices=sorted(ARCHS), help="model size profiled")
    g.add_argument("--profile-updates", type=int, default=20, help="updates profiled, after 3 of warm-up")
    g.add_argument("--profile-top", type=int, default=12, help="functions and operators listed")
    args = p.parse_args(argv)
    args.derived = []
    names = ["baseline"] + [n for n in args.systems.split(",") if n and n != "baseline"]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        p.error(f"unknown system {','.join(unknown)}; choose from {','.join(SYSTEMS)}")
    if not os.path.exists(os.path.join(args.data, "dict.en.txt")):
        p.error(f"--data {args.data}: no binarized data there (dict.en.txt missing); run hltmt-prepare-data")
    for name in ("max_tokens", "batches", "rounds", "gen_sentences", "gen_len", "train_log_interval",
                 "profile_updates", "profile_top"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.gen_batch_size < 0:
        p.error(f"--gen-batch-size must be >= 0, got {args.gen_batch_size}")
    import hltmt_plugin  # noqa: F401

    try:
        derive_languages(args)
        if args.fairseq_train:
            parse_train_options(args)
    except BenchError as error:
        p.error(str(error))
    if args.derived:
        print(f"# from the data folder: {' '.join(args.derived)}", flush=True)
    if args.gen_directions is None:
        langs, high = args.langs.split(","), args.high.split(",")
        if "de" in langs and "gu" in langs:
            args.gen_directions = "en-de,en-gu"
        else:
            others = [x for x in langs if x not in high]
            args.gen_directions = ",".join(f"en-{x}" for x in [high[0]] + others[:1])

    if args.clock == "auto":
        args.clock = "cpu" if args.device == "cpu" and torch.get_num_threads() == 1 else "wall"
    if args.memory_child:
        return cuda_memory_child(args, args.memory_child)
    if args.fairseq_train:
        try:
            return fairseq_train_main(args)
        except BenchError as error:
            print(f"bench: error: {error}", file=sys.stderr)
            return 1

    systems = {name: build(args, name) for name in names}
    samples = batches(args, systems["hltmt" if "hltmt" in systems else "baseline"]["task"], args.batches)
    tgt_tokens = sum(int(s["ntokens"]) for s in samples)
    print(f"# {len(samples)} training batches, {tgt_tokens} target tokens per round, device {args.device}, "
          f"{torch.get_num_threads()} threads, {args.clock} clock, load {os.getloadavg()[0]:.2f}, torch "
          f"{torch.__version__}, systems {', '.join(names)}", flush=True)
    rates, work = time_training(args, systems, samples)
    mix_rates = None
    if "hltmt" in systems:  # the same batches with every row's language token set to one language
        single = [one_direction(s, systems["hltmt"]["task"], args.high.split(",")[0]) for s in samples]
        mix_rates = time_pair(args, systems["hltmt"], samples, single)
    gen_dirs = args.gen_directions.split(",")
    gen_systems = {n: s for n, s in systems.items() if n != "hltmt high"}  # stage high decodes as stage all
    gen, gen_work = time_generation(args, gen_systems, gen_dirs)
    memory = {name: training_bytes(args, s, samples[:5]) / 2 ** 20 for name, s in systems.items()}
    measured = {}
    if args.device == "cuda":
        for name in names:
            cmd = [sys.executable, __file__, "--data", args.data, "--langs", args.langs, "--high", args.high,
                   "--size", args.size, "--pool-size", str(args.pool_size), "--max-tokens", str(args.max_tokens),
                   "--batches", str(min(args.batches, 10)), "--device", args.device, "--dtype", args.dtype,
                   "--memory-child", name]
            out = subprocess.run(cmd, capture_output=True, text=True)
            measured[name] = json.loads(out.stdout.strip().splitlines()[-1])["peak_mib"] if out.returncode == 0 else None

    med = {name: statistics.median(v) for name, v in rates.items()}
    rows = []  # (measure, system, baseline figure, system figure, kind, predicted)
    base_model = systems["baseline"]["model"]
    for name in names[1:]:
        rows.append(("parameters", name, params(base_model), params(systems[name]["model"]), "size", None))
        rows.append(("train words/s", name, med["baseline"], med[name], "speed", work[name] / work["baseline"]))
        for d in gen_dirs:
            if name in gen_systems:
                rows.append((f"beam-5 tokens/s {d}", name, statistics.median(gen[("baseline", d)]),
                             statistics.median(gen[(name, d)]), "speed",
                             gen_work[(name, d)] / gen_work[("baseline", d)]))
        rows.append(("training memory (MiB, model)", name, memory["baseline"], memory[name], "size", None))
        if measured:
            rows.append(("peak CUDA memory (MiB)", name, measured["baseline"], measured[name], "size", None))
    if mix_rates:
        rows.append(("train words/s, mixed vs single-direction batches", "hltmt", mix_rates["single"],
                     mix_rates["mixed"], "speed", 1.0))
    print("\n| measure | system | baseline | system | ratio | the ratio is | predicted |")
    print("|---|---|---|---|---|---|---|")
    figures = []
    for measure, name, base, ours, kind, pred in rows:
        if base is None or ours is None:
            print(f"| {measure} | {name} | {base} | {ours} | | | |")
            continue
        ratio = base / ours if kind == "speed" else ours / base
        digits = 0 if measure == "parameters" else 1
        print(f"| {measure} | {name} | {base:,.{digits}f} | {ours:,.{digits}f} | {ratio:.3f} | {RATIO_IS[kind]} | "
              f"{'' if pred is None else f'{pred:.3f}'} |")
        figures.append({"measure": measure, "system": name, "baseline": base, "value": ours, "ratio": ratio,
                        "ratio_is": RATIO_IS[kind], "predicted": pred})
    print("\n(speed rows: the ratio is a time ratio, > 1 when the system is slower; size rows: > 1 when the "
          "system is larger. 'predicted' is the system's arithmetic over the baseline's on the same work.)")
    spread = {name: [round(min(v)), round(max(v))] for name, v in rates.items()}
    print(f"\nper-round training words/s (min, max): {json.dumps(spread)}")
    if args.png:
        plot(figures, args.png, f"{args.size} models, {args.device}, {torch.get_num_threads()} thread(s), "
                                f"{args.clock} clock, generation batches of {args.gen_batch_size or 'up to 4,000 tokens'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "threads": torch.get_num_threads(), "clock": args.clock,
                       "load": os.getloadavg()[0], "torch": torch.__version__, "rows": figures, "train_rounds": rates,
                       "gen_rounds": {f"{n} {d}": v for (n, d), v in gen.items()}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
