#!/usr/bin/env python3
"""Side-by-side speed of the plain fairseq ``transformer`` and HLT-MT (alone, with adapters,
with skills) of the same sizes (docs/benchmarks.md).

    python scripts/bench.py --data runs/bench-data/bin                   # CPU (hltmt-prepare-data --out runs/bench-data)
    python scripts/bench.py --data DATA --device cuda --dtype bf16         # GPU
    python scripts/bench.py --data DATA --fairseq-train [--profile]       # fairseq's own training step

One process builds every system on the same task and data and times them interleaved round
by round on the same batches (bench_speed.py): training target words/s (``hltmt``: stage
all, fixed map; ``hltmt high``: hard/soft drawn per update; ``hltmt+adapters``;
``hltmt+skills``), a mixed-direction batch against single-direction batches of the same
tokens, beam-5 tokens/s with every hypothesis held to one length, parameters and training
memory. Each time ratio stands beside the one its arithmetic predicts (FLOPs counted by
``torch.utils.flop_counter``). ``--fairseq-train``: fairseq's Trainer of both systems in one
process at several sizes (bench_profile.py). A benchmark measures; nothing here passes or fails.
"""

import argparse
import os
import sys

import torch

from bench_profile import fairseq_train_main, pair_child, parse_train_options
from bench_speed import speed_main
from bench_systems import ARCHS, SYSTEMS, BenchError, derive_languages
from timing import HelpFormatter, child_main


def build_parser():
    """The options of the in-process measures, then those of --fairseq-train."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--data", required=True, help="binarized data from hltmt-prepare-data")
    p.add_argument(
        "--langs",
        default=None,
        help="non-English languages of the data (default: all of them, from its langs.txt or dict.XX.txt)",
    )
    p.add_argument(
        "--high",
        default=None,
        help="high-resource languages (default: DebMT-10's fr,de,cs,tr,fi,et among --langs, as the drivers')",
    )
    p.add_argument(
        "--pool-size",
        type=int,
        default=None,
        help="T, HLT-MT's pool modules (default: min(3, number of high-resource languages))",
    )
    p.add_argument("--systems", default=",".join(SYSTEMS), help="systems timed against the baseline")
    p.add_argument("--size", default="tiny", choices=sorted(ARCHS), help="model sizes (in-process measures)")
    p.add_argument("--max-tokens", type=int, default=4096, help="tokens per training batch")
    p.add_argument("--batches", type=int, default=20, help="training batches per round")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every measure")
    p.add_argument(
        "--gen-directions",
        default=None,
        help="directions timed for beam search (default: en-de,en-gu when the data has them, else "
        "en-<first high-resource>,en-<first other language>)",
    )
    p.add_argument("--gen-sentences", type=int, default=100, help="test sentences per direction")
    p.add_argument("--gen-len", type=int, default=20, help="target length every hypothesis is held to")
    p.add_argument(
        "--gen-batch-size",
        type=int,
        default=0,
        help="sentences per generation batch (0: up to 4,000 tokens; 1: interactive latency)",
    )
    p.add_argument(
        "--device",
        default="cuda" if torch.cuda.is_available() else "cpu",
        choices=["cpu", "cuda"],
        help="where the models run (cuda when there is one)",
    )
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"], help="autocast dtype")
    p.add_argument(
        "--clock",
        default="auto",
        choices=["auto", "cpu", "wall"],
        help="what the speeds are measured in: cpu (this process's CPU time: robust to other processes' "
        "load, right for one thread), wall; auto: cpu on a CPU with one torch thread, wall otherwise",
    )
    p.add_argument("--json", default=None, help="also write the figures here")
    p.add_argument("--png", default=None, help="also draw the ratios here")
    add_train_options(p)
    return p


def add_train_options(p):
    """The options of --fairseq-train (and its --profile)."""
    g = p.add_argument_group("the real training step: fairseq's own Trainer, instead of the measures above")
    g.add_argument(
        "--fairseq-train",
        action="store_true",
        help="time fairseq's Trainer.train_step of the plain transformer and HLT-MT of the same sizes, both "
        "built as fairseq-train builds them in one process, updates alternating on the same batches (the "
        "stage-high directions, hard routing at every update), at each of --train-sizes",
    )
    g.add_argument("--train-sizes", default="tiny,small,base", help=f"model sizes ({','.join(ARCHS)})")
    g.add_argument(
        "--train-updates",
        default="tiny=60,small=40,base=20",
        help="updates timed per system and size (after 3 of warm-up): one number, or SIZE=N for each size",
    )
    g.add_argument(
        "--profile",
        action="store_true",
        help="with --fairseq-train: also profile the training step at --profile-size: the CPU time of its phases",
    )
    g.add_argument("--profile-size", default="small", choices=sorted(ARCHS), help="model size profiled")
    g.add_argument("--profile-updates", type=int, default=20, help="updates profiled, after 3 of warm-up")


def check_args(p, args):
    """The systems timed (the baseline first); refuses, through ``p.error``, unknown systems,
    a folder without binarized data and numbers out of range."""
    names = ["baseline"] + [n for n in args.systems.split(",") if n and n != "baseline"]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        p.error(f"unknown system {','.join(unknown)}; choose from {','.join(SYSTEMS)}")
    if not os.path.exists(os.path.join(args.data, "dict.en.txt")):
        p.error(f"--data {args.data}: no binarized data there (dict.en.txt missing); run hltmt-prepare-data")
    for name in ("max_tokens", "batches", "rounds", "gen_sentences", "gen_len", "profile_updates"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.gen_batch_size < 0:
        p.error(f"--gen-batch-size must be >= 0, got {args.gen_batch_size}")
    return names


def fill_defaults(p, args):
    """The options whose defaults come from the data folder or the machine: --langs, --high,
    --pool-size (printed when derived), the --fairseq-train options, --gen-directions, --clock."""
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


def main(argv=None):
    """The command: a child process's measure (``--child pair``), or the
    options checked and the measures they ask for run."""
    argv = sys.argv[1:] if argv is None else argv
    child = child_main(argv, {"pair": pair_child})
    if child is not None:
        return child
    p = build_parser()
    args = p.parse_args(argv)
    args.derived = []
    names = check_args(p, args)
    import hltmt_plugin  # noqa: F401

    fill_defaults(p, args)
    if not args.fairseq_train:
        return speed_main(args, names)
    try:
        return fairseq_train_main(args)
    except BenchError as error:
        print(f"bench: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
