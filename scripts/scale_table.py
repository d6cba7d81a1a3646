"""The figures of scripts/scale_bench.py as a table and a chart: one row per measure and
system with its value at each K (:func:`rows_of`), the Markdown table with each value's ratio
to the reference K (:func:`markdown`), and the six panels of ratios against K (:func:`plot`).
Times are CPU seconds (``timing.stamp``: the load of other processes on a shared machine does
not inflate them; each measure runs one thread); the JSON keeps the wall time too."""

import statistics

from hltmt_plugin.experiments.runs import save_figure
from timing import markdown_table

CPU = "CPU s"


def rows_of(results, systems):
    """(measure, system, unit, {K: value}) for every figure; times in CPU seconds."""
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

    for rows in (_preparation_rows, _startup_rows, _speed_rows, _batch_rows, _size_rows):
        rows(row, systems)
    return out


def _preparation_rows(row, systems):
    row("pieces in the joint dictionary (before language tokens)", "", "", lambda r: r["dictionary"])
    row("hltmt-prepare-data", "", CPU, lambda r: r["prepare"]["total"]["cpu"])
    row("  the same, wall time", "", "s", lambda r: r["prepare"]["total"]["wall"])
    row("  of which sentencepiece training", "", CPU, lambda r: r["prepare"]["sentencepiece_model"]["cpu"])
    binarize = "  of which binarization (fairseq_cli.preprocess.main per pair)"
    row(binarize, "", CPU, lambda r: r["prepare"]["binarize"]["cpu"])


def _startup_rows(row, systems):
    for system in systems:
        t = lambda r, s=system: r["train"][s]  # noqa: E731
        row("fairseq-train: process start to first update", system, CPU, lambda r, t=t: t(r)["first_update"]["cpu"])
        row("  after the imports: task set-up", system, CPU, lambda r, t=t: t(r)["setup_task"]["cpu"])
        row("  model build", system, CPU, lambda r, t=t: t(r)["build_model"]["cpu"])
        row("  train data + batch iterator", system, CPU, lambda r, t=t: t(r)["load_train"]["cpu"])
        row("  first update (builds the optimizer)", system, CPU, lambda r, t=t: t(r)["first_step"]["cpu"])
        row("  checkpoint save", system, CPU, lambda r, t=t: t(r)["save"]["cpu"])
    for system in systems:
        if system != "mnmt":
            row(
                "  start-up to first update, ratio to plain MNMT",
                system,
                "x",
                lambda r, s=system: r["train"][s]["first_update"]["cpu"] / r["train"]["mnmt"]["first_update"]["cpu"],
            )


def _speed_rows(row, systems):
    med = lambda r, s: statistics.median(r["speed"]["rates"][s])  # noqa: E731
    for system in systems:
        row(
            "training words per CPU-second (same batches, interleaved)",
            system,
            "words/s",
            lambda r, s=system: med(r, s),
        )
    for system in systems:
        if system != "mnmt":
            row("  time ratio to plain MNMT at this K", system, "x", lambda r, s=system: med(r, "mnmt") / med(r, s))
            row(
                "  predicted (arithmetic) ratio to plain MNMT",
                system,
                "x",
                lambda r, s=system: r["speed"]["flops"][s] / r["speed"]["flops"]["mnmt"],
            )


def _batch_rows(row, systems):
    row("target words per batch", "", "", lambda r: r["speed"]["words"] / r["speed"]["batches"])
    row("sentences per batch", "", "", lambda r: r["speed"]["sentences"] / r["speed"]["batches"])


def _size_rows(row, systems):
    for system in systems:
        row("checkpoint_last.pt (with the optimizer state)", system, "MiB", lambda r, s=system: r["checkpoint_mib"][s])
    for system in systems:
        row("parameters", system, "", lambda r, s=system: r["speed"]["params"][s])


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
    lines = []
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
        lines.append([measure, system, unit, *cells])
    return markdown_table(["measure", "system", "unit", *(f"K={k}" for k in ks)], lines)


COLOURS = {"mnmt": "#4c72b0", "hltmt": "#dd8452", "hltmt+adapters": "#55a868", "hltmt+skills": "#c44e52", "": "#8172b3"}
STYLES = ["-", "--", ":", "-."]  # the measures of one panel, in order
PANELS = [  # (title, measures, "ratio": each to the reference K / "value": as they are)
    (
        "preparation (CPU seconds)",
        [
            "hltmt-prepare-data",
            "  of which sentencepiece training",
            "  of which binarization (fairseq_cli.preprocess.main per pair)",
        ],
        "ratio",
    ),
    ("start-up (CPU seconds, imports included)", ["fairseq-train: process start to first update"], "ratio"),
    (
        "task set-up and data (the corpus grows with K: 2K x lines)",
        ["  after the imports: task set-up", "  train data + batch iterator"],
        "ratio",
    ),
    ("model build and checkpoint save (CPU seconds)", ["  model build", "  checkpoint save"], "ratio"),
    (
        "training: time ratio to plain MNMT at the same K (solid: measured, same batches; dashed: arithmetic)",
        ["  time ratio to plain MNMT at this K", "  predicted (arithmetic) ratio to plain MNMT"],
        "value",
    ),
    ("sizes", ["checkpoint_last.pt (with the optimizer state)", "parameters"], "ratio"),
]


def plot(rows, results, path, title):
    """Six panels against K (log-log): each figure's ratio to the reference K, with the line
    'linear in K'; and, as values, the training time ratio to plain MNMT at each K beside its
    arithmetic. Colour: the system; line style: the measure."""
    from hltmt_plugin.experiments.plots import pyplot

    plt = pyplot()

    ks = [r["k"] for r in results]
    ref = reference_k(results)
    fig, axes = plt.subplots(3, 2, figsize=(12, 12.5))
    for ax, (name, measures, mode) in zip(axes.flat, PANELS):
        draw_panel(ax, name, measures, mode, rows, ks, ref)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=100, option="--png")
    plt.close(fig)


def draw_panel(ax, name, measures, mode, rows, ks, ref):
    """One panel: the rows of ``measures`` against K, as ratios to K = ``ref`` or as values."""
    for measure, system, unit, values in rows:
        if measure not in measures or (mode == "ratio" and (ref not in values or len(values) < 2)):
            continue
        xs = [k for k in ks if k in values]
        if mode == "ratio":
            ys = [(values[ref] / values[k]) if unit == "words/s" else values[k] / values[ref] for k in xs]
        else:
            ys = [values[k] for k in xs]
        short = measure.strip().split(":")[0].split(" (")[0]
        ax.plot(
            xs,
            ys,
            marker="o",
            ms=3.5,
            lw=1.2,
            color=COLOURS.get(system, "#333333"),
            ls=STYLES[measures.index(measure) % len(STYLES)],
            label=f"{short}{', ' + system if system else ''}",
        )
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
