#!/usr/bin/env python3
"""Import a transformers folder into fairseq: a checkpoint and the data folder it reads.

    hltmt-import --model m2m100-folder/ --out imported/
    hltmt-translate --checkpoint imported/checkpoint.pt --src en --tgt de < input.txt

--model is a folder of ``M2M100ForConditionalGeneration`` with its ``M2M100Tokenizer`` files
(M2M-100) or its ``NllbTokenizer`` files (NLLB-200), or a folder ``hltmt-export --to
transformers`` wrote (``M2M100ForConditionalGeneration`` or ``MarianMTModel``). --out gets
``checkpoint.pt`` (fairseq's plain ``transformer`` of ``translation_multi_simple_epoch``, every
option read from the folder), a ``dict.<lang>.txt`` per language, ``spm.model`` and
``langs.txt``, written whole or not at all. The weights are read from the first of
``model.safetensors``, its shards (``model.safetensors.index.json``), ``pytorch_model.bin``, its
shards (``pytorch_model.bin.index.json``); a ``pytorch_model.bin`` weights-only, so nothing in
the folder runs. A weight, option or tokenizer fairseq's model cannot hold is refused in one
line (docs/pretrained.md).

Progress (reading the weights shard by shard, writing the checkpoint) goes to stderr, one line a
stage, when stderr is a terminal or once the import has run 10 seconds; HLTMT_PROGRESS=1 shows
every line, HLTMT_PROGRESS=0 none.
"""

import argparse
import logging
import sys

PROG = "hltmt-import"


def build_parser():
    from hltmt_plugin.cli import add_version
    from hltmt_plugin.paths import READ_FOLDER, WRITE_FOLDER, ArgumentParser, path_option

    p = ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    path_option(p, "--model", kind=READ_FOLDER, required=True, help="the transformers folder to import")
    path_option(p, "--out", "-o", kind=WRITE_FOLDER, required=True, help="the folder to write (checkpoint and data)")
    p.add_argument("--force", action="store_true", help="replace --out if an earlier hltmt-import wrote it")
    p.add_argument("--verbose", action="store_true", help="fairseq's log messages on stderr")
    return add_version(p)


def main(argv=None):
    args = build_parser().parse_args(argv)
    if not args.verbose:
        logging.disable(logging.WARNING)
    from hltmt_plugin import progress
    from hltmt_plugin.errors import HltmtError
    from hltmt_plugin.export.importing import import_folder

    try:
        with progress.started(PROG):
            done = import_folder(args.model, args.out, force=args.force)
    except HltmtError as error:
        sys.stderr.write(f"{PROG}: error: {error}\n")
        return 2
    langs = done["langs"]
    shown = ",".join(langs[:8]) + (f",... ({len(langs)})" if len(langs) > 8 else "")
    print(f"{PROG}: {args.model} ({done['class']}) -> {done['checkpoint']} ({done['norm']}-norm transformer): {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
