#!/usr/bin/env python3
"""Export one language's adapters from a checkpoint, import them into another checkpoint of
the same base model, or give a checkpoint a language outside its ``--langs``.

    hltmt-adapters export --path ckpt_hi/checkpoint_last.pt --lang hi --out hi.adapters.pt
    hltmt-adapters import --path base/checkpoint_last.pt --adapters hi.adapters.pt \\
        --out base_plus_hi.pt
    hltmt-adapters add-language --path base/checkpoint_last.pt --lang gu --out base_plus_gu.pt

The file holds the language's language and invertible adapters and its ``__xx__`` token rows,
with a fingerprint of the base model and the adapter sizes; ``import`` refuses a file from
another base or of other sizes. The model is rebuilt from the checkpoint's own options;
``--data`` names the binarized data folder (for its dictionaries) if it has moved since
training. ``import`` writes a new checkpoint whose ``--adapter-langs`` include the language
and whose trained directions are its own and the file's (resume training from it with
``--reset-optimizer``). ``add-language`` writes a checkpoint whose ``--langs`` end with the new
language: its ``__xx__`` token appended to the dictionary, one row more in each token table, every
other weight unchanged; its adapters then train as any language's (docs/adapters.md).

``import`` trusts nothing in the file: it takes only the language's own adapter tensors and
token rows, with this model's names, shapes and dtype, finite and of plausible size, and
refuses anything else with one line. Every file is written atomically (a temporary file in
the same folder, fsync, rename), so ``--out`` may equal ``--path``: the checkpoint is either
the old one or the whole new one, never a truncated one.
"""

import argparse
import os
import sys

from hltmt_plugin.atomic_files import check_output
from hltmt_plugin.cli import add_version, register
from hltmt_plugin.directions import TRAINED_KEY
from hltmt_plugin.errors import HltmtInputError
from hltmt_plugin.paths import READ_FILE, READ_FOLDER, WRITE_FILE, ArgumentParser, path_option


def load(path, data):
    """The model of the checkpoint ``path`` in eval mode (``data``: its data folder, else the stored one)."""
    from hltmt_plugin.hub.loading import load_model

    model, _, _ = load_model(path, data)
    model.eval()
    return model


def refuse_inputs(option, out, inputs, data):
    """An output that is one of the files the command reads: one line, nothing written."""
    from hltmt_plugin.cli.output import OutputError, refuse_inputs as refuse

    try:
        refuse(option, out, inputs, {"the data folder --data": data})
    except OutputError as error:
        raise HltmtInputError(str(error)) from None


def export(args):
    from hltmt_plugin.adapters.files import export_language

    if os.path.exists(args.out) and os.path.samefile(args.out, args.path):
        raise HltmtInputError(
            f"export --out {args.out} is the checkpoint --path itself: writing the adapter file "
            "there would replace the checkpoint; name another file"
        )
    refuse_inputs("export --out", args.out, {}, args.data)
    model = load(args.path, args.data)
    blob = export_language(model, args.lang, args.out)
    n = sum(t.numel() for t in blob["tensors"].values())
    print(
        f"exported {args.lang}: {len(blob['tensors'])} adapter tensors ({n:,} parameters) and "
        f"{len(blob['token_rows'])} token row(s) to {args.out}"
    )


def import_(args):
    from hltmt_plugin.adapters.files import import_language, read_language_file, store_options
    from hltmt_plugin.atomic_files import save_torch
    from hltmt_plugin.compat.safe_loading import load_state

    # --out may be --path (the checkpoint is replaced whole, atomically), never the adapter file
    refuse_inputs("import --out", args.out, {"the --adapters file": args.adapters}, args.data)
    read_language_file(args.adapters)  # a file that is not one is refused before the model loads
    model = load(args.path, args.data)
    lang = import_language(model, args.adapters)
    state = load_state(args.path)  # as written, weights-only
    state["model"] = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    # the model's options as the import left them: its adapter languages and trained directions
    changed = {name: getattr(model.args, name) for name in ("adapter_langs", TRAINED_KEY)}
    store_options(state, changed)
    save_torch(state, args.out)  # never a partial file, also when --out is --path
    same = os.path.abspath(args.out) == os.path.abspath(args.path)
    print(
        f"imported {lang} into {args.out}{' (replacing it)' if same else ''} (adapter languages "
        f"{changed['adapter_langs']}; trained directions {changed[TRAINED_KEY]})"
    )


def add_language(args):
    from hltmt_plugin.adapters.files import add_new_language, check_adapters
    from hltmt_plugin.atomic_files import save_torch
    from hltmt_plugin.compat.safe_loading import load_state
    from hltmt_plugin.hub.loading import load_model

    refuse_inputs("add-language --out", args.out, {}, args.data)
    model, _, task = load_model(args.path, args.data)
    check_adapters(model)
    state = load_state(args.path)  # as written, weights-only
    token = add_new_language(state, task, args.lang)
    save_torch(state, args.out)  # never a partial file, also when --out is --path
    langs = ",".join([*task.langs, args.lang])
    print(
        f"added {args.lang} to {args.out}: token {token} (row {len(task.source_dictionary)}), languages {langs}; "
        f"train its adapters with --langs {langs}"
    )


def build_parser():
    """The command line of hltmt-adapters (export / import)."""
    p = add_version(ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("export", help="write one language's adapters to a small file")
    path_option(e, "--path", kind=READ_FILE, required=True, help="checkpoint holding the adapters")
    e.add_argument("--lang", required=True, help="the language to export")
    path_option(e, "--out", kind=WRITE_FILE, required=True, help="the adapter file to write")
    i = sub.add_parser("import", help="add a language's adapters to a checkpoint of the same base")
    path_option(i, "--path", kind=READ_FILE, required=True, help="checkpoint to import into")
    path_option(i, "--adapters", kind=READ_FILE, required=True, help="an adapter file written by export")
    path_option(
        i, "--out", kind=WRITE_FILE, in_place=("--path",), required=True, help="the checkpoint to write (may be --path)"
    )
    a = sub.add_parser("add-language", help="give a checkpoint a language outside its --langs (a new token row)")
    path_option(a, "--path", kind=READ_FILE, required=True, help="checkpoint to add the language to")
    a.add_argument(
        "--lang", required=True, metavar="LANG", help="the new language (appended to the checkpoint's --langs)"
    )
    path_option(
        a, "--out", kind=WRITE_FILE, in_place=("--path",), required=True, help="the checkpoint to write (may be --path)"
    )
    for sp in (e, i, a):
        path_option(
            sp,
            "--data",
            kind=READ_FOLDER,
            default=None,
            help="binarized data folder (default: the one the checkpoint was trained on)",
        )
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    check_output(args.out, "--out")  # a device, FIFO or stream path: refused before any work
    register()  # the task and model, safe loading: once the arguments are read
    {"export": export, "import": import_, "add-language": add_language}[args.command](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
