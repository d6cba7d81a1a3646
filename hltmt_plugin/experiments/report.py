#!/usr/bin/env python3
"""Build the results report from fairseq-generate outputs.

    hltmt-report --decode-dir RUN/decode --out RUN/report --high fr,de,cs,tr,fi,et \
        --baseline mnmt --system hltmt [--gate-checkpoint STAGE1/checkpoint_last.pt]

Reads ``DECODE/<system>/seed<N>/<src>-<tgt>.gen`` (fairseq-generate output with
``--remove-bpe``), scores every direction with sacreBLEU (BLEU: 13a, case-sensitive, on the
detokenized text; chrF) and writes to OUT:

- ``results.md``: BLEU and chrF per direction and system (mean +- std over seeds), the
  averages over high- and low-resource directions and over X->En / En->X, and the
  difference system minus baseline; the sacreBLEU signatures;
- ``results.csv``: one row per system, seed and direction;
- ``bleu.png``: the per-direction BLEU of every system, and the group averages; when the
  models have not converged (or convergence cannot be shown), the picture says so itself;
- ``valid_loss.png`` (with ``--valid-log``): every validation of every run, loss against
  updates, and whether each curve has flattened (converged) by the rule stated in results.md;
- ``gate_heatmap.png`` (with ``--gate-checkpoint``): the gate's distribution over the pool
  for each high-resource language (after stage 1, or at the end of training from a
  checkpoint that holds the fixed map), and the routing map.

results.md also names the machine (``--machine``, detected when not given), the run's sizes,
updates and tokens/s (``--run-info`` JSON from scripts/gpu_run.py), and sets the En->X
averages beside the HLT-MT paper's WMT-10 many-to-many En->X rows of the run's recipe
(``--paper-rows``: from scratch, MNMT 22.0 and no HLT-MT or LS-MNMT row; from XLM-R, XLM-R 22.4,
LS-MNMT 22.0, HLT-MT 23.1 BLEU: experiments/paper.py) and their deltas. Needs sacrebleu and matplotlib; the heatmap also
needs torch and fairseq (skipped, with a note, where they do not import). The plugin is
found from this file's repository, installed or not.
"""

import argparse
import csv
import os
import re
import statistics
import sys
from collections import defaultdict

from hltmt_plugin import records
from hltmt_plugin.cli import add_version, register
from hltmt_plugin.cli.output import AtomicOutput
from hltmt_plugin.experiments.paper import RECIPES
from hltmt_plugin.experiments.plots import pyplot
from hltmt_plugin.experiments.recipe import VALID_KEYS, read_train_log, score
from hltmt_plugin.experiments.runs import (
    FLAT_DROP,
    convergence,
    draw_gate,
    gate_of,
    read_gen,
    save_figure,
)
from hltmt_plugin.experiments.steps import detect_machine

GROUPS = ["En->X high", "En->X low", "X->En high", "X->En low", "high", "low", "En->X", "X->En", "all"]


def groups_of(direction, high):
    src, tgt = direction.split("-")
    other = tgt if src == "en" else src
    side = "En->X" if src == "en" else "X->En"
    level = "high" if other in high else "low"
    return [f"{side} {level}", level, side, "all"]


def score_all(decode_dir):
    rows, signatures = [], {}
    for system in sorted(os.listdir(decode_dir)):
        if not os.path.isdir(os.path.join(decode_dir, system)):
            continue  # e.g. this report's own files, when --out is the --decode-dir
        for seed_dir in sorted(os.listdir(os.path.join(decode_dir, system))):
            seed = int(re.sub(r"\D", "", seed_dir) or 0)
            folder = os.path.join(decode_dir, system, seed_dir)
            if not os.path.isdir(folder):
                continue
            for name in sorted(os.listdir(folder)):
                if not name.endswith(".gen"):
                    continue
                hyps, refs = read_gen(os.path.join(folder, name))
                scores = score(hyps, refs, signatures)
                rows.append(
                    {
                        "system": system,
                        "seed": seed,
                        "direction": name[:-4],
                        "sentences": len(refs),
                        "bleu": scores["bleu"],
                        "chrf": scores["chrf"],
                    }
                )
    if not rows:
        raise ValueError(f"no .gen files under {decode_dir}")
    return rows, signatures


def summarise(rows, high):
    """{(system, metric): {direction or group: [value per seed]}}"""
    table = defaultdict(lambda: defaultdict(list))
    per_seed = defaultdict(lambda: defaultdict(list))  # (system, metric, seed) -> group -> values
    for r in rows:
        for metric in ("bleu", "chrf"):
            table[(r["system"], metric)][r["direction"]].append(r[metric])
            for g in groups_of(r["direction"], high):
                per_seed[(r["system"], metric, r["seed"])][g].append(r[metric])
    for (system, metric, seed), groups in per_seed.items():
        for g, values in groups.items():
            table[(system, metric)][g].append(sum(values) / len(values))
    return table


def mean_std(values):
    if not values:
        return float("nan"), float("nan")
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def fmt(values):
    m, s = mean_std(values)
    return f"{m:.2f}" if len(values) <= 1 else f"{m:.2f} ± {s:.2f}"


def read_valid_logs(specs):
    """({system: [(seed, loss, nll_loss, ppl, updates)]} from the last validation line of each
    fairseq-train log, {system: {seed: [(updates, loss)]}} every validation of it);
    ``specs`` are ``SYSTEM=GLOB`` (the glob's files end in ``seed<N>.log``)."""
    import glob

    found, curves = {}, {}
    for spec in specs:
        system, _, pattern = spec.partition("=")
        if not system or not pattern:
            raise ValueError(f"--valid-log {spec!r}: expected SYSTEM=GLOB")
        for path in sorted(glob.glob(pattern)):
            seed = re.search(r"seed(\d+)", os.path.basename(path))
            if not seed:
                continue
            points = read_train_log(path).valid
            if not points:
                continue
            last = points[-1]
            found.setdefault(system, []).append(
                (int(seed.group(1)), *(float(last[k]) for k in VALID_KEYS[:3]), int(last["num_updates"]))
            )
            curve = sorted({int(p["num_updates"]): float(p["loss"]) for p in points}.items())
            curves.setdefault(system, {})[int(seed.group(1))] = curve
    return found, curves


def converged_summary(curves):
    """{system: (status, explanation)}: a system is flat only when every seed's curve is."""
    out = {}
    for system, by_seed in curves.items():
        states = [convergence(c) for _, c in sorted(by_seed.items())]
        worst = (
            next((st for st in states if st[0] == "falling"), None)
            or next((st for st in states if st[0] == "unknown"), None)
            or states[0]
        )
        out[system] = worst
    return out


# scripts/gpu_run.py's run.json: the run's facts and each system's figures, each a text or a number
# (what results.md prints), and the phases' times; nothing else
_FIGURE = records.OneOf(records.Text(max_len=10_000), records.Number())
_LABEL = records.Text(min_len=1, max_len=200)
RUN_INFO = records.Record(
    {
        "facts": records.MapOf(_FIGURE, key=_LABEL, max_len=1000),
        "systems": records.MapOf(records.MapOf(_FIGURE, key=_LABEL, max_len=100), key=_LABEL, max_len=100),
    },
    optional={"phases_s": records.MapOf(records.Number(low=0), key=_LABEL, max_len=100)},
)


def run_info_lines(info):
    """The run's sizes, updates and speeds from scripts/gpu_run.py's run.json."""
    lines = ["", "## The run", ""]
    for key, value in info.get("facts", {}).items():
        lines.append(f"- {key}: {value}")
    rows = info.get("systems", {})
    if rows:
        cols = list(dict.fromkeys(k for r in rows.values() for k in r))
        lines += ["", "| system | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
        for name, r in rows.items():
            lines.append(f"| {name} | " + " | ".join(str(r.get(c, "")) for c in cols) + " |")
    return lines


def groups_present(table, systems):
    """The averages that have directions in this run (a one-to-many run has no X->En rows)."""
    return [g for g in GROUPS if any(table[(s, "bleu")].get(g) for s in systems)]


def paper_lines(table, systems, baseline, recipe="scratch"):
    """Our En->X averages beside the paper's WMT-10 rows of ``recipe`` (experiments/paper.py), as
    deltas to the baseline; a system without a row says why."""
    rows = RECIPES[recipe].rows
    ours = {s: mean_std(table[(s, "bleu")].get("En->X", []))[0] for s in systems if s in rows}
    base = rows.get(baseline)
    if baseline not in ours or len(ours) < 2 or base is None or base.bleu is None:
        return []
    lines = [
        "",
        "## Beside the paper (En->X average BLEU)",
        "",
        "The paper's figures are WMT-10 many-to-many (Yang et al. 2022), its rows of systems "
        f"{'initialised from XLM-R' if recipe == 'xlmr' else 'trained from scratch'}; ours are this run's (other "
        "data, other sizes, other training length): compare the deltas to the baseline, not the levels.",
        "",
        f"| system | paper WMT-10 En->X | paper delta to {base.name} | ours En->X | our delta to {base.name} |",
        "|---|---|---|---|---|",
    ]
    for s in sorted(ours, key=list(rows).index):
        row, mine = rows[s], ours[s]
        paper = f"{row.bleu:.1f} | {row.bleu - base.bleu:+.1f}" if row.bleu is not None else f"{row.no_row} | "
        lines.append(f"| {row.name} ({s}) | {paper} | {mine:.2f} | {mine - ours[baseline]:+.2f} |")
    return lines


def write_markdown(
    path,
    table,
    systems,
    directions,
    baseline,
    system,
    signatures,
    title,
    note,
    seeds,
    valid=None,
    machine=None,
    run_info=None,
    conv=None,
    paper_rows="scratch",
):
    """results.md: the run's facts, convergence, validation, and the BLEU and chrF tables."""
    lines = [
        f"# {title}",
        "",
        f"Systems: {', '.join(systems)}; seeds: {seeds}. Test split, "
        "detokenized, case-sensitive; mean ± standard deviation over seeds.",
        "",
    ]
    if machine:
        lines.append(f"- Machine: {machine}")
    for sig_name, sig in signatures.items():
        lines.append(f"- sacreBLEU {sig_name} signature: `{sig}`")
    if conv is not None:
        lines += ["", verdict_of(conv)]
    if note:
        lines += ["", f"**Note.** {note}"]
    if run_info:
        lines += run_info_lines(run_info)
    if conv:
        lines += convergence_lines(conv, baseline)
    if valid:
        lines += valid_lines(valid, baseline)
    for metric, label in (("bleu", "BLEU"), ("chrf", "chrF")):
        lines += score_lines(table, systems, directions, baseline, system, metric, label)
        if metric == "bleu":
            lines += paper_lines(table, systems, baseline, paper_rows)
    with AtomicOutput(path, "--out") as f:
        f.write("\n".join(lines) + "\n")


def verdict_of(conv):
    """One line: whether every system's validation curves are flat (see :func:`converged_summary`)."""
    flat = bool(conv) and all(st == "flat" for st, _ in conv.values())
    if flat:
        return "**Converged**: every validation curve is flat."
    if conv:
        return (
            "**NOT CONVERGED**: "
            + "; ".join(f"{s} {st}" for s, (st, _) in sorted(conv.items()) if st != "flat")
            + " — BLEU differences between these systems do not rank the methods."
        )
    return "**Convergence not shown**: no validation in the training logs."


def convergence_lines(conv, baseline):
    """The convergence table: each system's status and its evidence."""
    lines = [
        "",
        "## Convergence (validation loss curves, valid_loss.png)",
        "",
        f"A curve is *flat* when the validation loss fell by less than {100 * FLAT_DROP:.0f}% over the "
        "last quarter of the run's updates; *falling* otherwise; *unknown* with fewer than 3 "
        "validations.",
        "",
        "| system | status | evidence |",
        "|---|---|---|",
    ]
    for name in sorted(conv, key=lambda s: (s != baseline, s)):
        st, why = conv[name]
        lines.append(f"| {name} | {st} | {why} |")
    return lines


def valid_lines(valid, baseline):
    """The last validation of each system's runs (mean ± std over seeds)."""
    lines = [
        "",
        "## Validation at the end of training",
        "",
        "The last validation of each run (valid split; label-smoothed loss, nll in bits, perplexity); "
        "lower is better, and the first place to look for convergence.",
        "",
        "| system | updates in the run | loss | nll_loss | ppl |",
        "|---|---|---|---|---|",
    ]
    for name in sorted(valid, key=lambda s: (s != baseline, s)):
        runs = valid[name]
        updates = sorted({r[4] for r in runs})
        lines.append(
            f"| {name} | {','.join(map(str, updates))} | "
            + " | ".join(fmt([r[i] for r in runs]) for i in (1, 2, 3))
            + " |"
        )
    return lines


def score_lines(table, systems, directions, baseline, system, metric, label):
    """The table of one metric: each direction and average per system, and ``system`` minus
    ``baseline`` when both ran."""
    diff = baseline in systems and system in systems
    header = ["direction"] + systems + ([f"{system} − {baseline}"] if diff else [])
    lines = ["", f"## {label}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key in directions + groups_present(table, systems):
        cells = [fmt(table[(s, metric)].get(key, [])) for s in systems]
        if diff:
            a, b = table[(system, metric)].get(key, []), table[(baseline, metric)].get(key, [])
            cells.append(f"{mean_std(a)[0] - mean_std(b)[0]:+.2f}" if a and b else "")
        name = f"**avg {key}**" if key in GROUPS else key
        lines.append("| " + " | ".join([name] + cells) + " |")
    return lines


def plot_bleu(path, table, systems, directions, title, warning=None):
    """BLEU bars; ``warning`` (models not converged) is written across the picture itself, and
    the y-axis spans at least 0..1 BLEU so near-zero scores still show as bars."""
    plt = pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(16, 5.6), gridspec_kw={"width_ratios": [3, 1.2]})
    top = 0.0
    for ax, keys in ((axes[0], directions), (axes[1], groups_present(table, systems))):
        width = 0.8 / len(systems)
        for i, s in enumerate(systems):
            stats = [mean_std(table[(s, "bleu")].get(k, [])) for k in keys]
            ax.bar(
                [x + i * width for x in range(len(keys))],
                [m for m, _ in stats],
                width,
                yerr=[sd for _, sd in stats],
                label=s,
                capsize=2,
            )
            top = max([top] + [m + sd for m, sd in stats if m == m])
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(keys))])
        ax.set_xticklabels(keys, rotation=60, ha="right", fontsize=8)
        ax.set_ylabel("BLEU")
        ax.grid(axis="y", alpha=0.3)
    for ax in axes:
        ax.set_ylim(0, max(1.0, top * 1.15))
    axes[0].set_title(f"{title}: BLEU per direction")
    axes[1].set_title("averages")
    axes[0].legend()
    if warning:
        fig.text(
            0.5,
            0.985,
            warning,
            ha="center",
            va="top",
            fontsize=12,
            fontweight="bold",
            color="white",
            bbox=dict(boxstyle="round", facecolor="#c0392b", edgecolor="none"),
        )
        fig.tight_layout(rect=(0, 0, 1, 0.93))
    else:
        fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def plot_valid(path, curves, conv, title):
    """Validation loss against updates, one line per run; the legend says flat/falling/unknown."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(8, 4.8))
    for system in sorted(curves):
        for seed, curve in sorted(curves[system].items()):
            st, _ = convergence(curve)
            ax.plot(
                [u for u, _ in curve],
                [loss for _, loss in curve],
                marker="o",
                markersize=3,
                label=f"{system} seed {seed}: {st}",
            )
    ax.set_xlabel("updates")
    ax.set_ylabel("validation loss (label-smoothed, bits)")
    ax.set_title(
        f"{title}: validation loss"
        + ("" if conv and all(s == "flat" for s, _ in conv.values()) else " (NOT all flat: not converged)"),
        fontsize=10,
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def gate_heatmap(path, checkpoint):
    """The gate P (languages x modules) and the routing map, as a picture; returns the
    languages and each one's module (the fixed map, or the argmax after stage 1)."""
    probs, langs, chosen, fixed = gate_of(checkpoint)
    draw_gate(
        path,
        probs,
        langs,
        chosen,
        "gate p(module | language) "
        + ("at the end of training\n(bold: the map fixed after stage 1)" if fixed else "after stage 1"),
    )
    return langs, chosen


def build_parser():
    """The command line of hltmt-report."""
    from hltmt_plugin.paths import READ_FILE, READ_FOLDER, READ_PATTERN, WORK_FOLDER, ArgumentParser, path_option

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    path_option(p, "--decode-dir", kind=READ_FOLDER, required=True, help="the decoded outputs (*.gen) of the systems")
    path_option(
        p,
        "--out",
        kind=WORK_FOLDER,
        in_place=("--decode-dir",),
        required=True,
        help="the report's folder (results.md, .csv, charts; may be --decode-dir: its own files are skipped)",
    )
    p.add_argument("--high", required=True, help="high-resource languages (comma-separated)")
    p.add_argument("--baseline", default="mnmt")
    p.add_argument("--system", default="hltmt")
    p.add_argument("--title", default="results")
    p.add_argument("--note", default="")
    path_option(
        p,
        "--gate-checkpoint",
        kind=READ_FILE,
        default=None,
        help="HLT-MT checkpoint for the gate heatmap: stage 1's, or a later one (it holds the fixed map)",
    )
    path_option(
        p,
        "--valid-log",
        kind=READ_PATTERN,
        action="append",
        default=[],
        metavar="SYSTEM=GLOB",
        help="fairseq-train logs of a system (files named ...seed<N>.log): report their last "
        "validation and their validation curve (repeatable)",
    )
    p.add_argument("--machine", default=None, help="the machine, in words (default: detected here)")
    p.add_argument(
        "--paper-rows",
        choices=sorted(RECIPES),
        default="scratch",
        help="the paper's WMT-10 rows set beside the En->X averages: those of systems trained from scratch "
        "(default) or initialised from XLM-R (examples/wmt10/README.md shows both)",
    )
    path_option(
        p,
        "--run-info",
        kind=READ_FILE,
        default=None,
        help="JSON of the run (scripts/gpu_run.py's run.json): sizes, updates, tokens/s",
    )
    return p


def read_inputs(args):
    """(scored rows, sacreBLEU signatures, last validations, validation curves, run info or
    None) from --decode-dir, --valid-log and --run-info; ValueError or OSError when one cannot
    be read."""
    rows, signatures = score_all(args.decode_dir)
    valid, curves = read_valid_logs(args.valid_log)
    run_info = None
    if args.run_info:
        run_info = records.read_json(args.run_info, RUN_INFO, "--run-info")
    return rows, signatures, valid, curves, run_info


def write_csv(path, rows):
    """results.csv: one row per system, seed and direction."""
    with AtomicOutput(path, "--out") as f:
        writer = csv.DictWriter(f, fieldnames=["system", "seed", "direction", "sentences", "bleu", "chrf"])
        writer.writeheader()
        writer.writerows({**r, "bleu": f"{r['bleu']:.2f}", "chrf": f"{r['chrf']:.2f}"} for r in rows)


def add_gate_heatmap(out, checkpoint, note, written):
    """gate_heatmap.png from ``checkpoint`` (added to ``written``); returns ``note`` with the
    routing map, or with why there is no heatmap."""
    try:
        langs, chosen = gate_heatmap(os.path.join(out, "gate_heatmap.png"), checkpoint)
    except ImportError as error:
        return (note + " " if note else "") + f"No gate heatmap: {error} (torch and fairseq must import)."
    except LookupError as error:
        return (note + " " if note else "") + f"No gate heatmap: {error}."
    from hltmt_plugin.pool.router import map_text  # torch and fairseq imported above

    mapping = map_text(dict(zip(langs, chosen)))
    written.append("gate_heatmap.png")
    return (note + " " if note else "") + f"Routing map after stage 1: {mapping} (gate_heatmap.png)."


def bleu_warning(conv, rows, note):
    """The line written across bleu.png when the models are not shown to be converged (None
    when they are, or when nothing says otherwise)."""
    if conv is not None and not (conv and all(st == "flat" for st, _ in conv.values())):
        return (
            "NOT CONVERGED: validation loss still falling or not shown"
            + (" (every score near 0)" if all(r["bleu"] < 0.5 for r in rows) else "")
            + " - these bars do not rank the methods"
        )
    if conv is None and note:
        return "Models not shown to be converged - these bars do not rank the methods"
    return None


def main(argv=None):
    args = add_version(build_parser()).parse_args(argv)
    register()  # torch and fairseq (checkpoints, the gate), once the arguments are read
    high = set(args.high.split(","))
    try:
        rows, signatures, valid, curves, run_info = read_inputs(args)
    except (ValueError, OSError) as error:
        print(f"hltmt-report: error: {error}", file=sys.stderr)
        return 2
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as error:
        print(f"hltmt-report: error: cannot write to --out {args.out}: {error.strerror or error}", file=sys.stderr)
        return 2
    systems = sorted({r["system"] for r in rows}, key=lambda s: (s != args.baseline, s != args.system, s))
    directions = sorted({r["direction"] for r in rows}, key=lambda d: (not d.startswith("en-"), d))
    seeds = sorted({r["seed"] for r in rows})
    table = summarise(rows, high)
    write_csv(os.path.join(args.out, "results.csv"), rows)
    note = args.note
    written = ["results.md", "results.csv", "bleu.png"]
    if args.gate_checkpoint and os.path.exists(args.gate_checkpoint):
        note = add_gate_heatmap(args.out, args.gate_checkpoint, note, written)
    conv = converged_summary(curves) if args.valid_log else None
    write_markdown(
        os.path.join(args.out, "results.md"),
        table,
        systems,
        directions,
        args.baseline,
        args.system,
        signatures,
        args.title,
        note,
        seeds,
        valid,
        machine=args.machine or detect_machine(),
        run_info=run_info,
        conv=conv,
        paper_rows=args.paper_rows,
    )
    plot_bleu(
        os.path.join(args.out, "bleu.png"), table, systems, directions, args.title, bleu_warning(conv, rows, args.note)
    )
    if curves:
        plot_valid(os.path.join(args.out, "valid_loss.png"), curves, conv, args.title)
        written.append("valid_loss.png")
    print(f"hltmt-report: {len(rows)} scored outputs -> {args.out}/" + ", ".join(written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
