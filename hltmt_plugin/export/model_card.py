"""A model card: the ``README.md`` of an export folder, as the Hugging Face Hub shows it (a YAML
metadata block, then the card), for either engine (transformers or CTranslate2).

:func:`card_facts` gathers what the project records: the checkpoint's stored options (read
again: the loaded ones name the folder the export read), from which :func:`training_command`
rebuilds the ``fairseq-train`` command the run was given; its update count per run; the data
folder the run read and, from the binarized train split, its sentence pairs; and what the user
gives ``hltmt-export`` (:data:`OPTIONS`, checked and read by :func:`read_options` before
anything is written): the licence with the Hub's ``license_name`` / ``license_link``, the
metrics with their sacreBLEU signatures, the data's name and sizes. :func:`card` writes the text
from the manifest record and these facts (no model code). What is not known is said to be
unknown, never made up.
"""

import contextlib
import io
import itertools
import json
import os
import re
import shlex
from argparse import Namespace
from typing import Dict, List, Optional, Tuple

from hltmt_plugin import records
from hltmt_plugin.directions import REFUSED, ZERO_SHOT, TrainedDirections, marks_target
from hltmt_plugin.errors import HltmtConfigError
from hltmt_plugin.hub import engines

SYSTEMS = {
    "hltmt": "HLT-MT (a pool of language-specific decoder modules for the high-resource targets, chosen by a "
    "gate, and a universal layer for the others)",
    "lsmnmt": "LS-MNMT (one language-specific decoder module per target language)",
    "plain": "a multilingual Transformer (fairseq's `transformer`, one model for every direction)",
}
# hltmt-export's options that set the card's fields (each None when not given)
OPTIONS = (
    "name",
    "license",
    "license_name",
    "license_link",
    "dataset",
    "data_sizes",
    "metrics",
    "bleu_signature",
    "chrf_signature",
)
HUB_ID = re.compile(r"[a-z0-9][a-z0-9.+-]{0,63}")  # a licence identifier as the Hub writes them (mit, cc-by-sa-3.0)
DIRECTION = records.Text(min_len=3, max_len=130, pattern=r"[^/\\\s]+-[^/\\\s]+")
SCORE = records.Number(low=0, high=100)
SIGNATURE = records.Text(min_len=1, max_len=500)
# how the scores were made, as a study run's scores.json records it under "setting" (each optional)
EVALUATION = records.Record(
    {},
    {
        "split": records.Text(1, 100),
        "beam": records.Int(low=1),
        "max_en_words": records.Int(low=1),
        "max_xx_words": records.Int(low=1),
        "gen_len": records.ListOf(records.Number(low=0), min_len=2, max_len=2),
    },
    extra=True,
)
# --metrics FILE: sacreBLEU scores per direction (a study run's scores.json is one)
METRICS = records.Record(
    {
        "scores": records.MapOf(
            records.Record({"bleu": SCORE}, {"chrf": SCORE, "sentences": records.Int(low=0)}), key=DIRECTION, min_len=1
        )
    },
    optional={
        "signatures": records.Record({}, {"BLEU": SIGNATURE, "chrF": SIGNATURE}),
        "dataset": records.Text(1, 200),
        "split": records.Text(1, 100),
        "setting": EVALUATION,
    },
    extra=True,
)
# --data-sizes FILE: sentence pairs of the training data per direction or language (the study's data.json is one)
SIZES = records.Record({"train": records.MapOf(records.Int(low=0), key=records.Text(1, 130), min_len=1)}, extra=True)
# options the command does not show: the ones it names first, and what the task derives from others
PLUGIN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # --user-dir: the plugin's folder
NAMED = ("task", "arch", "criterion", "optimizer", "lr_scheduler")  # named first: they bring their own options
NOT_SHOWN = {"data", "user_dir", "_name", "langtoks", *NAMED}


# ---- what the user gives hltmt-export ----------------------------------------------------


def read_options(given: dict) -> dict:
    """The card's fields given to hltmt-export (:data:`OPTIONS`), checked, their files read:
    ``{"given": ..., "metrics": ..., "sizes": ...}``; one HltmtConfigError / HltmtInputError line
    otherwise."""
    given = {name: given.get(name) for name in OPTIONS}
    licence, name, link = given["license"], given["license_name"], given["license_link"]
    if licence is not None and not HUB_ID.fullmatch(licence):
        raise HltmtConfigError(
            f"--license {licence!r}: give a licence identifier of the Hugging Face Hub (mit, apache-2.0, "
            "cc-by-sa-3.0 ...), or other with --license-name and --license-link"
        )
    if licence == "other" and not (name and link):
        lacking = [
            f"{option} ({'empty' if value == '' else 'not given'}: {what})"
            for option, value, what in (
                ("--license-name", name, "an identifier such as my-licence-1.0"),
                ("--license-link", link, "a file of the folder such as LICENSE, or a URL"),
            )
            if not value
        ]
        raise HltmtConfigError(f"--license other needs {' and '.join(lacking)}, as the Hub asks")
    if licence != "other" and (name or link):
        raise HltmtConfigError(
            "--license-name and --license-link name a licence the Hub does not list: add --license other"
        )
    if name is not None and not HUB_ID.fullmatch(name):
        raise HltmtConfigError(f"--license-name {name!r}: an identifier of lowercase letters, digits, '.', '+' and '-'")
    read: dict = {"given": given}
    if given["metrics"] is not None:
        read["metrics"] = read_metrics(given["metrics"], given["bleu_signature"], given["chrf_signature"])
    elif given["bleu_signature"] or given["chrf_signature"]:
        raise HltmtConfigError("--bleu-signature and --chrf-signature go with --metrics FILE, the scores they sign")
    if given["data_sizes"] is not None:
        read["sizes"] = dict(records.read_json(given["data_sizes"], SIZES, "data sizes record")["train"])
    return read


def read_metrics(path: str, bleu: Optional[str], chrf: Optional[str]) -> dict:
    """``--metrics FILE``: its scores and dataset, and the sacreBLEU signature of each metric it
    holds (the file's ``signatures``, or ``--bleu-signature`` / ``--chrf-signature``): a score
    without its signature is refused, since it cannot be compared with another."""
    found = records.read_json(path, METRICS, "metrics record")
    signatures = dict(found.get("signatures") or {})
    signatures.update({k: v for k, v in (("BLEU", bleu), ("chrF", chrf)) if v})
    metrics = ["BLEU"] + (["chrF"] if any("chrf" in s for s in found["scores"].values()) else [])
    for metric in metrics:
        if metric not in signatures:
            raise HltmtConfigError(
                f"--metrics {path}: no sacreBLEU signature for its {metric} scores: give --{metric.lower()}-signature "
                "(sacrebleu prints it beside the score) or a 'signatures' field"
            )
    setting = dict(found.get("setting") or {})
    evaluation = {k: setting[k] for k in ("beam", "max_en_words", "max_xx_words", "gen_len") if k in setting}
    split = found.get("split") or setting.get("split")
    if split:
        evaluation["split"] = split
    return {
        "scores": dict(found["scores"]),
        "signatures": signatures,
        "dataset": found.get("dataset"),
        "evaluation": evaluation,
    }


# ---- what the checkpoint and its data record ---------------------------------------------


def stored_options(cfg) -> dict:
    """The options a checkpoint stores, as one map of fairseq's option names: fairseq's legacy
    tasks keep the whole command line in one namespace; dataclass configs by section."""
    task = cfg.get("task") if hasattr(cfg, "get") else getattr(cfg, "task", None)
    if isinstance(task, Namespace):
        return dict(vars(task))
    from omegaconf import OmegaConf

    flat: dict = {}
    for section in ("task", "model", "criterion", "optimizer", "lr_scheduler"):
        part = cfg.get(section)
        if part is not None and part.get("_name"):
            flat["arch" if section == "model" else section] = part.get("arch") or part.get("_name")
    for part in cfg.values():
        if part is not None and hasattr(part, "items"):
            for key, value in OmegaConf.to_container(part, resolve=False).items():
                flat.setdefault(key, value)
    return flat


def _text(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def _same(a, b) -> bool:
    return a == b or _text(a) == _text(b)


def _parse(stored: dict, words: List[str]):
    """``(parser, options)``: fairseq-train's parser over the stored data folder, task,
    architecture, criterion, optimizer and scheduler, then ``words``."""
    from fairseq import options

    named = [w for key in NAMED if stored.get(key) for w in (f"--{key.replace('_', '-')}", str(stored[key]))]
    user_dir = ["--user-dir", PLUGIN_DIR] if stored.get("user_dir") else []
    parser = options.get_training_parser()
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # argparse's usage lines: the error is one line
            found = options.parse_args_and_arch(parser, input_args=[str(stored.get("data")), *user_dir, *named, *words])
    except SystemExit:
        raise HltmtConfigError("the checkpoint's stored options do not read back as a fairseq-train command") from None
    return parser, vars(found)


def shown_path(text) -> str:
    """A path as the card shows it: a relative one as the user gave it; an absolute one (a path of
    the machine that trained the model) by its last name only. Other text unchanged."""
    parts = str(text).split(os.pathsep)
    if not any(os.path.isabs(part) for part in parts):
        return str(text)
    return os.pathsep.join(os.path.basename(p.rstrip("/")) or p if os.path.isabs(p) else p for p in parts)


def _words(action, value) -> Optional[List[str]]:
    flag = max(action.option_strings, key=len)
    if action.nargs == 0:
        return [flag]
    if value is None or isinstance(value, dict):
        return None
    return [flag, _text(value)]


def training_command(stored: dict) -> Tuple[List[str], List[str]]:
    """``(command, unshown)``: the ``fairseq-train`` command the run was given, from its stored
    options: the data folder, ``--user-dir`` (the plugin's folder, ``$USER_DIR``), the task,
    architecture, criterion, optimizer and scheduler, then every option whose value is not what
    fairseq gives without it, in the parser's order, one word per option with its value; an
    option fairseq derives from another is left out (the command read back gives it).
    ``unshown``: the options whose stored value the command read back does not give."""
    parser, default = _parse(stored, [])
    actions = {a.dest: a for a in reversed(parser._actions) if a.option_strings}
    chosen: Dict[str, List[str]] = {}
    for dest in dict.fromkeys(a.dest for a in parser._actions):
        if dest not in NOT_SHOWN and dest in stored and dest in default and not _same(stored[dest], default[dest]):
            chosen[dest] = _words(actions[dest], stored[dest]) or []
    for dest in list(chosen):  # derived from the others: the command gives it without its option
        rest = [w for d, ws in chosen.items() if d != dest for w in ws]
        if _same(_parse(stored, rest)[1].get(dest), stored[dest]):
            del chosen[dest]
    read_back = _parse(stored, [w for ws in chosen.values() for w in ws])[1]
    unshown = [max(actions[d].option_strings, key=len) for d in chosen if not _same(read_back.get(d), stored[d])]
    named = [f"--{k.replace('_', '-')} {shlex.quote(str(stored[k]))}" for k in NAMED if stored.get(k)]
    program = f"fairseq-train {shlex.quote(shown_path(stored.get('data')))}"
    user_dir = ['--user-dir "$USER_DIR"'] if stored.get("user_dir") else []
    words = [" ".join(shlex.quote(shown_path(w)) for w in ws) for ws in chosen.values() if ws]
    return [program, *user_dir, *named, *words], unshown


def binarized_sizes(folders: List[str], pairs: List[str]) -> Dict[str, int]:
    """Sentence pairs per direction of the binarized train split in the first of ``folders``
    that holds one (fairseq's index headers, shards counted); {} when none does."""
    from hltmt_plugin.tasks.data_checks import binarized_length

    for folder in folders:
        sizes = {}
        for pair in pairs:
            src, tgt = pair.split("-", 1)
            for a, b in ((src, tgt), (tgt, src)):
                shards = (os.path.join(folder, f"train{k or ''}.{a}-{b}.{src}") for k in itertools.count())
                found = list(itertools.takewhile(lambda prefix: os.path.isfile(prefix + ".idx"), shards))
                if found:
                    sizes[pair] = sum(binarized_length(prefix) or 0 for prefix in found)
                    break
        if sizes:
            return sizes
    return {}


def card_facts(loaded, checkpoint: str, search: dict, read: dict) -> dict:
    """What the card says beyond the manifest: from the checkpoint (its stored options, update
    counts, data folder), the data's train split, and ``read`` (:func:`read_options`)."""
    from hltmt_plugin.compat.safe_loading import load_checkpoint
    from hltmt_plugin.models.hltmt_transformer import pool_model

    state = load_checkpoint(checkpoint)
    stored, history = stored_options(state["cfg"]), state.get("optimizer_history") or []
    del state
    given = read.get("given") or {}
    pooled = pool_model(loaded.model)
    system = "plain" if pooled is None else "lsmnmt" if stored.get("slp_language_specific") else "hltmt"
    recorded = str(stored.get("data") or "").split(os.pathsep)[0]
    command, unshown = training_command(stored)
    pairs = [p for p in _text(stored.get("lang_pairs") or "").split(",") if "-" in p]
    sizes, sizes_from = read.get("sizes"), "given to hltmt-export with --data-sizes"
    if sizes is None:
        folders = str(loaded.task.args.data).split(os.pathsep)[:1] + [recorded]
        sizes, sizes_from = binarized_sizes(folders, pairs), "the binarized train split"
    return {
        "name": given.get("name") or os.path.splitext(os.path.basename(checkpoint))[0],
        "system": system,
        "search": search,
        "command": command,
        "unshown": unshown,
        "updates": [int(h["num_updates"]) for h in history if isinstance(h, dict) and "num_updates" in h],
        # a run whose optimizer was "none": hltmt-import's record of the weights it read (no training)
        "imported": [
            i
            for i, h in enumerate(h for h in history if isinstance(h, dict) and "num_updates" in h)
            if h.get("optimizer_name") == "none"
        ],
        "max_update": stored.get("max_update"),
        "run_pairs": pairs,
        "started_from": stored.get("finetune_from_model") or None,
        # the model hltmt-import read, as the import's entry of the history names it
        "base_model": next(
            (str(h["hltmt_imported_from"]) for h in history if isinstance(h, dict) and h.get("hltmt_imported_from")),
            None,
        ),
        "size": {
            "parameters": sum(p.numel() for p in loaded.model.parameters()),
            "arch": stored.get("arch"),
            "layers": (stored.get("encoder_layers"), stored.get("decoder_layers")),
            "dim": stored.get("encoder_embed_dim"),
        },
        "data": {"folder": recorded or None, "name": given.get("dataset"), "sizes": sizes, "sizes_from": sizes_from},
        "license": {k: given.get(k) for k in ("license", "license_name", "license_link")},
        "metrics": read.get("metrics"),
    }


def check_metrics(record: dict, facts: dict) -> None:
    """Scores only for directions the model was trained on (one line naming the others)."""
    metrics = facts.get("metrics")
    if metrics:
        others = sorted(set(metrics["scores"]) - set(directions(record)["trained"]))
        if others:
            raise HltmtConfigError(
                f"--metrics: {', '.join(others[:5])} {'is not a direction' if len(others) == 1 else 'are not directions'} "
                f"the model was trained on ({', '.join(record['lang_pairs'][:10])})"
            )


# ---- the card ------------------------------------------------------------------------------


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


def targets(record: dict) -> List[str]:
    """The languages the model translates into (a language that is only ever a source is none)."""
    served = directions(record)
    produced = {d.split("-", 1)[1] for d in served["trained"] + served["zero-shot"]}
    return [lang for lang in record["langs"] if lang in produced]


def _q(value) -> str:
    return json.dumps(str(value))  # a JSON string is a YAML scalar, whatever it holds


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "custom"


def _model_index(facts: dict) -> List[str]:
    metrics = facts.get("metrics")
    if not metrics:
        return []
    dataset = metrics.get("dataset") or (facts.get("data") or {}).get("name") or "test set"
    lines = ["model-index:", f"- name: {_q(facts.get('name', 'model'))}", "  results:"]
    for direction, score in sorted(metrics["scores"].items()):
        lines += ["  - task:", "      type: translation", f"      name: {_q('Translation ' + direction)}"]
        lines += ["    dataset:", f"      name: {_q(dataset)}", f"      type: {_q(_slug(dataset))}", "    metrics:"]
        for metric, key in (("BLEU", "bleu"), ("chrF", "chrf")):
            if key in score:
                lines += [
                    f"    - type: {key}",
                    f"      value: {score[key]}",
                    f"      name: {_q(metric + ' ' + direction)}",
                ]
                lines += [f"      config: {_q(metrics['signatures'][metric])}"]
    return lines


def metadata(record: dict, facts: dict) -> str:
    """The Hub's YAML block (no ``pipeline_tag``: transformers 5 has no translation pipeline)."""
    licence = facts.get("license") or {}
    engine = engines.get(record["engine"])
    lines = ["---", "language:", *(f"- {lang}" for lang in record["langs"])]
    lines += [f"{k}: {_q(licence[k])}" for k in ("license", "license_name", "license_link") if licence.get(k)]
    tags = ["translation", "multilingual", "fairseq", "hltmt", record["source"].get("class") or engine.name]
    lines += [f"base_model: {_q(facts['base_model'])}"] if facts.get("base_model") else []
    lines += [f"library_name: {engine.library}", "tags:", *(f"- {t}" for t in tags), *_model_index(facts)]
    return "\n".join(lines + ["---", ""])


def _codes(record: dict) -> Dict[str, str]:
    return record.get("language_codes") or record.get("language_tokens") or {}


def _example(record: dict, group: str):
    """``(source, target)`` of a trained direction that ``group`` serves: from English where the
    model was trained from English into one of the group's targets (the example's text is English)."""
    served = [t for t in targets(record) if record["targets"].get(t) == group]
    pairs = [p.split("-", 1) for p in record["lang_pairs"] if p.split("-", 1)[1] in served]
    src, tgt = next((p for p in pairs if p[0] == "en"), pairs[0] if pairs else (record["langs"][0], served[0]))
    return src, tgt


def _first_group(record: dict) -> str:
    served = {record["targets"][t] for t in targets(record)}
    return next(g for g in sorted(record["models"]) if g in served)


# the transformers releases an export to transformers loads with (its tokenizer's codes as
# additional_special_tokens, read by 4.x and by 5.x; docs/deploying.md)
TRANSFORMERS_VERSIONS = "4.57 or later (4.x and 5.x)"
# the tokenizers an imported model is exported with again (export/tokenizers.py): the source language set on
# the tokenizer, the target's token forced; the transformers releases that load them
SOURCE_LANGUAGE_TOKENIZERS = {"M2M100Tokenizer": TRANSFORMERS_VERSIONS, "NllbTokenizer": "5.x"}


def usage_transformers(record: dict, facts: dict) -> List[str]:
    """The card's usage of an export to transformers: ``generate`` on the folder, and its search."""
    group = _first_group(record)
    src, tgt = _example(record, group)
    codes, place = _codes(record), record["models"][group]
    sub = "" if place == "." else f', subfolder="{place}"'
    text = f"{codes[tgt] if record['encoder_langtok'] == 'tgt' else codes.get(src, '')} The file could not be saved."
    forced = f", forced_bos_token_id=tok.convert_tokens_to_ids('{codes[tgt]}')" if record["decoder_langtok"] else ""
    search = facts.get("search") or {}
    tokenizer, note = record["source"].get("tokenizer"), record["source"].get("tokenizer_note")
    batch = [f'batch = tok(["{text.strip()}"], return_tensors="pt")']
    if tokenizer in SOURCE_LANGUAGE_TOKENIZERS:  # the source language set on the tokenizer, as the base model's
        batch = [f'tok.src_lang = "{codes.get(src, src) if tokenizer == "NllbTokenizer" else src}"']
        batch += ['batch = tok(["The file could not be saved."], return_tensors="pt")']
    return [
        f"The folder loads with transformers {SOURCE_LANGUAGE_TOKENIZERS.get(tokenizer, TRANSFORMERS_VERSIONS)}. "
        'transformers 5 has no `translation` pipeline (`pipeline("translation")` fails): translate with '
        "`generate`, as below.",
        "",
        "```python",
        "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer",
        "",
        'tok = AutoTokenizer.from_pretrained("MODEL_FOLDER")',
        f'model = AutoModelForSeq2SeqLM.from_pretrained("MODEL_FOLDER"{sub})',
        *batch,
        f"out = model.generate(**batch{forced})",
        "print(tok.batch_decode(out, skip_special_tokens=True))",
        "```",
        "",
        *([f"{note[0].upper()}{note[1:]}.", ""] if note else []),
        f"`generation_config.json` holds the search the model was evaluated with: beam {search.get('beam')}, "
        f"length penalty {search.get('lenpen')}, at most {search.get('max_len')} tokens, stopping once the "
        "beam's hypotheses are finished, the decoder started from the end-of-sentence token.",
    ]


def usage_ctranslate2(record: dict, facts: dict) -> List[str]:
    """The card's usage of an export to CTranslate2: the commands, the API, CTranslate2 alone."""
    group = _first_group(record)
    src, tgt = _example(record, group)
    tokens = _codes(record)
    lines = [
        "```bash",
        f"echo 'The file could not be saved.' | hltmt-translate --checkpoint MODEL_FOLDER --src {src} --tgt {tgt}",
        "```",
        "",
        'From Python: `HltmtTranslator.load("MODEL_FOLDER").translate(["The file could not be saved."], '
        f'src="{src}", tgt="{tgt}")` (`pip install ./serving` from the plugin\'s checkout: no torch, no fairseq).',
        "",
    ]
    if record.get("patches"):
        return lines + [
            f"Only `{record['models'][sorted(record['models'])[0]]}` is a whole CTranslate2 model: the other groups "
            "hold a patch of it, which the serving command rebuilds. For `ctranslate2.Translator` alone, export "
            "with `hltmt-export --whole-groups`."
        ]
    first = [tokens[tgt if record["encoder_langtok"] == "tgt" else src]] if record["encoder_langtok"] else []
    prefix = f", target_prefix=[[{tokens[tgt]!r}]]" if record["decoder_langtok"] else ""
    return lines + [
        "With CTranslate2 alone, give the tokens as fairseq built them: "
        + ("the language token, " if first else "")
        + "the sentencepiece pieces of `spm.model`, then `</s>`"
        + (f"; the target's token {tokens[tgt]} is forced first and left out of the text" if prefix else "")
        + ":",
        "",
        "```python",
        "import ctranslate2, sentencepiece",
        "",
        'sp = sentencepiece.SentencePieceProcessor(model_file="MODEL_FOLDER/spm.model")',
        f'model = ctranslate2.Translator("MODEL_FOLDER/{record["models"][group]}")',
        f'source = {first!r} + sp.encode("The file could not be saved.", out_type=str) + ["</s>"]',
        f"out = model.translate_batch([source]{prefix}, beam_size=5, min_decoding_length=1)",
        f"print(sp.decode(out[0].hypotheses[0]{'[1:]' if prefix else ''}))",
        "```",
    ]


def _input_rule(record: dict) -> str:
    codes = _codes(record)
    example = codes.get("de", next(iter(codes.values()), ">>de<<"))
    if record["encoder_langtok"] == "tgt":
        return (
            f"The input is the sentence after the target language's token (`{example} text`), as the model was "
            "trained (`--encoder-langtok tgt`), then the end of sentence. One call may mix target languages that "
            "the same model folder serves."
        )
    if record["encoder_langtok"] == "src":
        return (
            "The input is the sentence after the source language's token and the target language's token is "
            "forced as the first output token, as the model was trained (`--encoder-langtok src "
            "--decoder-langtok`): one target language per call."
        )
    return "The input is the sentence alone (the model was trained without language tokens)."


def _groups(record: dict) -> List[str]:
    if set(record["models"]) == {"main"}:
        place = record["models"]["main"]
        return [f"One model serves every direction: {'the folder itself' if place == '.' else f'`{place}`'}."]
    lines = [
        "Each target language goes through its own modules (the pool module its routing map gives it, or the "
        "universal layer), so each group of target languages is a model of its own; load the one that serves "
        "the target language:",
        "",
        "| folder | target languages |",
        "|---|---|",
    ]
    served = targets(record)
    for group, place in sorted(record["models"].items()):
        langs = [lang for lang in served if record["targets"].get(lang) == group]
        never = [lang for lang, g in record["targets"].items() if g == group and lang not in served]
        lines.append(f"| `{place}` | {', '.join(langs) or 'none (' + ', '.join(never) + ': never a target)'} |")
    return lines


def _data(facts: dict) -> List[str]:
    data = facts.get("data") or {}
    folder = (
        f"the data folder the run read, `{shown_path(data['folder'])}`"
        if data.get("folder")
        else "a data folder not recorded"
    )
    folder = f"{data['name']}: {folder}" if data.get("name") else folder[:1].upper() + folder[1:]
    sizes = data.get("sizes") or {}
    if sizes:
        counts = ", ".join(f"{k} {n:,}" for k, n in sorted(sizes.items()))
        said = f"Training sentence pairs ({data.get('sizes_from')}): {counts}; {sum(sizes.values()):,} in all."
    else:
        said = (
            "Its sizes are not known here: neither the data folder the export read nor the one the run read holds "
            "its train split (give them with `--data-sizes FILE`)."
        )
    return [f"{folder}.", "", said]


def _licence(facts: dict) -> str:
    licence = facts.get("license") or {}
    if not licence.get("license"):
        return "Licence: not given to hltmt-export (`--license`): check the licences of the training data before reuse."
    if licence["license"] == "other":
        return (
            f"Licence: `{licence['license_name']}`, stated in [{licence['license_link']}]({licence['license_link']})."
        )
    return f"Licence: `{licence['license']}`."


def _evaluation(evaluation: dict) -> List[str]:
    """How the scores were made, as the metrics record states it; what it does not state, said so."""
    split = (
        f"the {evaluation['split']} split" if evaluation.get("split") else "a split the metrics record does not name"
    )
    words = [
        f"at most {evaluation[k]:,} {w} words"
        for k, w in (("max_en_words", "English"), ("max_xx_words", "target"))
        if evaluation.get(k)
    ]
    kept = f", segments of {' and '.join(words)}" if words else ", no segment filter recorded"
    beam = f"beam {evaluation['beam']}" if evaluation.get("beam") else "a beam the record does not give"
    a, b = evaluation.get("gen_len") or (None, None)
    length = f", at most {a:g} x the source's length + {b:g} tokens" if a is not None else ""
    return [f"Scored on {split}{kept}; translated with {beam}{length} (as the metrics record states)."]


def _metrics(facts: dict) -> List[str]:
    metrics = facts.get("metrics")
    if not metrics:
        return ["No metrics were given to hltmt-export (`--metrics FILE`)."]
    chrf = all("chrf" in s for s in metrics["scores"].values())
    lines = ["| direction | BLEU |" + (" chrF |" if chrf else ""), "|---|---|" + ("---|" if chrf else "")]
    for direction, score in sorted(metrics["scores"].items()):
        lines.append(f"| {direction} | {score['bleu']} |" + (f" {score['chrf']} |" if chrf else ""))
    lines += ["", *_evaluation(metrics.get("evaluation") or {}), ""]
    lines += [
        f"sacreBLEU signature, {m}: `{s}`" + ("" if m == "chrF" else "  ")
        for m, s in sorted(metrics["signatures"].items())
    ]
    return lines


def _trained(trained: List[str], facts: dict) -> str:
    """The trained directions: the last run's (its ``--lang-pairs``) apart from those the model it
    started from had been trained on, where the record holds more than the run trained."""
    run = [p for p in facts.get("run_pairs") or [] if p in trained]
    base = [p for p in trained if p not in run]
    if not run or not base:
        return f"Trained directions: {', '.join(trained) or 'none recorded'}."
    named = [f"`{shown_path(facts['started_from'])}`"] if facts.get("started_from") else []
    named += [f"imported from `{facts['base_model']}` with hltmt-import"] if facts.get("base_model") else []
    start = f" ({', '.join(named)})" if named else ""
    return (
        f"Trained directions: {', '.join(run)} in the last training run (its `--lang-pairs`); {len(base):,} more "
        f"the model it started from{start} had been trained on: {', '.join(base)}."
    )


def _size(facts: dict) -> List[str]:
    size = facts.get("size")
    if not size:
        return []
    enc, dec = size.get("layers") or (None, None)
    shape = (
        f", {enc} encoder and {dec} decoder layers of width {size['dim']}" if enc and dec and size.get("dim") else ""
    )
    return [
        f"Size: {size['parameters']:,} parameters in the checkpoint (`--arch {size.get('arch')}`{shape}); each "
        "exported model holds the shared weights and its own group's modules.",
        "",
    ]


def _training(facts: dict) -> List[str]:
    updates, max_update = facts.get("updates") or [], facts.get("max_update")
    if not updates:
        counted = "The checkpoint records no update count."
    else:
        counted = f"Trained for {updates[-1]:,} updates, as the checkpoint records."
        if len(updates) > 1:
            imported = set(facts.get("imported") or ())
            each = ", ".join(
                f"{u:,}" + (" (an import by hltmt-import: no training)" if i in imported else "")
                for i, u in enumerate(updates)
            )
            counted = (
                f"The checkpoint records {len(updates)} runs, each with the update count it was saved at: {each}. "
                "A run started with `--finetune-from-model` or `--reset-optimizer` counts from 0 again; one "
                "resumed with `--restore-file` goes on from its predecessor's count."
            )
        if max_update and max_update != updates[-1]:
            counted += (
                f" The last run was given `--max-update {max_update}` and saved this checkpoint at {updates[-1]:,}."
            )
    head = "The last run's command" if len(updates) > 1 else "The command"
    return [
        counted,
        "",
        f"{head}, from the options stored in the checkpoint (`USER_DIR`: the installed `hltmt_plugin` package's "
        "folder):",
        "",
        "```bash",
        " \\\n    ".join(facts.get("command") or ["(not recorded)"]),
        "```",
    ] + (
        ["", f"Stored options that no command line gives back, not shown: {', '.join(facts['unshown'])}."]
        if facts.get("unshown")
        else []
    )


def _how_to_use(record: dict, facts: dict) -> List[str]:
    if not targets(record):
        return ["It serves no direction: it produces several languages and no token names the one to produce."]
    return [_input_rule(record), "", *engines.card_usage(record, facts)]


def card(record: dict, facts: dict) -> str:
    """The model card (``README.md``) of an export folder: ``record`` its manifest record,
    ``facts`` what the project records beyond it (:func:`card_facts`): ``name``, ``system``
    (hltmt, lsmnmt, plain), ``search`` (beam, lenpen, max_len), ``command`` and ``unshown``, ``updates``,
    ``max_update``, ``data`` (``folder``, ``name``, ``sizes``, ``sizes_from``), ``license``,
    ``metrics`` (``scores`` {direction: {bleu, chrf}}, ``signatures``, ``dataset``)."""
    served = directions(record)
    source = record["source"]
    made = engines.said(engines.get(record["engine"]).made, record)
    never = sorted(set(record["langs"]) - set(targets(record)))
    parts = [
        metadata(record, facts),
        f"# {facts.get('name', source.get('checkpoint', 'model'))}",
        "",
        f"A multilingual translation model: {SYSTEMS.get(facts.get('system', 'plain'), SYSTEMS['plain'])}, "
        f"trained with fairseq and the `hltmt_plugin`, exported to {made}.",
        "",
        "## Languages and directions",
        "",
        f"Languages: {', '.join(record['langs'])}; translated into: {', '.join(targets(record)) or 'none'}"
        + (f" ({', '.join(never)} never a target)." if never else "."),
        "",
        _trained(served["trained"], facts),
        "",
        f"Zero-shot directions (never trained; output often in the wrong language): "
        f"{', '.join(served['zero-shot']) or 'none'}. Other directions were never learned.",
        "",
        *_groups(record),
        "",
        "## How to use",
        "",
        *_how_to_use(record, facts),
        "",
        "## Training data",
        "",
        *_data(facts),
        "",
        _licence(facts),
        "",
        "## Evaluation",
        "",
        *_metrics(facts),
        "",
        "## Training",
        "",
        *_size(facts),
        *_training(facts),
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


def write(folder: str, record: dict, loaded, checkpoint: str, search: Optional[dict], read: dict) -> None:
    """The card of the export in ``folder`` (``README.md``), from ``record`` and :func:`card_facts`;
    ``read``: :func:`read_options`' result."""
    facts = card_facts(loaded, checkpoint, search, read)
    check_metrics(record, facts)
    with open(os.path.join(folder, "README.md"), "w", encoding="utf-8") as f:
        f.write(card(record, facts))
