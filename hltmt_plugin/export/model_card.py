"""A model card: the ``README.md`` of an exported model folder, as the Hugging Face Hub shows it
(a YAML metadata block, then the card).

:func:`card` writes it from plain facts (no model code): the manifest record of the export
(languages, language-token convention, the directions trained, the groups of target languages
and their folders), the search settings, the fairseq command reconstructed from the
checkpoint's options, the training data and its licence, and the metrics with their sacreBLEU
signature when they were recorded. What is not known is said to be unknown, never made up.
"""

from typing import Dict, List

from hltmt_plugin.directions import REFUSED, ZERO_SHOT, TrainedDirections, marks_target

SYSTEMS = {
    "hltmt": "HLT-MT (a pool of language-specific decoder modules for the high-resource targets, chosen by a "
    "gate, and a universal layer for the others)",
    "lsmnmt": "LS-MNMT (one language-specific decoder module per target language)",
    "plain": "a multilingual Transformer (fairseq's `transformer`, one model for every direction)",
}


def directions(record: dict) -> Dict[str, List[str]]:
    """``{"trained": [...], "zero-shot": [...]}``: the directions the model serves, by the rule
    of :mod:`hltmt_plugin.directions` (all pairs of its languages when none were recorded)."""
    langs, pairs = record["langs"], record["lang_pairs"]
    rule = TrainedDirections(pairs, marked=marks_target(record)) if pairs else None
    found: Dict[str, List[str]] = {"trained": [], "zero-shot": []}
    for src in langs:
        for tgt in langs:
            if src == tgt:
                continue
            kind = rule.kind(src, tgt) if rule is not None else "trained"
            if kind != REFUSED:
                found["zero-shot" if kind == ZERO_SHOT else "trained"].append(f"{src}-{tgt}")
    return found


def _yaml_list(values) -> str:
    return "\n".join(f"- {v}" for v in values)


def metadata(record: dict, facts: dict) -> str:
    """The Hub's YAML block."""
    licence = (facts.get("data") or {}).get("license") or "other"
    lines = [
        "---",
        "language:",
        _yaml_list(record["langs"]),
        f"license: {licence}",
        "library_name: transformers",
        "pipeline_tag: translation",
        "tags:",
        _yaml_list(["translation", "multilingual", "fairseq", "hltmt", record["source"].get("class", "")]),
    ]
    metrics = facts.get("metrics")
    if metrics and metrics.get("scores"):
        lines += ["model-index:", f"- name: {facts.get('name', 'model')}", "  results:"]
        for direction, score in sorted(metrics["scores"].items()):
            lines += [
                "  - task:",
                "      type: translation",
                f"      name: Translation {direction}",
                "    dataset:",
                f"      name: {metrics.get('dataset', 'test set')}",
                f"      type: {metrics.get('dataset_type', 'custom')}",
                "    metrics:",
                "    - type: bleu",
                f"      value: {score}",
                f"      name: BLEU {direction}",
            ]
    return "\n".join(lines + ["---", ""])


def _usage(record: dict) -> str:
    first = sorted(record["models"].items())[0]
    tgt = next(lang for lang, group in sorted(record["targets"].items()) if group == first[0])
    src = next((p.split("-")[0] for p in record["lang_pairs"] if p.split("-")[1] == tgt), record["langs"][0])
    codes = record.get("language_codes") or {lang: f">>{lang}<<" for lang in record["langs"]}
    sub = "" if first[1] == "." else f', subfolder="{first[1]}"'
    text = f"{codes[tgt]} The file could not be saved." if record["encoder_langtok"] == "tgt" else None
    if text is None:
        text = f"{codes[src]} The file could not be saved."
    forced = f", forced_bos_token_id=tok.convert_tokens_to_ids('{codes[tgt]}')" if record["decoder_langtok"] else ""
    return "\n".join(
        [
            "```python",
            "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer",
            "",
            'tok = AutoTokenizer.from_pretrained("MODEL_FOLDER")',
            f'model = AutoModelForSeq2SeqLM.from_pretrained("MODEL_FOLDER"{sub})',
            f'batch = tok(["{text}"], return_tensors="pt")',
            f"out = model.generate(**batch{forced})",
            "print(tok.batch_decode(out, skip_special_tokens=True))",
            "```",
        ]
    )


def _input_rule(record: dict) -> str:
    if record["encoder_langtok"] == "tgt":
        return (
            "The input is the sentence after the target language's code (`>>de<< text`), as the model was "
            "trained (`--encoder-langtok tgt`); the tokenizer appends the end of sentence. One call may mix "
            "target languages that the same model folder serves."
        )
    if record["encoder_langtok"] == "src":
        return (
            "The input is the sentence after the source language's code (`>>en<< text`) and the target "
            "language's code is forced as the first output token (`forced_bos_token_id`), as the model was "
            "trained (`--encoder-langtok src --decoder-langtok`): one target language per `generate` call."
        )
    return "The input is the sentence alone (the model was trained without language tokens)."


def _groups(record: dict) -> List[str]:
    if set(record["models"]) == {"main"}:
        return ["One model serves every direction: `AutoModelForSeq2SeqLM.from_pretrained(MODEL_FOLDER)`."]
    lines = [
        "Each target language goes through its own modules (the pool module its routing map gives it, or the "
        "universal layer), so each group of target languages is a model of its own; load the one that serves "
        "the target language (`subfolder=`):",
        "",
        "| folder | target languages |",
        "|---|---|",
    ]
    for group, place in sorted(record["models"].items()):
        langs = sorted(lang for lang, g in record["targets"].items() if g == group)
        lines.append(f"| `{place}` | {', '.join(langs)} |")
    return lines


def _metrics(facts: dict) -> List[str]:
    metrics = facts.get("metrics")
    if not metrics or not metrics.get("scores"):
        return ["No metrics were recorded with this checkpoint."]
    lines = ["| direction | BLEU |", "|---|---|"]
    lines += [f"| {d} | {s} |" for d, s in sorted(metrics["scores"].items())]
    if metrics.get("signature"):
        lines += ["", f"sacreBLEU signature: `{metrics['signature']}`"]
    return lines


def card(record: dict, facts: dict) -> str:
    """The model card (``README.md``) of an export folder: ``record`` its manifest record,
    ``facts`` what the checkpoint tells beyond it: ``system`` (hltmt, lsmnmt, plain), ``search``
    (beam, lenpen, max_len), ``command`` (the fairseq-train command, a list of words), ``data``
    (``folder``, ``sizes`` {lang: sentence pairs}, ``license``), ``metrics`` (``scores``
    {direction: BLEU}, ``signature``), ``name``."""
    served = directions(record)
    search = facts.get("search") or {}
    data = facts.get("data") or {}
    source = record["source"]
    sizes = data.get("sizes") or {}
    parts = [
        metadata(record, facts),
        f"# {facts.get('name', source.get('checkpoint', 'model'))}",
        "",
        f"A multilingual translation model: {SYSTEMS.get(facts.get('system', 'plain'), SYSTEMS['plain'])}, "
        f"trained with fairseq and the `hltmt_plugin`, exported to `{source.get('class')}` "
        f"(transformers {source.get('transformers')}) by `hltmt-export --to transformers`.",
        "",
        "## Languages and directions",
        "",
        f"Languages: {', '.join(record['langs'])}.",
        "",
        f"Trained directions: {', '.join(served['trained']) or 'none recorded'}.",
        "",
        f"Zero-shot directions (never trained; output often in the wrong language): "
        f"{', '.join(served['zero-shot']) or 'none'}. Other directions were never learned.",
        "",
        *_groups(record),
        "",
        "## How to use",
        "",
        _input_rule(record),
        "",
        _usage(record),
        "",
        f"`generation_config.json` holds the search the model was evaluated with: beam {search.get('beam')}, "
        f"length penalty {search.get('lenpen')}, at most {search.get('max_len')} tokens, stopping once the "
        "beam's hypotheses are finished, the decoder started from the end-of-sentence token.",
        "",
        "## Training data",
        "",
        f"The data folder `{data.get('folder', 'unknown')}`"
        + (
            ": " + ", ".join(f"{lang} {n:,} sentence pairs" for lang, n in sorted(sizes.items()))
            if sizes
            else " (sizes not recorded)"
        )
        + ".",
        "",
        "Licence: "
        + (data.get("license_text") or "not recorded with the checkpoint: check the corpora used before reuse."),
        "",
        "## Evaluation",
        "",
        *_metrics(facts),
        "",
        "## Training",
        "",
        "The fairseq command, reconstructed from the options stored in the checkpoint:",
        "",
        "```bash",
        " \\\n    ".join(facts.get("command") or ["(not recorded)"]),
        "```",
        "",
        "## Intended use and limits",
        "",
        "Research on multilingual translation: comparing, fine-tuning and analysing the model. It translates "
        "single sentences of the kind it was trained on, in its trained directions; it is not meant for "
        "production use without evaluation on your own text. Zero-shot directions and text unlike the "
        "training data translate poorly.",
        "",
    ]
    return "\n".join(parts)
