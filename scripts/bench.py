#!/usr/bin/env python3
"""Side-by-side speed of the plain fairseq ``transformer`` and HLT-MT of the same sizes.

    python scripts/bench.py --data runs/debmt10-quick/data/bin            # CPU
    python scripts/bench.py --data DATA --device cuda --dtype bf16         # GPU

One process builds every system on the same task and data, takes the same training batches
(a fixed list from the real multilingual sampler: mixed directions) and measures, with the
systems interleaved round by round so that machine noise hits all of them alike:

- training target words/s: ``hltmt high`` (stage high, hard/soft drawn per update with
  p = 0.5), ``hltmt all`` (stage all, fixed map), and the baseline;
- a mixed-direction batch against single-direction batches of the same number of tokens
  (HLT-MT stage all);
- beam-5 generation sentences/s and tokens/s on test sentences of one high- and one
  low-resource direction;
- parameters, and peak memory of a training run of each system (its own subprocess,
  ``ru_maxrss`` on CPU, ``max_memory_allocated`` on CUDA).

It prints a table with the ratios HLT-MT / baseline and the ratio predicted from the added
arithmetic (one module per target token for hard routing, T for soft). A benchmark
measures; nothing here passes or fails.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGIN = os.path.join(ROOT, "hltmt_plugin")


def build(args, arch, extra=()):
    from fairseq import options, tasks

    parser = options.get_training_parser()
    langs = ["en"] + args.langs.split(",")
    pairs = [f"en-{x}" for x in langs[1:]] + [f"{x}-en" for x in langs[1:]]
    cli = [args.data, "--user-dir", PLUGIN, "--task", "hltmt_translation", "--arch", arch, "--langs", ",".join(langs),
           "--lang-pairs", ",".join(pairs), "--encoder-langtok", "tgt", "--hlt-stage", "all",
           "--max-tokens", str(args.max_tokens), "--optimizer", "adam", "--lr", "1e-4", "--dropout", "0.1",
           "--seed", "1", *extra]
    if arch.startswith("hltmt"):
        cli += ["--high-resource-langs", args.high, "--slp-pool-size", str(args.pool_size)]
    if args.device == "cpu":
        cli.append("--cpu")
    parsed = options.parse_args_and_arch(parser, cli)
    task = tasks.setup_task(parsed)
    torch.manual_seed(1)
    model = task.build_model(parsed).to(args.device)
    return parsed, task, model


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


def train_step_fn(args, model, task, parsed):
    from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

    criterion = LabelSmoothedCrossEntropyCriterion(task, False, 0.1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]

    def step(sample, update):
        model.train()
        model.set_num_updates(update)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(args.device, dtype=dtype, enabled=dtype is not None):
            loss, _, _ = criterion(model, sample)
        loss.backward()
        optimizer.step()

    return step


def sync(args):
    if args.device == "cuda":
        torch.cuda.synchronize()


def time_training(args, systems, samples):
    """Words/s per system, rounds interleaved; returns {name: [words/s per round]}."""
    steps = {name: train_step_fn(args, m, t, p) for name, (p, t, m) in systems.items()}
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
    return rates


def time_generation(args, system, direction, n_sentences):
    parsed, task, model = system
    from fairseq import utils

    from fairseq import options, tasks

    src, tgt = direction.split("-")
    langs = ["en"] + args.langs.split(",")
    gen_parser = options.get_generation_parser()
    inference = options.parse_args_and_arch(gen_parser, [
        args.data, "--user-dir", PLUGIN, "--task", "hltmt_translation", "--langs", ",".join(langs),
        "--lang-pairs", direction, "--encoder-langtok", "tgt", "-s", src, "-t", tgt, "--path", __file__])
    task = tasks.setup_task(inference)  # the data side only: the model is the one being timed
    task.load_dataset("test")
    dataset = task.dataset("test")
    gen_args = argparse.Namespace(beam=5, max_len_a=1.2, max_len_b=10, min_len=1, unnormalized=False, lenpen=1,
                                  unkpen=0, temperature=1.0, match_source_len=False, no_repeat_ngram_size=0,
                                  sampling=False, diverse_beam_groups=-1, diverse_beam_strength=0.5,
                                  diversity_rate=-1, prefix_size=0, sampling_topk=-1, sampling_topp=-1.0,
                                  constraints=None, print_alignment=None, retain_dropout=False, score_reference=False)
    generator = task.build_generator([model], gen_args)
    itr = task.get_batch_iterator(dataset=dataset, max_tokens=4000, max_positions=(1024, 1024), seed=1)
    model.eval()
    sents = toks = 0
    sync(args)
    t0 = time.perf_counter()
    for sample in itr.next_epoch_itr(shuffle=False):
        sample = utils.move_to_cuda(sample) if args.device == "cuda" else sample
        hypos = task.inference_step(generator, [model], sample)
        sents += len(hypos)
        toks += sum(len(h[0]["tokens"]) for h in hypos)
        if sents >= n_sentences:
            break
    sync(args)
    elapsed = time.perf_counter() - t0
    return sents / elapsed, toks / elapsed


def one_direction(sample, task, lang):
    """A copy of sample whose rows all carry lang's target-language token."""
    src = sample["net_input"]["src_tokens"].clone()
    first = src.ne(task.source_dictionary.pad()).long().argmax(dim=1)
    src[torch.arange(src.size(0)), first] = task.data_manager.get_encoder_langtok("en", lang, "tgt")
    return {**sample, "net_input": {**sample["net_input"], "src_tokens": src}}


def time_pair(args, system, first, second):
    """Words/s of the same model on two lists of batches, interleaved."""
    parsed, task, model = system
    step = train_step_fn(args, model, task, parsed)
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


def predicted(model, src_tgt_ratio, modules_per_token):
    """1 + (multiply-adds of the routed modules per target token) / (the baseline's)."""
    d = model.decoder
    slp = d.slp
    extra = sum(p.numel() for p in slp.universal.parameters() if p.dim() == 2) * modules_per_token
    enc = sum(p.numel() for n, p in model.encoder.named_parameters() if p.dim() == 2 and "embed" not in n)
    dec = sum(p.numel() for n, p in d.named_parameters() if p.dim() == 2 and "embed" not in n and "slp" not in n)
    out = d.embed_tokens.weight.numel()  # the output projection
    return 1 + extra / (dec + out + enc * src_tgt_ratio)


def memory_child(args, arch, extra):
    """Peak memory of a training loop of one system, in its own process (MiB)."""
    parsed, task, model = build(args, arch, extra)
    samples = batches(args, task, args.batches)
    step = train_step_fn(args, model, task, parsed)
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for i, sample in enumerate(samples):
        step(sample, i)
    if args.device == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2 ** 20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"peak_mib": peak}))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="binarized data from scripts/prepare_data.py")
    p.add_argument("--langs", default="fr,cs,de,fi,lv,et,ro,hi,tr,gu")
    p.add_argument("--high", default="fr,de,cs,tr,fi,et")
    p.add_argument("--size", default="tiny", choices=["tiny", "small", "base"])
    p.add_argument("--pool-size", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--batches", type=int, default=20, help="training batches per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--gen-sentences", type=int, default=100)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    p.add_argument("--memory-child", nargs=2, metavar=("ARCH", "EXTRA_JSON"), help=argparse.SUPPRESS)
    p.add_argument("--json", default=None, help="also write the figures here")
    args = p.parse_args(argv)
    import hltmt_plugin  # noqa: F401

    archs = {"tiny": ("transformer_hltmt_tiny", "hltmt_transformer_tiny"),
             "small": ("transformer_hltmt_small", "hltmt_transformer_small"),
             "base": ("transformer", "hltmt_transformer")}[args.size]
    if args.memory_child:
        return memory_child(args, args.memory_child[0], json.loads(args.memory_child[1]))

    systems = {"baseline": build(args, archs[0]), "hltmt": build(args, archs[1])}
    systems["hltmt"][2].slp.fix_map_to(torch.arange(len(args.high.split(","))) % args.pool_size)
    high = build(args, archs[1], ["--hlt-stage", "high"])
    systems["hltmt high"] = high
    samples = batches(args, systems["baseline"][1], args.batches)
    src_tokens = sum(int(s["net_input"]["src_lengths"].sum()) for s in samples)
    tgt_tokens = sum(int(s["ntokens"]) for s in samples)
    print(f"# {len(samples)} training batches, {tgt_tokens} target tokens per round, device {args.device}, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}", flush=True)
    rates = time_training(args, systems, samples)

    # the same batches with every row's language token set to one language: same tokens,
    # one routing path (stage all)
    single = [one_direction(s, systems["hltmt"][1], args.high.split(",")[0]) for s in samples]
    mix_rates = time_pair(args, systems["hltmt"], samples, single)
    med = {name: statistics.median(v) for name, v in rates.items()}

    gen = {}
    for name in ("baseline", "hltmt"):
        for direction in ("en-de", "en-gu"):
            gen[(name, direction)] = time_generation(args, systems[name], direction, args.gen_sentences)

    memory = {}
    for name, arch, extra in (("baseline", archs[0], []), ("hltmt", archs[1], []),
                              ("hltmt high", archs[1], ["--hlt-stage", "high"])):
        cmd = [sys.executable, __file__, "--data", args.data, "--langs", args.langs, "--high", args.high,
               "--size", args.size, "--pool-size", str(args.pool_size), "--max-tokens", str(args.max_tokens),
               "--batches", str(min(args.batches, 10)), "--device", args.device, "--dtype", args.dtype,
               "--memory-child", arch, json.dumps(extra)]
        out = subprocess.run(cmd, capture_output=True, text=True)
        memory[name] = json.loads(out.stdout.strip().splitlines()[-1])["peak_mib"] if out.returncode == 0 else None

    model = systems["hltmt"][2]
    ratio_src = src_tokens / tgt_tokens
    pred_hard = predicted(model, ratio_src, 1)
    pred_high = predicted(model, ratio_src, 1 + 0.5 * (args.pool_size - 1))  # half hard (1 module), half soft (T)
    rows = [
        ("parameters", params(systems["baseline"][2]), params(model), None),
        ("train words/s, stage all (fixed map)", med["baseline"], med["hltmt"], pred_hard),
        ("train words/s, stage high (hard/soft, T=%d)" % args.pool_size, med["baseline"], med["hltmt high"], pred_high),
    ]
    for direction in ("en-de", "en-gu"):
        rows.append((f"beam-5 sentences/s {direction}", gen[("baseline", direction)][0], gen[("hltmt", direction)][0],
                     pred_hard))
        rows.append((f"beam-5 tokens/s {direction}", gen[("baseline", direction)][1], gen[("hltmt", direction)][1],
                     pred_hard))
    rows.append(("train words/s: single-direction vs mixed batches (HLT-MT)", mix_rates["single"],
                 mix_rates["mixed"], 1.0))
    rows.append(("peak training memory (MiB)", memory["baseline"], memory["hltmt"], None))
    rows.append(("peak training memory, stage high (MiB)", memory["baseline"], memory["hltmt high"], None))
    print("| measure | baseline | HLT-MT | time ratio HLT-MT/baseline | predicted |")
    print("|---|---|---|---|---|")
    figures = []
    for name, base, ours, pred in rows:
        if base is None or ours is None:
            print(f"| {name} | {base} | {ours} | | |")
            continue
        speed = "/s" in name
        ratio = base / ours if speed else ours / base
        print(f"| {name} | {base:,.1f} | {ours:,.1f} | {ratio:.3f} | {'' if pred is None else f'{pred:.3f}'} |")
        figures.append({"measure": name, "baseline": base, "hltmt": ours, "ratio": ratio, "predicted": pred})
    spread = {name: (min(v), max(v)) for name, v in rates.items()}
    print(f"\nper-round words/s (min, max): {json.dumps(spread)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": figures, "rounds": rates}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
