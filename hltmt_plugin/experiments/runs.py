"""What the experiment drivers read from a run and how they draw it: fairseq-generate outputs
(:func:`read_gen`), a run's scores and gate records (:func:`read_scores`, :func:`read_gate`,
checked by :mod:`hltmt_plugin.records`), whether a validation curve has flattened
(:func:`convergence`), the gate and routing map of an HLT-MT checkpoint (:func:`gate_of`,
:func:`draw_gate`) and pictures written whole (:func:`save_figure`). ``hltmt-report``,
``hltmt-study`` and the study's report share them."""

from hltmt_plugin import records, text
from hltmt_plugin.cli.output import AtomicOutput
from hltmt_plugin.errors import HltmtInputError
from hltmt_plugin.experiments.plots import pyplot

# a validation curve is flat when the loss fell by less than this share over the last quarter of
# the run's updates
FLAT_DROP = 0.01


def read_gen(path):
    """(hypotheses, references) in sentence order from a fairseq-generate output, read by the one
    reader of sentences (:func:`hltmt_plugin.text.read_lines`: bounded, the one text rule)."""
    hyps, refs = {}, {}
    for line in text.read_lines(path):
        kind, _, rest = line.partition("-")
        if kind in ("D", "T") and "\t" in rest:
            fields = rest.split("\t")
            (hyps if kind == "D" else refs)[int(fields[0])] = fields[-1]
    if not refs:
        raise ValueError(f"{path}: no T- lines (not a fairseq-generate output, or an empty test set)")
    missing = sorted(set(refs) - set(hyps))
    if missing:
        raise ValueError(f"{path}: {len(missing)} sentences have no hypothesis (an interrupted decode?)")
    ids = sorted(refs)
    return [hyps[i] for i in ids], [refs[i] for i in ids]


_NAME = records.Text(min_len=1, max_len=100)
# a study run's scores.json (hltmt-study): its system, seed, scores per direction and setting
SCORES = records.Record(
    {
        "system": _NAME,
        "seed": records.Int(low=0),
        "high": records.ListOf(_NAME, max_len=1000),
        "scores": records.MapOf(
            records.Record({"bleu": records.Number(), "chrf": records.Number(), "sentences": records.Int(low=0)}),
            key=records.Text(min_len=3, max_len=130, pattern=r"[^/\\\s]+-[^/\\\s]+"),
            min_len=1,
            max_len=10_000,
        ),
        "setting": records.Record({"updates": records.Int(low=0), "high_updates": records.Int(low=0)}, extra=True),
        "wall_seconds": records.Number(low=0),
    },
    optional={records.VERSION_FIELD: records.Text(max_len=40)},
)
# an HLT-MT run's gate.json: p(module | language) per high-resource language and each one's module
GATE = records.Record(
    {
        "langs": records.ListOf(_NAME, min_len=1, max_len=1000),
        "probs": records.ListOf(records.ListOf(records.Number(low=0, high=1), min_len=1, max_len=1000), max_len=1000),
        "map": records.ListOf(records.Int(low=0), max_len=1000),
    }
)


def read_scores(path):
    """A study run's scores.json, checked (:data:`SCORES`); one HltmtInputError line otherwise."""
    return records.read_json(path, SCORES, "scores record")


def read_gate(path):
    """A gate.json, checked (:data:`GATE`: a row and a module per language, rows of one width,
    modules among the row's); one HltmtInputError line otherwise."""
    gate = records.read_json(path, GATE, "gate record")
    langs, probs, chosen = gate["langs"], gate["probs"], gate["map"]
    if len(probs) != len(langs) or len(chosen) != len(langs) or len({len(row) for row in probs}) != 1:
        raise HltmtInputError(f"gate record {path}: 'probs' and 'map' must hold one row of one width per language")
    if any(k >= len(probs[0]) for k in chosen):
        raise HltmtInputError(f"gate record {path}: 'map' names a module beyond the gate's {len(probs[0])}")
    return gate


def convergence(curve):
    """(status, explanation) of one validation curve [(updates, loss)]: 'flat' when the loss fell
    by less than FLAT_DROP of its value over the last quarter of the updates, 'falling' when it
    fell more, 'unknown' when there are too few validations to tell."""
    if len(curve) < 3:
        return "unknown", f"{len(curve)} validation(s): too few to see a curve"
    end_updates, end_loss = curve[-1]
    earlier = [(u, loss) for u, loss in curve[:-1] if u <= 0.75 * end_updates]
    if not earlier:
        return "unknown", "no validation before the last quarter of the run"
    ref_updates, ref_loss = earlier[-1]
    drop = (ref_loss - end_loss) / max(abs(end_loss), 1e-9)
    text = f"loss {ref_loss:.3f} at {ref_updates} -> {end_loss:.3f} at {end_updates} ({-100 * drop:+.1f}%)"
    return ("flat" if drop < FLAT_DROP else "falling"), text


def save_figure(fig, path, dpi=110, option="--out"):
    """The figure as a PNG, written whole or not at all (see :class:`AtomicOutput`; ``option``
    names ``path`` in its error)."""
    with AtomicOutput(path, option, binary=True) as f:
        fig.savefig(f, format="png", dpi=dpi)


def gate_of(checkpoint):
    """(gate P as languages x modules, the high-resource languages, each one's module, whether
    the map is fixed) of an HLT-MT checkpoint: the fixed map, or the argmax after stage 1."""
    import torch

    from hltmt_plugin.hub.loading import load_model
    from hltmt_plugin.models.hltmt_transformer import pool_model

    model = pool_model(load_model(checkpoint, explain_missing=False)[0])
    if model is None:
        raise LookupError(f"{checkpoint} holds a model without an HLT-MT pool (no gate to draw)")
    with torch.no_grad():
        probs = model.gate_probs().numpy()
    # a checkpoint from stage all holds the map fixed after stage 1 (the routing map); its gate is
    # frozen, but the language embeddings it reads kept training, so the argmax may have moved since
    langs, mapping = list(model.high_langs), model.map_by_language()
    return probs.tolist(), langs, [mapping[lang] for lang in langs], model.slp_router.map_is_fixed


def draw_gate(path, probs, langs, chosen, title):
    """The gate P (languages x modules) as a heatmap, each language's module in bold."""
    plt = pyplot()

    from hltmt_plugin.pool.modules import module_label

    fig, ax = plt.subplots(figsize=(2.6 + 0.9 * len(probs[0]), 1.2 + 0.5 * len(langs)))
    im = ax.imshow(probs, cmap="viridis", vmin=0, vmax=1)
    for i in range(len(langs)):
        for t in range(len(probs[0])):
            ax.text(
                t,
                i,
                f"{probs[i][t]:.2f}",
                ha="center",
                va="center",
                color="white" if probs[i][t] < 0.6 else "black",
                fontsize=9,
                fontweight="bold" if t == chosen[i] else "normal",
            )
    ax.set_xticks(range(len(probs[0])))
    ax.set_xticklabels([module_label(t) for t in range(len(probs[0]))])
    ax.set_yticks(range(len(langs)))
    ax.set_yticklabels(langs)
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.05)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
