"""The real training step, timed: ``fairseq-train`` itself (``scripts/bench.py
--fairseq-train``) of the plain transformer and HLT-MT of the same sizes, runs interleaved over
rounds, words/s from fairseq-train's JSON log and per CPU-second of its updates; next to them
fairseq's Trainer of both systems in one process (:func:`bench_profile.run_pair`) and the
ratio the arithmetic predicts; the table, the JSON figures (with ``--profile``: the profile of
:mod:`bench_profile`) and the plot.

:func:`profile_child` is the child process of one run (``python scripts/bench.py
--profile-child SPEC``)."""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

from bench_profile import profile_fairseq_train, run_pair
from bench_speed import training_work
from bench_systems import (
    ARCHS,
    BENCH,
    TRAIN_SYSTEMS,
    BenchError,
    batches,
    build,
    fairseq_train_cmd,
    high_pairs,
    train_step_fn,
)
from hltmt_plugin import records as records
from hltmt_plugin.atomic_files import write_text
from hltmt_plugin.experiments.recipe import parse_train_log
from hltmt_plugin.experiments.runs import save_figure
from timing import add_spans, child_env, markdown_table, median, run_fairseq, span


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
        for key in [size] if size else ARCHS:
            updates[key] = int(n)
    missing = [x for x in sizes if x not in updates]
    if missing:
        raise BenchError(f"--train-updates gives no number for size {','.join(missing)}")
    for size in sizes:
        if updates[size] < 2 * args.train_log_interval:
            raise BenchError(
                f"--train-updates {size}={updates[size]}: at least 2 x --train-log-interval "
                f"({2 * args.train_log_interval}) updates, the first interval being left out"
            )
    args.train_sizes, args.train_updates = ",".join(sizes), updates


# what run_fairseq_train hands its child process (--profile-child), and what the child hands back
PROFILE_SPEC = records.Record(
    {
        "tool": str,
        "warmup": records.Int(low=0),
        "updates": records.Int(low=1),
        "out": records.Text(min_len=1),
        "argv": records.ListOf(str),
    }
)
PROFILE_RESULT = records.Record(
    {"wall": records.Number(low=0), "cpu": records.Number(low=0), "words": records.Int(low=0)}
)


def profile_child(spec_path):
    """fairseq-train itself (:func:`timing.run_fairseq`), the wall and CPU time and the target
    words of its updates after ``spec["warmup"]`` of them; the result goes to spec["out"]."""
    spec = records.read_json(spec_path, PROFILE_SPEC, "profile spec")
    record = run_fairseq("fairseq-train", spec["argv"])
    window = slice(spec["warmup"], spec["warmup"] + spec["updates"])
    spent = add_spans(*(span(a, b) for a, b in record["train_step"][window]))
    words = sum(record["step_tokens"][window])
    write_text(spec["out"], json.dumps({"wall": spent["wall"], "cpu": spent["cpu"], "words": words}))
    return 0


def run_fairseq_train(args, system, size, updates):
    """One fairseq-train run (fairseq_cli.train's own cli_main, in a child process that also
    notes each update's CPU time); its words/s from the JSON log (the median over log
    intervals, the first one, with the start-up, left out), its words per CPU-second of the
    updates after that first interval, and the batches it saw."""
    warm = args.train_log_interval
    with tempfile.TemporaryDirectory() as save:
        spec_path, out = os.path.join(save, "spec.json"), os.path.join(save, "out.json")
        spec = {
            "tool": "none",
            "warmup": warm,
            "updates": updates - warm,
            "out": out,
            "argv": fairseq_train_cmd(args, system, size, save, updates),
        }
        write_text(spec_path, json.dumps(spec))
        done = subprocess.run(
            [sys.executable, BENCH, "--profile-child", spec_path], capture_output=True, text=True, env=child_env()
        )
        if done.returncode != 0:
            raise BenchError(f"fairseq-train of {system} ({size}) failed:\n{(done.stdout + done.stderr)[-3000:]}")
        timed = records.read_json(out, PROFILE_RESULT, "profile result")
    intervals = parse_train_log(done.stdout + done.stderr).progress
    if len(intervals) < 2:
        raise BenchError(
            f"fairseq-train of {system} ({size}) logged {len(intervals)} interval(s): raise "
            f"--train-updates above 2 x --train-log-interval"
        )
    later = intervals[1:]
    return {
        "wps": median(r["wps"] for r in later),
        "wps_intervals": [r["wps"] for r in intervals],
        "cpu_wps": timed["words"] / timed["cpu"],
        "step_wall_wps": timed["words"] / timed["wall"],
        "batches": [(r["wpb"], r["bsz"]) for r in intervals],
    }


def predicted_train_ratio(args, size, n):
    """The arithmetic of an HLT-MT training step over the baseline's, on the stage-high batches."""
    sub = argparse.Namespace(**vars(args))
    sub.size, sub.pairs = size, high_pairs(args)
    systems = {name: build(sub, name) for name in ("baseline", "hltmt")}
    samples = batches(sub, systems["hltmt"]["task"], n)
    work = training_work({name: train_step_fn(sub, system) for name, system in systems.items()}, samples)
    return work["hltmt"] / work["baseline"]


def _time_runs(args, names, sizes):
    """fairseq-train runs of every (size, system), interleaved over --rounds (the order of the
    systems reversed every other round); the runs' figures by (size, system)."""
    runs = {(size, name): [] for size in sizes for name in names}
    for r in range(args.rounds):
        for size in sizes:
            order = names if r % 2 == 0 else names[::-1]
            for name in order:
                t = time.time()
                runs[(size, name)].append(run_fairseq_train(args, name, size, args.train_updates[size]))
                got = runs[(size, name)][-1]
                print(
                    f"# round {r + 1}/{args.rounds} {size} {name}: {got['wps']:,.0f} words/s (log), "
                    f"{got['cpu_wps']:,.0f} words per CPU-second ({time.time() - t:.0f}s, load "
                    f"{os.getloadavg()[0]:.2f})",
                    flush=True,
                )
    return runs


def _one_process(args, sizes):
    """Per size: the time ratio of fairseq's Trainer.train_step of both systems in one process,
    updates alternating (CPU and wall; CPU over each half of the updates)."""
    pairs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            t = time.time()
            got = run_pair(args, size, args.train_updates[size], ["phases"], os.path.join(tmp, f"{size}.json"))
            b, h = got["update_cpu"]["baseline"], got["update_cpu"]["hltmt"]
            half = len(b) // 2
            pairs[size] = {
                "cpu_ratio": sum(h) / sum(b),
                "wall_ratio": got["wall"]["hltmt"] / got["wall"]["baseline"],
                "halves": [sum(h[:half]) / sum(b[:half]), sum(h[half:]) / sum(b[half:])] if half else [],
                "baseline_cpu_wps": got["words"] / sum(b),
                "cpu_wps": got["words"] / sum(h),
            }
            print(
                f"# {size}: fairseq's Trainer.train_step of both systems in one process, {len(b)} updates "
                f"alternating: time ratio {pairs[size]['cpu_ratio']:.3f} (CPU), {pairs[size]['wall_ratio']:.3f} (wall)"
                f" ({time.time() - t:.0f}s, load {os.getloadavg()[0]:.2f})",
                flush=True,
            )
    return pairs


def _train_rows(args, names, sizes, runs, pairs):
    """One row per (size, system other than the baseline): medians over the rounds, ratios to
    the baseline, the one-process figure (HLT-MT's) and the predicted ratio."""
    rows = []
    for size in sizes:
        pred = predicted_train_ratio(args, size, min(args.batches, 5))
        base = [x for x in runs[(size, "baseline")]]
        for name in names[1:]:
            ours = runs[(size, name)]
            med = {key: (median(x[key] for x in base), median(x[key] for x in ours)) for key in ("wps", "cpu_wps")}
            same = all(a["batches"] == b["batches"] for a, b in zip(ours, base))
            rows.append(
                {
                    "size": size,
                    "system": name,
                    "baseline_wps": med["wps"][0],
                    "wps": med["wps"][1],
                    "ratio": med["wps"][0] / med["wps"][1],
                    "baseline_cpu_wps": med["cpu_wps"][0],
                    "cpu_wps": med["cpu_wps"][1],
                    "cpu_ratio": med["cpu_wps"][0] / med["cpu_wps"][1],
                    "predicted": pred,
                    "same_batches": same,
                    "one_process": pairs[size] if name == "hltmt" else None,
                    "rounds": [b["wps"] / o["wps"] for b, o in zip(base, ours)],
                    "cpu_rounds": [b["cpu_wps"] / o["cpu_wps"] for b, o in zip(base, ours)],
                }
            )
    return rows


def _print_train_table(rows):
    """Print the rows as a Markdown table, with what its ratios mean."""
    header = [
        "size",
        "system",
        "fairseq-train runs: words/s of the JSON log, baseline / system",
        "time ratio",
        "per round",
        "the same runs: words per CPU-second of the updates",
        "time ratio",
        "per round",
        "fairseq's Trainer.train_step, both in one process, updates alternating: time ratio (CPU; two halves)",
        "predicted (arithmetic)",
        "same batches",
    ]
    ratios = lambda xs: ", ".join(f"{x:.3f}" for x in xs)  # noqa: E731
    lines = [
        [
            row["size"],
            row["system"],
            f"{row['baseline_wps']:,.0f} / {row['wps']:,.0f}",
            f"{row['ratio']:.3f}",
            ratios(row["rounds"]),
            f"{row['baseline_cpu_wps']:,.0f} / {row['cpu_wps']:,.0f}",
            f"{row['cpu_ratio']:.3f}",
            ratios(row["cpu_rounds"]),
            f"**{pair['cpu_ratio']:.3f}** ({ratios(pair['halves'])})" if (pair := row["one_process"]) else "",
            f"{row['predicted']:.3f}",
            "yes" if row["same_batches"] else "NO",
        ]
        for row in rows
    ]
    print("\n" + markdown_table(header, lines))
    print(
        "\n(time ratio = baseline words/s / system words/s: > 1 when HLT-MT is slower. The JSON log's words/s "
        "is fairseq's wall-clock figure; the CPU figure counts the process's CPU time in the updates. Separate "
        "runs meet the machine's load at different times; the one-process figure alternates the two systems "
        "update by update on the same batches, so load hits both alike.)"
    )


def time_fairseq_train(args):
    """Words/s of fairseq-train itself, baseline against HLT-MT of the same sizes, runs
    interleaved (the order reversed every other round); ratios per size."""
    names = ["baseline"] + [n for n in args.train_systems.split(",") if n and n != "baseline"]
    sizes = args.train_sizes.split(",")
    runs = _time_runs(args, names, sizes)
    pairs = _one_process(args, sizes)
    rows = _train_rows(args, names, sizes, runs, pairs)
    _print_train_table(rows)
    return {"rows": rows, "runs": {f"{size} {name}": v for (size, name), v in runs.items()}}


def fairseq_train_main(args):
    """``bench.py --fairseq-train``: the timed runs (and with --profile the profile), the
    tables, and --png / --json."""
    print(
        f"# fairseq-train, {args.device}, OMP_NUM_THREADS={child_env()['OMP_NUM_THREADS']} per run, torch "
        f"{torch.__version__}, load {os.getloadavg()[0]:.2f}; data {args.data}: --langs {args.langs} --high "
        f"{args.high} --pool-size {args.pool_size}; directions {','.join(high_pairs(args))}",
        flush=True,
    )
    out = {
        "device": args.device,
        "threads": child_env()["OMP_NUM_THREADS"],
        "torch": torch.__version__,
        "langs": args.langs,
        "high": args.high,
        "pool_size": args.pool_size,
        "max_tokens": args.max_tokens,
        "updates": args.train_updates,
        "log_interval": args.train_log_interval,
    }
    out["fairseq_train"] = time_fairseq_train(args)
    if args.profile:
        out["profile"] = profile_fairseq_train(args)
    if args.png:
        plot_train(out["fairseq_train"]["rows"], args.png)
    if args.json:
        write_text(args.json, json.dumps(out, indent=1), "--json")
    return 0


def plot_train(rows, path):
    """Bars: measured time ratio of fairseq-train per size; dots: the arithmetic's prediction."""
    from hltmt_plugin.experiments.plots import pyplot

    plt = pyplot()

    fig, ax = plt.subplots(figsize=(9, 0.8 * len(rows) + 2.8))
    labels = [f"{r['system']}, {r['size']}" for r in rows]
    y = list(range(len(rows)))
    h = 0.27
    ax.barh(
        [i - h for i in y],
        [r["ratio"] - 1 for r in rows],
        height=h,
        left=1,
        color="#4c72b0",
        label="fairseq-train runs: words/s of the JSON log (wall clock)",
    )
    ax.barh(
        list(y),
        [r["cpu_ratio"] - 1 for r in rows],
        height=h,
        left=1,
        color="#55a868",
        label="the same runs: words per CPU-second of the updates",
    )
    ax.barh(
        [i + h for i in y],
        [(r["one_process"] or {}).get("cpu_ratio", 1) - 1 for r in rows],
        height=h,
        left=1,
        color="#c44e52",
        label="fairseq's Trainer.train_step, both systems in one process, alternating (CPU)",
    )
    ax.scatter([r["predicted"] for r in rows], y, color="#dd8452", zorder=3, label="predicted (arithmetic)")
    for i, r in enumerate(rows):
        ax.plot(r["rounds"], [i - h] * len(r["rounds"]), "|", color="black", ms=7)
        ax.plot(r["cpu_rounds"], [i] * len(r["cpu_rounds"]), "|", color="black", ms=7)
        if r["one_process"]:
            ax.plot(r["one_process"]["halves"], [i + h] * len(r["one_process"]["halves"]), "|", color="black", ms=7)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(
        "time ratio HLT-MT / plain transformer of the same size (= baseline words/s / HLT-MT words/s)\n"
        "ticks: the single rounds (runs), or the two halves of the alternating updates",
        fontsize=8,
    )
    ax.set_title("fairseq-train itself: the whole training step", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2)  # below: the bars fill the axes
    fig.tight_layout()
    save_figure(fig, path, dpi=120, option="--png")
    plt.close(fig)
