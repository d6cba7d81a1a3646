#!/usr/bin/env python3
"""Serving every direction of a model: one mixed-direction call vs one call per direction, side
by side in one run (docs/benchmarks.md).

    python scripts/bench_translate.py --json docs/bench_translate.json   # the study's HLT-MT model
    python scripts/bench_translate.py --checkpoint CKPT                  # a model of DebMT-10's languages

The same checkpoint (default: the quality study's committed HLT-MT, docs/results/cpu-study/models/,
with its sentencepiece model and dictionaries), N test sentences of every direction it was
trained on (DebMT-10's, of at most 12 English and 16 target words: the study's rule), beam,
length limit and batch size in every mode: ``mixed`` (one process loads the model once,
``hltmt_plugin.hub``, and translates everything in one ``translate_batch`` call),
``per-direction`` (one ``translate`` call per direction). Each mode runs in a process of its
own (its own peak memory: ``timing.run_measured``), rounds interleaved, medians over the
rounds; sentences/s translating (model loaded) and end to end; the hypotheses of the modes
compared.
"""

import argparse
import json
import os
import random
import sys
import time

from hltmt_plugin import records
from hltmt_plugin.atomic_files import write_text
from hltmt_plugin.experiments.recipe import SHORT_SEGMENTS
from timing import child_env, markdown_table, median, run_measured

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEBMT10 = os.path.join(ROOT, "data", "debmt10")
MODELS = os.path.join(ROOT, "docs", "results", "cpu-study", "models")
MODES = ("mixed", "per-direction")


def log(message):
    print(f"[bench_translate] {message}", file=sys.stderr, flush=True)


def sentences(raw, src, tgt, n):
    """The first ``n`` short test sentences of ``src``-``tgt`` (hltmt-prepare-data's reading of
    the test set, the study's --segment-words); one error line when they cannot be read."""
    from hltmt_plugin.cli.prepare_data import load_pair
    from hltmt_plugin.errors import HltmtError

    other = tgt if src == "en" else src
    try:
        en, xx = load_pair(raw, "test", other, n, SHORT_SEGMENTS)
    except HltmtError as error:
        sys.exit(f"bench_translate: error: {error}")
    return en if src == "en" else xx


def select_items(raw, directions, n):
    """(src, tgt, sentence): the first ``n`` test sentences of every direction, shuffled (seed 1)."""
    items = [(s, t, text) for s, t in directions for text in sentences(raw, s, t, n)]
    random.Random(1).shuffle(items)
    return items


def by_direction(items):
    """{(src, tgt): the indices of its items}, directions in the order they first occur."""
    groups = {}
    for i, (s, t, _) in enumerate(items):
        groups.setdefault((s, t), []).append(i)
    return groups


def resolve_model(args):
    """Load the checkpoint once, as the workers will: sets args.spm and args.data; the directions
    it was trained on, English's first. Exits with one error line when it cannot be loaded."""
    import logging

    logging.disable(logging.WARNING)  # the probe load's fairseq messages
    from hltmt_plugin.errors import HltmtError
    from hltmt_plugin.hub import HltmtTranslator

    try:
        probe = HltmtTranslator.load(args.checkpoint, spm=args.spm, data=args.data, device="cpu")
    except HltmtError as error:
        sys.exit(f"bench_translate: error: {error}")
    args.spm, args.data = probe.spm, args.data or str(probe.task.args.data)
    pairs = [(s, t) for s in probe.langs for t in probe.langs if s != t and probe.direction(s, t) == "trained"]
    return sorted(pairs, key=lambda pair: (pair[0] != "en", pair))


# ---------------------------------------------------------------------------------------
# workers (one process per mode and round)


def worker(args):
    """Load once, translate the items on standard input (JSON) as the mode says; print one JSON
    line (timings and hypotheses)."""
    import torch

    start = time.perf_counter()
    torch.set_num_threads(args.threads)
    from hltmt_plugin.hub import HltmtTranslator

    items = [tuple(item) for item in records.parse_json(sys.stdin.read(), "the items of a worker")]
    translator = HltmtTranslator.load(
        args.checkpoint, spm=args.spm, data=args.data, device=args.device, max_tokens=args.max_tokens
    )
    options = dict(beam=args.beam, max_len=args.max_len, lenpen=args.lenpen)
    translator.translate([items[0][2]], src=items[0][0], tgt=items[0][1], **options)  # warm-up, as a server would be
    loaded = time.perf_counter()
    if args.worker == "mixed":
        outputs = translator.translate_batch(items, **options)
    else:
        outputs = [None] * len(items)
        for (src, tgt), where in by_direction(items).items():
            for i, text in zip(where, translator.translate([items[i][2] for i in where], src=src, tgt=tgt, **options)):
                outputs[i] = text
    done = time.perf_counter()
    print(json.dumps({"load_s": loaded - start, "translate_s": done - loaded, "outputs": outputs}))


def run_checked(cmd, env, stdin_path=None):
    """Run ``cmd``; return (wall seconds, its peak RSS MiB, stdout text); exit with one error line
    when it fails."""
    done = run_measured(cmd, env=env, cwd=ROOT, stdin_path=stdin_path)
    if done.code != 0:
        sys.exit(f"bench_translate: error: {' '.join(cmd[:6])} ... failed (exit {done.code})")
    return done.wall_s, done.peak_mib, done.out


def worker_command(mode, args):
    """This script as a worker of ``mode`` (mixed or per-direction); its items come on standard input."""
    return [
        *[sys.executable, os.path.abspath(__file__), "--worker", mode, "--checkpoint", args.checkpoint],
        *["--spm", args.spm, "--data", args.data, "--beam", str(args.beam), "--max-len", str(args.max_len)],
        *["--lenpen", str(args.lenpen), "--max-tokens", str(args.max_tokens), "--threads", str(args.threads)],
        *["--device", args.device],
    ]


def run_mode(mode, args, items_path, env):
    """One round of ``mode``: its times, peak memory and outputs."""
    wall, rss, text = run_checked(worker_command(mode, args), env, stdin_path=items_path)
    result = records.parse_json(text.strip().splitlines()[-1], f"the result of the {mode} worker")
    return {"translate_s": result["translate_s"], "wall_s": wall, "peak_rss_mib": rss, "outputs": result["outputs"]}


def run_rounds(args, n, items_path, env):
    """--rounds rounds of every mode, interleaved; {mode: [each round's result]}."""
    runs = {mode: [] for mode in MODES}
    for r in range(args.rounds):
        for mode in MODES:
            result = run_mode(mode, args, items_path, env)
            runs[mode].append(result)
            log(
                f"round {r + 1} {mode}: {result['wall_s']:.1f} s end to end, "
                f"{n / result['translate_s']:.1f} sentences/s translating, peak {result['peak_rss_mib']:.0f} MiB"
            )
    return runs


# ---------------------------------------------------------------------------------------
# the summary


def mode_table(runs, n):
    """Each mode's medians over the rounds: sentences/s translating and end to end, wall time,
    peak memory."""
    table = {}
    for mode in MODES:
        rs = runs[mode]
        translate_s, wall_s = median([r["translate_s"] for r in rs]), median([r["wall_s"] for r in rs])
        table[mode] = {
            "translate_sent_per_s": n / translate_s,
            "end_to_end_sent_per_s": n / wall_s,
            "wall_s": wall_s,
            "peak_rss_mib": median([r["peak_rss_mib"] for r in rs]),
        }
    return table


def identical(runs):
    """How many hypotheses of the first round mixed shares with per-direction."""
    return sum(a == b for a, b in zip(runs["mixed"][0]["outputs"], runs["per-direction"][0]["outputs"]))


def ratios_of(table):
    mixed, per_dir = table["mixed"], table["per-direction"]
    return {
        "mixed/per-direction translating": mixed["translate_sent_per_s"] / per_dir["translate_sent_per_s"],
        "mixed/per-direction end to end": mixed["end_to_end_sent_per_s"] / per_dir["end_to_end_sent_per_s"],
        "mixed/per-direction peak memory": mixed["peak_rss_mib"] / per_dir["peak_rss_mib"],
    }


def report_lines(table, ratios, same, n):
    """The Markdown table of the modes, the ratios and the identical hypotheses, as printed."""
    cells = []
    for mode in MODES:
        row = table[mode]
        rates = [f"{row['translate_sent_per_s']:.1f}", f"{row['end_to_end_sent_per_s']:.1f}"]
        cells.append([mode, *rates, f"{row['wall_s']:.1f}", f"{row['peak_rss_mib']:.0f}"])
    header = ["mode", "sentences/s translating", "sentences/s end to end", "wall s", "peak RSS MiB"]
    lines = [*markdown_table(header, cells).split("\n"), ""]
    lines += [f"- {name}: **{value:.2f}**" for name, value in ratios.items()]
    lines.append(f"- identical hypotheses: mixed = per-direction {same}/{n}")
    return lines


def write_json(path, args, n, table, ratios, same, runs):
    record = {
        "sentences": n,
        "per_direction": args.per_direction,
        "directions": [f"{s}-{t}" for s, t in args.directions],
        "beam": args.beam,
        "max_len": args.max_len,
        "max_tokens": args.max_tokens,
        "threads": args.threads,
        "rounds": args.rounds,
        "checkpoint": os.path.relpath(os.path.abspath(args.checkpoint), ROOT),
        "modes": table,
        "ratios": ratios,
        "identical": same,
        "rounds_raw": {m: [{k: v for k, v in r.items() if k != "outputs"} for r in runs[m]] for m in MODES},
    }
    write_text(path, json.dumps(record, indent=1), "--json")


# ---------------------------------------------------------------------------------------


def build_parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--checkpoint",
        default=os.path.join(MODELS, "hltmt.pt"),
        help="a checkpoint trained on DebMT-10's languages (default: the study's HLT-MT)",
    )
    p.add_argument("--spm", default=None, help="its sentencepiece model (default: found as hltmt_plugin.hub finds it)")
    p.add_argument(
        "--data", default=None, help="its dictionaries' folder (default: found as hltmt_plugin.hub finds it)"
    )
    p.add_argument("--work", default=os.path.join(ROOT, "runs", "bench_translate"), help="folder for the inputs")
    p.add_argument("--raw", default=DEBMT10, help="DebMT-10 raw folder (test sentences)")
    p.add_argument("--per-direction", type=int, default=50, help="test sentences per direction")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--max-len", type=int, default=50, help="the most tokens of a translation (--max-len-b)")
    p.add_argument("--lenpen", type=float, default=1.0)
    p.add_argument("--max-tokens", type=int, default=4000, help="source tokens per batch, every mode")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch / OpenMP threads of every process")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", default=None, help="write the figures here")
    p.add_argument("--worker", choices=["mixed", "per-direction"], help=argparse.SUPPRESS)
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.worker:
        return worker(args)
    args.directions = resolve_model(args)
    os.makedirs(args.work, exist_ok=True)
    items = select_items(args.raw, args.directions, args.per_direction)
    items_path = os.path.abspath(os.path.join(args.work, "items.json"))
    write_text(items_path, json.dumps(items, ensure_ascii=False))
    log(
        f"{len(items)} sentences ({args.per_direction} per direction, {len(args.directions)} directions), "
        f"beam {args.beam}, max length {args.max_len}, {args.max_tokens} tokens per batch, {args.threads} thread(s), "
        f"{args.rounds} round(s)"
    )
    env = child_env(args.threads, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    n = len(items)
    runs = run_rounds(args, n, items_path, env)
    table = mode_table(runs, n)
    ratios, same = ratios_of(table), identical(runs)
    print("\n".join(report_lines(table, ratios, same, n)))
    if args.json:
        write_json(args.json, args, n, table, ratios, same, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
