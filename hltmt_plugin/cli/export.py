#!/usr/bin/env python3
"""Export a checkpoint for use outside fairseq: to CTranslate2 (the default) or to Hugging Face
transformers (``--to transformers``).

    hltmt-export --checkpoint ckpt/checkpoint_best.pt --out exported/ [--quantization int8] [--whole-groups]
    hltmt-export --to transformers --checkpoint ckpt/checkpoint_best.pt --out exported-hf/
    hltmt-translate --checkpoint exported/ --src en --tgt de < input.txt

Every model the translator serves exports, except adapters and skills (refused in one line
saying why): a plain fairseq multilingual model (``translation_multi_simple_epoch``, either
language-token convention) as one model; an HLT-MT or LS-MNMT model as one model per pool
module its routing map uses plus one for the universal layer, the module as one more decoder
layer. The folder holds the models (CTranslate2's, or transformers' stock classes and their
tokenizer), the sentencepiece model, the dictionary, a model card (``README.md``: the card's
options below set its licence, metrics and data) and ``manifest.json`` (languages,
language-token convention, routing map, which model serves which target language, every file's
SHA-256), and is written whole or not at all. ``hltmt-translate --checkpoint FOLDER`` and
``HltmtTranslator.load(FOLDER)`` serve it with the checkpoint's contract (docs/deploying.md).

Progress (reading the checkpoint, writing each group's model) goes to stderr, one line a stage,
when stderr is a terminal or once the export has run 10 seconds; HLTMT_PROGRESS=1 shows every
line, HLTMT_PROGRESS=0 none.

Needs CTranslate2 (``pip install -e ".[ctranslate2]"``) or transformers (``pip install -e ".[transformers]"``).
"""

import argparse
import logging
import os
import sys

PROG = "hltmt-export"


def build_parser():
    from hltmt_plugin.cli import add_version
    from hltmt_plugin.hub.engines import EXPORTED
    from hltmt_plugin.hub.manifest import QUANTIZATIONS
    from hltmt_plugin.paths import READ_FILE, READ_FOLDER, WRITE_FOLDER, ArgumentParser, path_option

    p = ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    path_option(p, "--checkpoint", "--path", kind=READ_FILE, required=True, help="the checkpoint to export")
    path_option(p, "--out", "-o", kind=WRITE_FOLDER, required=True, help="the export folder to write")
    p.add_argument(
        "--to",
        default="ctranslate2",
        choices=EXPORTED,
        help="the engine to export to (transformers: Hugging Face stock classes and a model card)",
    )
    p.add_argument(
        "--quantization",
        default="float32",
        choices=QUANTIZATIONS,
        help="the weights' type (CTranslate2's quantization; default float32: the checkpoint's lines exactly; "
        "int8 is the recommended export of a pool model, whose groups CTranslate2 holds whole, each "
        "with every shared weight)",
    )
    path_option(
        p,
        "--spm",
        kind=READ_FILE,
        default=None,
        help="sentencepiece model (default: found as hltmt-translate finds it)",
    )
    path_option(
        p,
        "--data",
        kind=READ_FOLDER,
        default=None,
        help="binarized data folder with the dict.*.txt (default: the stored one)",
    )
    p.add_argument(
        "--whole-groups",
        action="store_true",
        help="CTranslate2: write every group's model whole, each a folder plain ctranslate2.Translator opens "
        "(default: the first group whole, the others as patches of it, which the serving command rebuilds)",
    )
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    add_card_options(p)
    p.add_argument("--verbose", action="store_true", help="fairseq's log messages on stderr")
    return add_version(p)


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.verbose:
        logging.disable(logging.WARNING)
    from hltmt_plugin.errors import HltmtError
    from hltmt_plugin.hub import engines

    engine = engines.get(args.to)
    own = {}  # the options only some engines take (each engine's export_options): given to --to's alone
    for other in engines.ENGINES.values():
        for dest, keyword in other.export_options.items():
            value, default = getattr(args, dest), parser.get_default(dest)
            if other is engine:
                own[keyword] = value
            elif value != default and dest not in engine.export_options:
                flag = "--" + dest.replace("_", "-")
                shown = "" if isinstance(value, bool) else f" {value}"
                return fail(f"{flag}{shown} is {other.label}'s: --to {engine.name} does not take it")
    from hltmt_plugin import progress

    try:  # --out written by atomic_files.write_folder: never an input, a user's folder or a special file
        with progress.started(PROG):
            record = engines.exporter(engine.name).export(
                args.checkpoint,
                args.out,
                spm=args.spm,
                data=args.data,
                force=args.force,
                card=card_options(args),
                **own,
            )
    except HltmtError as error:
        return fail(error)
    groups = served_groups(record, {group: group for group in record["models"]})
    print(
        f"{PROG}: {args.checkpoint} -> {args.out} ({engines.said(engine.summary, record)}): "
        f"{len(record['models'])} model(s): {groups}"
    )
    for note in engines.notes(record):
        print(f"{PROG}: {note}")
    return 0


def served_groups(record: dict, names: dict) -> str:
    """``name (targets), ...``: each group of an export and the languages it translates into."""
    from hltmt_plugin.export.model_card import targets

    served = targets(record)
    return ", ".join(
        f"{names[group]} ({','.join(sorted(t for t in served if record['targets'][t] == group)) or 'no target'})"
        for group in record["models"]
    )


def add_card_options(p) -> None:
    """The model card's fields (``README.md`` of the folder), for either engine."""
    from hltmt_plugin.paths import READ_FILE, path_option

    card = p.add_argument_group("the model card (README.md; what is not given is said to be unknown)")
    card.add_argument(
        "--name", default=None, metavar="NAME", help="the card's title (default: the checkpoint's file name)"
    )
    card.add_argument(
        "--license",
        default=None,
        help="the weights' licence as the Hugging Face Hub names it (mit, cc-by-sa-3.0 ..., or other with "
        "--license-name and --license-link; default: none stated)",
    )
    card.add_argument(
        "--license-name", default=None, metavar="NAME", help="with --license other: the licence's identifier"
    )
    card.add_argument(
        "--license-link", default=None, metavar="URL", help="with --license other: a file of the folder or a URL"
    )
    card.add_argument("--dataset", default=None, metavar="NAME", help="the training data's name (default: none stated)")
    path_option(
        card,
        "--data-sizes",
        kind=READ_FILE,
        default=None,
        help='JSON {"train": {direction or language: sentence pairs}} (default: counted from the binarized '
        "train split beside the data folder, when there)",
    )
    path_option(
        card,
        "--metrics",
        kind=READ_FILE,
        default=None,
        help='JSON {"scores": {direction: {"bleu": B, "chrf": C}}, "signatures": {"BLEU": .., "chrF": ..}} '
        "(a study run's scores.json is one; default: no metrics)",
    )
    card.add_argument("--bleu-signature", default=None, help="sacreBLEU's signature of --metrics' BLEU scores")
    card.add_argument("--chrf-signature", default=None, help="sacreBLEU's signature of --metrics' chrF scores")


def card_options(args) -> dict:
    from hltmt_plugin.export.model_card import OPTIONS

    return {name: getattr(args, name) for name in OPTIONS}


def add_engine_options(p) -> None:
    """hltmt-translate's options for an exported model."""
    from hltmt_plugin.hub.arguments import threads_option
    from hltmt_plugin.hub.engines import ENGINES, EXPORTED

    p.add_argument(
        "--engine",
        default=None,
        choices=list(ENGINES),
        help="what translates (default: fairseq for a checkpoint; for a folder written by hltmt-export, the "
        f"engine it was exported to: {' or '.join(ENGINES[name].label for name in EXPORTED)}); "
        f"{' or '.join(EXPORTED)} with a checkpoint exports it to a temporary folder first",
    )
    p.add_argument(
        "--compute-type",
        default=None,
        help="an exported model's CTranslate2 compute type (default: "
        "the exported weights' type): int8, float32, float16 ...",
    )
    p.add_argument(
        "--threads",
        type=threads_option,
        default=None,
        help="an exported model's threads (CTranslate2's, or torch's for an export to transformers; default: "
        "$OMP_NUM_THREADS, else the engine's)",
    )


def engine_load_options(args):
    """``(checkpoint, spm, data, engine options)`` for ``HltmtTranslator.load`` from
    hltmt-translate's options: ``--engine`` an exported engine with a checkpoint serves its export,
    made in a temporary folder (removed at exit, on SIGTERM, and after a SIGKILL by the next run)."""
    from hltmt_plugin.errors import HltmtConfigError
    from hltmt_plugin.hub.manifest import is_export

    engine = {k: v for k, v in (("compute_type", args.compute_type), ("threads", args.threads)) if v is not None}
    exported = is_export(args.checkpoint)
    if args.engine == "fairseq" and exported:
        raise HltmtConfigError(
            f"--checkpoint {args.checkpoint} is an exported model: the engine it was exported to serves it "
            "(leave out --engine fairseq)"
        )
    if args.engine in (None, "fairseq") or exported:
        return args.checkpoint, args.spm, args.data, engine
    from hltmt_plugin.atomic_files import scratch_folder
    from hltmt_plugin.hub import engines

    work = scratch_folder("hltmt-export.")  # removed at exit and on SIGTERM; after a SIGKILL, by the next one
    folder = os.path.join(work, "model")
    engines.exporter(args.engine).export(args.checkpoint, folder, spm=args.spm, data=args.data)
    return folder, None, None, engine


def served_folder(translator) -> str:
    """The folder a loaded translator reads from: an export folder, or the checkpoint's data folder."""
    folder = getattr(translator, "folder", None)
    return folder if folder is not None else str(translator.task.args.data).split(os.pathsep)[0]


def fail(message, status=2):
    sys.stderr.write(f"{PROG}: error: {message}\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
