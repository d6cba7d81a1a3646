#!/usr/bin/env python3
"""Build the results report from fairseq-generate outputs.

    python scripts/report.py --decode-dir RUN/decode --out RUN/report --high fr,de,cs,tr,fi,et \
        --baseline mnmt --system hltmt [--gate-checkpoint STAGE1/checkpoint_last.pt]

Reads ``DECODE/<system>/seed<N>/<src>-<tgt>.gen`` (fairseq-generate output with
``--remove-bpe``), scores every direction with sacreBLEU (BLEU: 13a, case-sensitive, on the
detokenized text; chrF) and writes to OUT:

- ``results.md``: BLEU and chrF per direction and system (mean +- std over seeds), the
  averages over high- and low-resource directions and over X->En / En->X, and the
  difference system minus baseline; the sacreBLEU signatures;
- ``results.csv``: one row per system, seed and direction;
- ``bleu.png``: the per-direction BLEU of every system, and the group averages;
- ``gate_heatmap.png`` (with ``--gate-checkpoint``): the gate's distribution over the pool
  for each high-resource language (after stage 1, or at the end of training from a
  checkpoint that holds the fixed map), and the routing map.
"""
import argparse
import csv
import os
import re
import statistics
import sys
from collections import defaultdict

GROUPS = ["En->X high", "En->X low", "X->En high", "X->En low", "high", "low", "En->X", "X->En", "all"]


def read_gen(path):
    """(hypotheses, references) in sentence order from a fairseq-generate output."""
    hyps, refs = {}, {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            kind, _, rest = line.partition("-")
            if kind in ("D", "T") and "\t" in rest:
                fields = rest.rstrip("\n").split("\t")
                (hyps if kind == "D" else refs)[int(fields[0])] = fields[-1]
    if not refs:
        raise ValueError(f"{path}: no T- lines (not a fairseq-generate output, or an empty test set)")
    missing = sorted(set(refs) - set(hyps))
    if missing:
        raise ValueError(f"{path}: {len(missing)} sentences have no hypothesis (an interrupted decode?)")
    ids = sorted(refs)
    return [hyps[i] for i in ids], [refs[i] for i in ids]


def groups_of(direction, high):
    src, tgt = direction.split("-")
    other = tgt if src == "en" else src
    side = "En->X" if src == "en" else "X->En"
    level = "high" if other in high else "low"
    return [f"{side} {level}", level, side, "all"]


def score_all(decode_dir):
    from sacrebleu.metrics import BLEU, CHRF

    rows, signatures = [], {}
    for system in sorted(os.listdir(decode_dir)):
        for seed_dir in sorted(os.listdir(os.path.join(decode_dir, system))):
            seed = int(re.sub(r"\D", "", seed_dir) or 0)
            folder = os.path.join(decode_dir, system, seed_dir)
            for name in sorted(os.listdir(folder)):
                if not name.endswith(".gen"):
                    continue
                hyps, refs = read_gen(os.path.join(folder, name))
                bleu, chrf = BLEU(), CHRF()
                b = bleu.corpus_score(hyps, [refs])
                c = chrf.corpus_score(hyps, [refs])
                signatures["BLEU"], signatures["chrF"] = str(bleu.get_signature()), str(chrf.get_signature())
                rows.append({"system": system, "seed": seed, "direction": name[:-4], "sentences": len(refs),
                             "bleu": b.score, "chrf": c.score})
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


VALID_LINE = re.compile(r"valid on 'valid' subset \|(.*)")
VALID_KEYS = ("loss", "nll_loss", "ppl", "num_updates")


def read_valid_logs(specs):
    """{system: [(seed, loss, nll_loss, ppl, updates)]} from the last validation line of each
    fairseq-train log; ``specs`` are ``SYSTEM=GLOB`` (the glob's files end in ``seed<N>.log``)."""
    import glob

    found = {}
    for spec in specs:
        system, _, pattern = spec.partition("=")
        if not system or not pattern:
            raise ValueError(f"--valid-log {spec!r}: expected SYSTEM=GLOB")
        for path in sorted(glob.glob(pattern)):
            last = None
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    m = VALID_LINE.search(line)
                    last = m or last
            seed = re.search(r"seed(\d+)", os.path.basename(path))
            fields = dict(f.strip().split(" ", 1) for f in last.group(1).split("|") if " " in f.strip()) if last else {}
            if seed and all(k in fields for k in VALID_KEYS):
                found.setdefault(system, []).append(
                    (int(seed.group(1)), *(float(fields[k]) for k in VALID_KEYS[:3]), int(fields["num_updates"])))
    return found


def write_markdown(path, table, systems, directions, baseline, system, signatures, title, note, seeds, valid=None):
    lines = [f"# {title}", "", f"Systems: {', '.join(systems)}; seeds: {seeds}. Test split, "
             "detokenized, case-sensitive; mean ± standard deviation over seeds.", ""]
    for sig_name, sig in signatures.items():
        lines.append(f"- sacreBLEU {sig_name} signature: `{sig}`")
    if note:
        lines += ["", f"**Note.** {note}"]
    if valid:
        lines += ["", "## Validation at the end of training", "",
                  "The last validation of each run (valid split; label-smoothed loss, nll in bits, perplexity); "
                  "lower is better, and the first place to look for convergence.", "",
                  "| system | updates in the run | loss | nll_loss | ppl |", "|---|---|---|---|---|"]
        for name in sorted(valid, key=lambda s: (s != baseline, s)):
            runs = valid[name]
            updates = sorted({r[4] for r in runs})
            lines.append(f"| {name} | {','.join(map(str, updates))} | " + " | ".join(
                fmt([r[i] for r in runs]) for i in (1, 2, 3)) + " |")
    for metric, label in (("bleu", "BLEU"), ("chrf", "chrF")):
        diff = baseline in systems and system in systems
        header = ["direction"] + systems + ([f"{system} − {baseline}"] if diff else [])
        lines += ["", f"## {label}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for key in directions + GROUPS:
            cells = [fmt(table[(s, metric)].get(key, [])) for s in systems]
            if diff:
                a, b = table[(system, metric)].get(key, []), table[(baseline, metric)].get(key, [])
                cells.append(f"{mean_std(a)[0] - mean_std(b)[0]:+.2f}" if a and b else "")
            name = f"**avg {key}**" if key in GROUPS else key
            lines.append("| " + " | ".join([name] + cells) + " |")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def plot_bleu(path, table, systems, directions, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(16, 5), gridspec_kw={"width_ratios": [3, 1.2]})
    for ax, keys in ((axes[0], directions), (axes[1], GROUPS)):
        width = 0.8 / len(systems)
        for i, s in enumerate(systems):
            stats = [mean_std(table[(s, "bleu")].get(k, [])) for k in keys]
            ax.bar([x + i * width for x in range(len(keys))], [m for m, _ in stats], width,
                   yerr=[sd for _, sd in stats], label=s, capsize=2)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(keys))])
        ax.set_xticklabels(keys, rotation=60, ha="right", fontsize=8)
        ax.set_ylabel("BLEU")
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_title(f"{title}: BLEU per direction")
    axes[1].set_title("averages")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def gate_heatmap(path, checkpoint):
    """The gate P (languages x modules) and the routing map, as a picture; returns the
    languages and each one's module (the fixed map, or the argmax after stage 1)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    import hltmt_plugin  # noqa: F401  (registers the model, allowlists checkpoint types)
    from fairseq import checkpoint_utils

    models, _, _ = checkpoint_utils.load_model_ensemble_and_task([checkpoint])
    model = models[0]
    with torch.no_grad():
        probs = model.slp.gate_probs(model.decoder.high_lang_embeddings()).numpy()
    langs = model.high_resource_langs
    # a checkpoint from stage all holds the map fixed after stage 1; its gate is frozen, but the
    # language embeddings it reads kept training, so the argmax may have moved since
    chosen = model.slp.fixed_map.tolist() if model.slp.map_is_fixed else probs.argmax(axis=1).tolist()
    fig, ax = plt.subplots(figsize=(2.6 + 0.9 * probs.shape[1], 1.2 + 0.5 * len(langs)))
    im = ax.imshow(probs, cmap="viridis", vmin=0, vmax=1)
    for i in range(len(langs)):
        for t in range(probs.shape[1]):
            ax.text(t, i, f"{probs[i, t]:.2f}", ha="center", va="center",
                    color="white" if probs[i, t] < 0.6 else "black", fontsize=9,
                    fontweight="bold" if t == chosen[i] else "normal")
    ax.set_xticks(range(probs.shape[1]))
    ax.set_xticklabels([f"m{t}" for t in range(probs.shape[1])])
    ax.set_yticks(range(len(langs)))
    ax.set_yticklabels(langs)
    ax.set_title("gate p(module | language) " + ("at the end of training\n(bold: the map fixed after stage 1)"
                                                  if model.slp.map_is_fixed else "after stage 1"), fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.05)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return langs, chosen


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--decode-dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--high", required=True, help="high-resource languages (comma-separated)")
    p.add_argument("--baseline", default="mnmt")
    p.add_argument("--system", default="hltmt")
    p.add_argument("--title", default="results")
    p.add_argument("--note", default="")
    p.add_argument("--gate-checkpoint", default=None, help="HLT-MT checkpoint for the gate heatmap: stage 1's, or a later one (it holds the fixed map)")
    p.add_argument("--valid-log", action="append", default=[], metavar="SYSTEM=GLOB",
                   help="fairseq-train logs of a system (files named ...seed<N>.log): report their last "
                        "validation (repeatable)")
    args = p.parse_args(argv)
    high = set(args.high.split(","))
    try:
        rows, signatures = score_all(args.decode_dir)
        valid = read_valid_logs(args.valid_log)
    except (ValueError, OSError) as error:
        print(f"report: error: {error}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    systems = sorted({r["system"] for r in rows}, key=lambda s: (s != args.baseline, s != args.system, s))
    directions = sorted({r["direction"] for r in rows}, key=lambda d: (not d.startswith("en-"), d))
    seeds = sorted({r["seed"] for r in rows})
    table = summarise(rows, high)
    with open(os.path.join(args.out, "results.csv"), "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["system", "seed", "direction", "sentences", "bleu", "chrf"])
        writer.writeheader()
        writer.writerows({**r, "bleu": f"{r['bleu']:.2f}", "chrf": f"{r['chrf']:.2f}"} for r in rows)
    note = args.note
    if args.gate_checkpoint and os.path.exists(args.gate_checkpoint):
        langs, chosen = gate_heatmap(os.path.join(args.out, "gate_heatmap.png"), args.gate_checkpoint)
        mapping = ", ".join(f"{lang}->m{k}" for lang, k in zip(langs, chosen))
        note = (note + " " if note else "") + f"Routing map after stage 1: {mapping} (gate_heatmap.png)."
    write_markdown(os.path.join(args.out, "results.md"), table, systems, directions, args.baseline, args.system,
                   signatures, args.title, note, seeds, valid)
    plot_bleu(os.path.join(args.out, "bleu.png"), table, systems, directions, args.title)
    print(f"report: {len(rows)} scored outputs -> {args.out}/results.md, results.csv, bleu.png"
          + (", gate_heatmap.png" if args.gate_checkpoint else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
