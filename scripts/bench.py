#!/usr/bin/env python3
"""Side-by-side speed of the plain fairseq ``transformer`` and HLT-MT (alone, with adapters,
with skills) of the same sizes.

    python scripts/bench.py --data runs/debmt10-quick/data/bin            # CPU
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
DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
ARCHS = {"tiny": ("transformer_hltmt_tiny", "hltmt_transformer_tiny"),
         "small": ("transformer_hltmt_small", "hltmt_transformer_small"),
         "base": ("transformer", "hltmt_transformer")}


def pairs_of(args):
    langs = args.langs.split(",")
    return ["en"] + langs, [f"en-{x}" for x in langs] + [f"{x}-en" for x in langs]


def build(args, name):
    from fairseq import options, tasks

    is_hltmt, extra = SYSTEMS[name]
    langs, pairs = pairs_of(args)
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
        model.slp.fix_map_to(torch.arange(len(args.high.split(","))) % args.pool_size)
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


def sync(args):
    if args.device == "cuda":
        torch.cuda.synchronize()


def flops(fn):
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def time_training(args, systems, samples):
    """Words/s per system, rounds interleaved; also the FLOPs of one round."""
    steps = {name: train_step_fn(args, s) for name, s in systems.items()}
    for name, step in steps.items():  # warm-up
        for i, s in enumerate(samples[:3]):
            step(s, i)
    words = sum(int(s["ntokens"]) for s in samples)
    rates = {name: [] for name in systems}
    for r in range(args.rounds):
        for name, step in steps.items():
            sync(args)
            t0 = time.perf_counter()
            for i, sample in enumerate(samples):
                step(sample, 1000 * r + i)
            sync(args)
            rates[name].append(words / (time.perf_counter() - t0))
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
                t0 = time.perf_counter()
                toks = run()
                sync(args)
                rates.setdefault((name, direction), []).append(toks / (time.perf_counter() - t0))
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
    """Words/s of the same model on two lists of batches, interleaved."""
    step = train_step_fn(args, system)
    words = sum(int(s["ntokens"]) for s in first)
    rates = {"mixed": [], "single": []}
    for r in range(args.rounds):
        for name, batch_list in (("mixed", first), ("single", second)):
            sync(args)
            t0 = time.perf_counter()
            for i, sample in enumerate(batch_list):
                step(sample, i)
            sync(args)
            rates[name].append(words / (time.perf_counter() - t0))
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [f for f in figures if f["measure"] != "parameters"]
    labels = [f"{f['system']}: {f['measure']}" for f in rows]
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(rows) + 1.2))
    y = range(len(rows))
    ax.barh(list(y), [f["ratio"] - 1 for f in rows], left=1, color="#4c72b0", label="measured")
    pred = [(i, f["predicted"]) for i, f in enumerate(rows) if f["predicted"] is not None]
    ax.scatter([p for _, p in pred], [i for i, _ in pred], color="#dd8452", zorder=3, label="predicted (arithmetic)")
    ax.axvline(1.0, color="black", lw=0.8)
    ax.axvline(1.06, color="grey", ls="--", lw=0.8, label="1.06")
    ax.set_yticks(list(y), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ratio to the plain fairseq transformer (time, or memory)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="binarized data from scripts/prepare_data.py")
    p.add_argument("--langs", default="fr,cs,de,fi,lv,et,ro,hi,tr,gu", help="non-English languages of the data")
    p.add_argument("--high", default="fr,de,cs,tr,fi,et", help="high-resource languages")
    p.add_argument("--systems", default=",".join(SYSTEMS), help=f"systems besides the baseline ({','.join(SYSTEMS)})")
    p.add_argument("--size", default="tiny", choices=sorted(ARCHS))
    p.add_argument("--pool-size", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--batches", type=int, default=20, help="training batches per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--gen-directions", default="en-de,en-gu", help="directions timed for beam search")
    p.add_argument("--gen-sentences", type=int, default=100, help="test sentences per direction")
    p.add_argument("--gen-len", type=int, default=20, help="target length every hypothesis is held to")
    p.add_argument("--gen-batch-size", type=int, default=0,
                   help="sentences per generation batch (default: up to 4,000 tokens; 1: interactive latency)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    p.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--json", default=None, help="also write the figures here")
    p.add_argument("--png", default=None, help="also draw the ratios here")
    args = p.parse_args(argv)
    names = ["baseline"] + [n for n in args.systems.split(",") if n and n != "baseline"]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        p.error(f"unknown system {','.join(unknown)}; choose from {','.join(SYSTEMS)}")
    if not os.path.exists(os.path.join(args.data, "dict.en.txt")):
        p.error(f"--data {args.data}: no binarized data there (dict.en.txt missing); run scripts/prepare_data.py")
    import hltmt_plugin  # noqa: F401

    if args.memory_child:
        return cuda_memory_child(args, args.memory_child)

    systems = {name: build(args, name) for name in names}
    samples = batches(args, systems["hltmt" if "hltmt" in systems else "baseline"]["task"], args.batches)
    tgt_tokens = sum(int(s["ntokens"]) for s in samples)
    print(f"# {len(samples)} training batches, {tgt_tokens} target tokens per round, device {args.device}, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}, systems {', '.join(names)}", flush=True)
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
    print("\n| measure | system | baseline | system | ratio system/baseline | predicted |")
    print("|---|---|---|---|---|---|")
    figures = []
    for measure, name, base, ours, kind, pred in rows:
        if base is None or ours is None:
            print(f"| {measure} | {name} | {base} | {ours} | | |")
            continue
        ratio = base / ours if kind == "speed" else ours / base  # speed: a time ratio
        digits = 0 if measure == "parameters" else 1
        print(f"| {measure} | {name} | {base:,.{digits}f} | {ours:,.{digits}f} | {ratio:.3f} | "
              f"{'' if pred is None else f'{pred:.3f}'} |")
        figures.append({"measure": measure, "system": name, "baseline": base, "value": ours, "ratio": ratio,
                        "predicted": pred})
    spread = {name: [round(min(v)), round(max(v))] for name, v in rates.items()}
    print(f"\nper-round training words/s (min, max): {json.dumps(spread)}")
    if args.png:
        plot(figures, args.png, f"{args.size} models, {args.device}, {torch.get_num_threads()} thread(s), "
                                f"generation batches of {args.gen_batch_size or 'up to 4,000 tokens'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "threads": torch.get_num_threads(), "torch": torch.__version__,
                       "rows": figures, "train_rounds": rates,
                       "gen_rounds": {f"{n} {d}": v for (n, d), v in gen.items()}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
