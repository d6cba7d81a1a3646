#!/usr/bin/env python3
"""Export a checkpoint to CTranslate2, for serving outside fairseq.

    hltmt-export --checkpoint ckpt/checkpoint_best.pt --out exported/ [--quantization int8]
    hltmt-translate --checkpoint exported/ --src en --tgt de < input.txt

Every model the translator serves exports, except adapters and skills (refused in one line
saying why): a plain fairseq multilingual model (``translation_multi_simple_epoch``, either
language-token convention) as one CTranslate2 model; an HLT-MT or LS-MNMT model as one
CTranslate2 model per pool module its routing map uses plus one for the universal layer, the
module as one more decoder layer. The folder holds the CTranslate2 models, the sentencepiece
model, the dictionary and ``manifest.json`` (languages, language-token convention, routing map,
which model serves which target language, every file's SHA-256), and is written whole or not
at all. ``hltmt-translate --checkpoint FOLDER`` and ``HltmtTranslator.load(FOLDER)`` serve it
with the checkpoint's contract (docs/deploying.md).

Needs CTranslate2: ``pip install -e ".[ctranslate2]"``.
"""
import argparse
import logging
import sys

PROG = "hltmt-export"


def build_parser():
    from hltmt_plugin.export.ctranslate2 import QUANTIZATIONS

    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", "--path", required=True, help="the checkpoint to export")
    p.add_argument("--out", "-o", required=True, metavar="FOLDER", help="the export folder to write")
    p.add_argument("--to", default="ctranslate2", choices=["ctranslate2"], help="the engine to export to")
    p.add_argument("--quantization", default="float32", choices=QUANTIZATIONS,
                   help="the weights' type (CTranslate2's quantization; default float32)")
    p.add_argument("--spm", default=None, help="sentencepiece model (default: found as hltmt-translate finds it)")
    p.add_argument("--data", default=None, help="binarized data folder with the dict.*.txt (default: the stored one)")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.add_argument("--verbose", action="store_true", help="fairseq's log messages on stderr")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    if not args.verbose:
        logging.disable(logging.WARNING)
    from hltmt_plugin.errors import HltmtError
    from hltmt_plugin.export.ctranslate2 import export

    from hltmt_plugin.atomic_files import inside

    for name, path in (("--checkpoint", args.checkpoint), ("--spm", args.spm), ("--data", args.data)):
        if path and inside(path, args.out):
            return fail(f"--out {args.out} is or holds {name} {path}: name another folder")
    try:
        record = export(args.checkpoint, args.out, quantization=args.quantization, spm=args.spm, data=args.data,
                        force=args.force)
    except HltmtError as error:
        return fail(error)
    groups = ", ".join(f"{group} ({','.join(sorted(t for t, g in record['targets'].items() if g == group))})"
                       for group in record["models"])
    print(f"{PROG}: {args.checkpoint} -> {args.out} (CTranslate2 {record['source']['ctranslate2']}, "
          f"{args.quantization}): {len(record['models'])} model(s): {groups}")
    return 0


def fail(message, status=2):
    sys.stderr.write(f"{PROG}: error: {message}\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
