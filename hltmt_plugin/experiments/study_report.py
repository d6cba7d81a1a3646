"""The quality study's report, rebuilt from its results folder alone (``hltmt-study`` calls it;
``hltmt-study --report-only`` rebuilds it).

Reads ``RESULTS/runs/<system>.seed<N>/<pair>.hyp`` and ``RESULTS/refs/<pair>.ref`` (so every
figure is recomputed from the committed text), the runs' training logs and HLT-MT's
``gate.json``, and writes to RESULTS:

- ``results.csv``: system, seed, direction, bleu, chrf (sacreBLEU: BLEU 13a case-sensitive on
  the detokenized text, chrF);
- ``significance.csv``: sacreBLEU's paired bootstrap resampling (1,000 resamples, its fixed
  seed), HLT-MT against MNMT, against LS-MNMT and against the staged-data MNMT (the pool's
  share alone), per seed and direction and over all
  directions together (the concatenated test sets), BLEU and chrF: both scores and the p-value;
- ``report.md``: the tables (per direction, mean ± standard deviation over seeds; high- and
  low-resource averages; the paper's one-to-many table beside ours), the regime the models
  reached and the significance in words;
- ``bleu.png``, ``valid_loss.png``, ``gate_seed<N>.png``.
"""

import csv
import glob
import json
import logging
import os
import re
import statistics
from collections import defaultdict

from hltmt_plugin import text
from hltmt_plugin.cli.output import AtomicOutput
from hltmt_plugin.experiments.plots import pyplot
from hltmt_plugin.experiments.recipe import read_train_log, score
from hltmt_plugin.experiments.runs import convergence, draw_gate, read_gate, read_scores, save_figure
from hltmt_plugin.pool.router import map_text

ORDER = ["mnmt", "mnmt-staged", "lsmnmt", "hltmt"]
NAMES = {"mnmt": "MNMT", "mnmt-staged": "MNMT, staged data", "lsmnmt": "LS-MNMT", "hltmt": "HLT-MT"}
# HLT-MT is tested against these (the staged-data MNMT has HLT-MT's schedule: the difference is the pool's)
BASELINES = ("mnmt", "lsmnmt", "mnmt-staged")
# what the study asks of its baseline before a comparison counts: a model that translates
REGIME_BLEU = 10.0


def read_text(path):
    """The lines of a hypothesis or reference file (:func:`hltmt_plugin.text.read_lines`)."""
    return text.read_lines(path)


def load_runs(results):
    """{(system, seed): {pair: hypotheses}}, {pair: references}, {pair: high-resource?} and the setting."""
    runs, refs = {}, {}
    setting, high = None, set()
    for scores in sorted(glob.glob(os.path.join(results, "runs", "*.seed*", "scores.json"))):
        folder = os.path.dirname(scores)
        meta = read_scores(scores)
        setting = meta["setting"]
        runs[(meta["system"], meta["seed"])] = {
            pair: read_text(os.path.join(folder, f"{pair}.hyp")) for pair in meta["scores"]
        }
        high = set(meta.get("high", high))
    for system_seed, hyps in runs.items():
        for pair, lines in hyps.items():
            refs.setdefault(pair, read_text(os.path.join(results, "refs", f"{pair}.ref")))
            if len(refs[pair]) != len(lines):
                raise ValueError(f"{system_seed}: {pair}.hyp has {len(lines)} lines, the references {len(refs[pair])}")
    return runs, refs, high, setting


def score_rows(runs, refs):
    rows = []
    for (system, seed), hyps in sorted(runs.items(), key=lambda r: (ORDER.index(r[0][0]), r[0][1])):
        for pair in sorted(hyps):
            rows.append(
                {
                    "system": system,
                    "seed": seed,
                    "direction": pair,
                    **{k: round(v, 2) for k, v in score(hyps[pair], refs[pair]).items()},
                }
            )
    return rows


def group_means(rows, high):
    """{(system, seed): {'high': mean BLEU, 'low': ..., 'all': ...}} (and chrF as 'chrf high' ...)."""
    groups = defaultdict(lambda: defaultdict(list))
    for r in rows:
        level = "high" if r["direction"][3:] in high else "low"
        for key in (level, "all"):
            groups[(r["system"], r["seed"])][key].append(r["bleu"])
            groups[(r["system"], r["seed"])]["chrf " + key].append(r["chrf"])
    return {k: {g: statistics.mean(v) for g, v in d.items()} for k, d in groups.items()}


def mean_sd(values):
    if not values:
        return ""
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f}"


def significance(runs, refs):
    """Paired bootstrap rows: HLT-MT against each of BASELINES, for every seed both
    ran, per direction and over all directions."""
    from sacrebleu.metrics import BLEU, CHRF
    from sacrebleu.significance import PairedTest

    logging.getLogger("sacrebleu").setLevel(logging.WARNING)  # a line per test otherwise
    rows = []
    for baseline in BASELINES:
        for (system, seed), hyps in sorted(runs.items()):
            if system != "hltmt" or (baseline, seed) not in runs:
                continue
            base = runs[(baseline, seed)]
            pairs = sorted(hyps)
            for pair in pairs + ["all"]:
                chosen = pairs if pair == "all" else [pair]
                ref = [r for p in chosen for r in refs[p]]
                named = [
                    (baseline, [h for p in chosen for h in base[p]]),
                    ("hltmt", [h for p in chosen for h in hyps[p]]),
                ]
                _, scores = PairedTest(named, {"BLEU": BLEU(), "chrF": CHRF()}, [ref], test_type="bs")()
                row = {"system": "hltmt", "baseline": baseline, "seed": seed, "direction": pair}
                per_metric = [
                    v for k, v in scores.items() if k != "System"
                ]  # [baseline, hltmt] of each metric, in the order asked
                for metric, (b, s) in zip(("bleu", "chrf"), per_metric):
                    row.update(
                        {
                            f"{metric}_baseline": round(b.score, 2),
                            f"{metric}_hltmt": round(s.score, 2),
                            f"{metric}_p": s.p_value,
                        }
                    )
                rows.append(row)
    return rows


def write_csv(path, rows):
    with AtomicOutput(path) as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["system"], lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def valid_curves(results):
    """{system: {seed: [(updates, loss)]}} from every validation in the runs' training logs."""
    curves = defaultdict(dict)
    for folder in sorted(glob.glob(os.path.join(results, "runs", "*.seed*"))):
        system, seed = re.match(r"(.+)\.seed(\d+)$", os.path.basename(folder)).groups()
        points = {
            int(p["num_updates"]): float(p["loss"])
            for log in sorted(glob.glob(os.path.join(folder, "train*.log")))
            for p in read_train_log(log).valid
        }
        if points:
            curves[system][int(seed)] = sorted(points.items())
    return curves


def finish(plt, fig, ax, path, legend_size, grid="both"):
    """Grid, legend, layout, the PNG written whole, the figure closed."""
    ax.grid(axis=grid, alpha=0.3)
    ax.legend(fontsize=legend_size)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def plot_bleu(path, rows, high):
    """Per-direction BLEU, mean over seeds with the seeds' range, one bar per system."""
    plt = pyplot()
    pairs = sorted({r["direction"] for r in rows}, key=lambda p: (p[3:] not in high, p))
    systems = [s for s in ORDER if any(r["system"] == s for r in rows)]
    fig, ax = plt.subplots(figsize=(11, 4.2))
    width = 0.8 / max(1, len(systems))
    for i, system in enumerate(systems):
        values = [[r["bleu"] for r in rows if r["system"] == system and r["direction"] == p] for p in pairs]
        means = [statistics.mean(v) if v else 0 for v in values]
        low = [m - min(v) if v else 0 for m, v in zip(means, values)]
        up = [max(v) - m if v else 0 for m, v in zip(means, values)]
        ax.bar(
            [x + i * width for x in range(len(pairs))],
            means,
            width,
            yerr=[low, up],
            capsize=2,
            label=f"{NAMES[system]} ({len({r['seed'] for r in rows if r['system'] == system})} seed(s))",
        )
    ax.set_xticks([x + width * (len(systems) - 1) / 2 for x in range(len(pairs))])
    ax.set_xticklabels([p + (" (high)" if p[3:] in high else "") for p in pairs], rotation=30, fontsize=8)
    ax.set_ylabel("test BLEU (mean over seeds; bars: min-max)")
    ax.set_title("DebMT-10 one-to-many En->X, short segments, tiny models on a CPU", fontsize=10)
    finish(plt, fig, ax, path, 8, grid="y")


def plot_valid(path, curves, high_updates):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.8))
    for system in [s for s in ORDER if s in curves]:
        for seed, curve in sorted(curves[system].items()):
            ax.plot(
                [u for u, _ in curve],
                [loss for _, loss in curve],
                marker="o",
                markersize=2,
                label=f"{NAMES[system]} seed {seed}: {convergence(curve)[0]}",
            )
    if high_updates:
        ax.axvline(high_updates, color="grey", linestyle=":", linewidth=1)
        ax.text(high_updates, ax.get_ylim()[1], " stage high | all", va="top", fontsize=8, color="grey")
    ax.set_xlabel("updates")
    ax.set_ylabel("validation loss (label-smoothed, base 2)")
    ax.set_title(
        "validation loss of every run (staged runs: the high-resource directions only before the line)", fontsize=9
    )
    finish(plt, fig, ax, path, 7)


def plot_gate(path, gate, seed):
    draw_gate(
        path,
        gate["probs"],
        gate["langs"],
        gate["map"],
        f"HLT-MT seed {seed}: gate p(module | language)\nat the end (bold: the routing map)",
    )


def per_system(means, system, group):
    return [v[group] for (s, _), v in sorted(means.items()) if s == system and group in v]


def regime_verdict(base):
    """Whether the baseline's seeds reach REGIME_BLEU, naming those that fall short and by how much."""
    short = {seed: b for seed, b in base.items() if b < REGIME_BLEU}
    if not short:
        return "the baseline translates"
    if len(short) == len(base):
        return "the baseline has NOT reached the regime this study asks for"
    return "the baseline is at the edge of the regime this study asks for: " + ", ".join(
        f"seed {seed} is {REGIME_BLEU - b:.2f} BLEU short of it" for seed, b in short.items()
    )


def regime_lines(means, curves, setting):
    """What the models reached: the baseline's high-resource BLEU against REGIME_BLEU, and
    whether each system's validation curve has flattened."""
    lines = []
    base = {seed: v["high"] for (s, seed), v in sorted(means.items()) if s == "mnmt" and "high" in v}
    if base:
        lines.append(
            f"- MNMT's mean test BLEU over the high-resource directions: "
            f"{', '.join(f'{b:.2f} (seed {seed})' for seed, b in base.items())}; the study asks for at "
            f"least {REGIME_BLEU:.0f}: {regime_verdict(base)}."
        )
    for system in [s for s in ORDER if s in curves]:
        states = [
            f"seed {seed}: {convergence(c)[0]} ({convergence(c)[1]})" for seed, c in sorted(curves[system].items())
        ]
        lines.append(
            f"- {NAMES[system]} validation loss, last quarter of {setting['updates']} updates: " + "; ".join(states)
        )
    return lines


def tables(rows, means, high, systems):
    pairs = sorted({r["direction"] for r in rows}, key=lambda p: (p[3:] not in high, p))
    out = []
    for metric in ("bleu", "chrf"):
        out += [
            "",
            f"{metric.upper() if metric == 'bleu' else 'chrF'} per direction (test; mean ± sd over seeds):",
            "",
            "| direction | " + " | ".join(NAMES[s] for s in systems) + " |",
            "|---|" + "---|" * len(systems),
        ]
        for p in pairs:
            cells = [mean_sd([r[metric] for r in rows if r["system"] == s and r["direction"] == p]) for s in systems]
            out.append(f"| {p}{' (high)' if p[3:] in high else ''} | " + " | ".join(cells) + " |")
        prefix = "" if metric == "bleu" else "chrf "
        for group, label in (
            ("high", "high-resource mean"),
            ("low", "low-resource mean"),
            ("all", f"mean of all {len(pairs)}"),
        ):
            cells = [mean_sd(per_system(means, s, prefix + group)) for s in systems]
            out.append(f"| **{label}** | " + " | ".join(cells) + " |")
    return out


def differences(means, systems):
    """System differences on the group means (over the seeds each has): the total, and the
    stage schedule's and the capacity's share of it."""

    def avg(system, group):
        values = per_system(means, system, group)
        return statistics.mean(values) if values else None

    out = ["", "| difference (BLEU) | high-resource | low-resource | all directions |", "|---|---|---|---|"]
    for a, b, what in (
        ("hltmt", "mnmt", "HLT-MT − MNMT (total)"),
        ("mnmt-staged", "mnmt", "MNMT staged − MNMT (the stage schedule alone)"),
        ("hltmt", "mnmt-staged", "HLT-MT − MNMT staged (the pool, same schedule)"),
        ("hltmt", "lsmnmt", "HLT-MT − LS-MNMT"),
    ):
        if a in systems and b in systems:
            cells = [f"{avg(a, g) - avg(b, g):+.2f}" for g in ("high", "low", "all")]
            out.append(f"| {what} | " + " | ".join(cells) + " |")
    return out


def significance_lines(sig):
    out = []
    for baseline in BASELINES:
        for seed in sorted({r["seed"] for r in sig if r["baseline"] == baseline}):
            rows = [r for r in sig if r["baseline"] == baseline and r["seed"] == seed]
            every = next(r for r in rows if r["direction"] == "all")
            better = [
                r["direction"]
                for r in rows
                if r["direction"] != "all" and r["bleu_p"] < 0.05 and r["bleu_hltmt"] > r["bleu_baseline"]
            ]
            worse = [
                r["direction"]
                for r in rows
                if r["direction"] != "all" and r["bleu_p"] < 0.05 and r["bleu_hltmt"] < r["bleu_baseline"]
            ]
            out.append(
                f"- HLT-MT vs {NAMES[baseline]}, seed {seed}: all directions together BLEU "
                f"{every['bleu_hltmt']:.2f} vs {every['bleu_baseline']:.2f} (p = {every['bleu_p']:.4f}), "
                f"chrF {every['chrf_hltmt']:.2f} vs {every['chrf_baseline']:.2f} (p = {every['chrf_p']:.4f}); "
                f"BLEU better at p < 0.05 in {', '.join(better) or 'no direction'}, "
                f"worse in {', '.join(worse) or 'no direction'}."
            )
    return out


def paper_lines(means, systems):
    out = [
        "",
        "| | MNMT | LS-MNMT | HLT-MT |",
        "|---|---|---|---|",
        "| the paper, WMT-10 one-to-many, En->X average BLEU | 22.0 | 22.3 | 23.2 |",
    ]
    cells = [mean_sd(per_system(means, s, "all")) if s in systems else "not run" for s in ("mnmt", "lsmnmt", "hltmt")]
    out.append("| this study, DebMT-10 short segments, average of its En->X directions | " + " | ".join(cells) + " |")
    return out


def build_report(results):
    """Recompute every figure of the study from ``results`` and write the report there."""
    runs, refs, high, setting = load_runs(results)
    if not runs:
        print(f"hltmt-study: no finished run in {results} yet: no report")
        return
    rows = score_rows(runs, refs)
    write_csv(os.path.join(results, "results.csv"), rows)
    sig = significance(runs, refs)
    write_csv(os.path.join(results, "significance.csv"), sig)
    means = group_means(rows, high)
    curves = valid_curves(results)
    systems = [s for s in ORDER if any(k[0] == s for k in runs)]
    plot_bleu(os.path.join(results, "bleu.png"), rows, high)
    if curves:
        plot_valid(os.path.join(results, "valid_loss.png"), curves, setting["high_updates"])
    gates = []
    for gate_file in sorted(glob.glob(os.path.join(results, "runs", "hltmt.seed*", "gate.json"))):
        seed = int(re.search(r"seed(\d+)", gate_file).group(1))
        gate = read_gate(gate_file)
        plot_gate(os.path.join(results, f"gate_seed{seed}.png"), gate, seed)
        gates.append(
            f"- seed {seed}: {map_text(dict(zip(gate['langs'], gate['map'])))} ([picture](gate_seed{seed}.png))"
        )
    write_markdown(os.path.join(results, "report.md"), locals())
    print(f"hltmt-study: report in {os.path.join(results, 'report.md')}")


def write_markdown(path, v):
    runs, setting = v["runs"], v["setting"]
    seeds = {s: sorted(seed for (x, seed) in runs if x == s) for s in v["systems"]}
    lines = [
        "# Quality study: DebMT-10 one-to-many on two CPU cores",
        "",
        "Made by `hltmt-study`; every figure here is recomputed from the hypotheses and references in this "
        "folder by `hltmt-study --report-only`. Runs so far: "
        + "; ".join(f"{NAMES[s]} seed(s) {', '.join(map(str, seeds[s]))}" for s in v["systems"])
        + ".",
        "",
        "## The regime the models reached",
        "",
        *regime_lines(v["means"], v["curves"], setting),
        "",
        "![validation loss](valid_loss.png)",
        "",
        "## Results",
        "",
        "![BLEU per direction](bleu.png)",
        *tables(v["rows"], v["means"], v["high"], v["systems"]),
        "",
        "## What makes the difference",
        "",
        "Group means over each system's seeds:",
        *differences(v["means"], v["systems"]),
        "",
        "## Significance (sacreBLEU paired bootstrap, 1,000 resamples; `significance.csv`)",
        "",
        *(significance_lines(v["sig"]) or ["- no HLT-MT run has a baseline of the same seed yet"]),
        "",
        "## Routing map of each HLT-MT seed",
        "",
        *(v["gates"] or ["- none yet"]),
        "",
        "## Beside the paper",
        *paper_lines(v["means"], v["systems"]),
        "",
        "The paper's models are transformer-base with an XLM-R encoder trained on millions of WMT sentence pairs "
        "on GPUs; these are 2+2-layer models of width 128 trained for "
        f"{setting['updates']} updates on short software-documentation segments: compare the direction of "
        "the differences, not the numbers.",
        "",
        "## The setting",
        "",
        "```",
        json.dumps(setting, indent=1),
        "```",
    ]
    with AtomicOutput(path) as f:
        f.write("\n".join(lines) + "\n")
