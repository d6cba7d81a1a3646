#!/usr/bin/env python3
"""Train one language's encoder language adapters and invertible adapter by masked language
modelling on plain text of that language, everything else frozen (MAD-X, Pfeiffer et al.
2020), and write them as an adapter file in the format of ``hltmt-adapters export``.

    hltmt-train-language-adapter --path ckpt/base/checkpoint_last.pt --lang hi \\
        --text mono.hi --spm runs/data/spm/spm.model --out hi.mlm.adapters.pt --steps 2000
    hltmt-adapters import --path ckpt/base/checkpoint_last.pt --adapters hi.mlm.adapters.pt \\
        --out ckpt/base_plus_hi.pt

The checkpoint is a translation model with adapters (``--language-adapters`` and/or
``--invertible-adapters``) whose ``--langs`` include the language (its ``__xx__`` token); a
language without adapters there gets fresh identity ones first. Each line of ``--text`` is
encoded with the sentencepiece model the data was prepared with, masked with fairseq's
``MaskTokensDataset`` and fed to the encoder as a sentence of that language; the loss is
fairseq's ``masked_lm`` criterion over the tied output embedding (see
``hltmt_plugin/adapters/mlm.py``). Every other parameter stays bit-identical, so the file
imports into every checkpoint of the same base (``hltmt-adapters import``), where the
language can then be translated from without parallel data (MAD-X's zero-shot transfer).
Defaults follow MAD-X: Adam, learning rate 1e-4, 64 sentences per batch. The loss is logged
in base 2 per masked token, as fairseq's ``masked_lm`` criterion reports it.
"""

import argparse
import math
import os
import sys
import time

from hltmt_plugin.cli import add_version, register
from hltmt_plugin.errors import HltmtError, HltmtInputError

MAX_UNKNOWN = 0.2  # more <unk> pieces than this: not the model's sentencepiece model, or a script it lacks


def load_model(path, data=None):
    """The translation model of a checkpoint, rebuilt from its own options."""
    from hltmt_plugin.hub.loading import load_model as rebuild

    model, _, _ = rebuild(path, data, must_exist=True)
    return model.eval()


def read_sentences(text, spm_model, dictionary, max_positions, max_lines=None):
    """The lines of ``text`` as token tensors (no eos), encoded with ``spm_model``; empty lines
    and lines longer than the encoder takes are left out."""
    import sentencepiece as spm

    if not os.path.isfile(text):
        raise HltmtInputError(f"text file {text} does not exist")
    if not os.path.isfile(spm_model):
        raise HltmtInputError(f"sentencepiece model {spm_model} does not exist")
    try:
        sp = spm.SentencePieceProcessor(model_file=spm_model)
    except (RuntimeError, OSError) as error:
        raise HltmtInputError(f"{spm_model} is not a sentencepiece model ({str(error).strip()[:200]})") from None
    with open(text, encoding="utf-8", errors="replace") as f:
        lines = [line.strip() for line in f if line.strip()][:max_lines]
    if not lines:
        raise HltmtInputError(f"text file {text} holds no text")
    items = [
        dictionary.encode_line(" ".join(pieces), add_if_not_exist=False, append_eos=False).long()
        for pieces in sp.encode(lines, out_type=str)
    ]
    pieces = sum(len(t) for t in items)
    unknown = sum(int(t.eq(dictionary.unk()).sum()) for t in items) / max(1, pieces)
    if unknown > MAX_UNKNOWN:
        raise HltmtInputError(
            f"{100 * unknown:.0f}% of the pieces of {text} are unknown to the model's dictionary "
            f"(more than {100 * MAX_UNKNOWN:.0f}%): {spm_model} is not the sentencepiece model its "
            "data was prepared with, or it does not cover this text's script"
        )
    kept = [t for t in items if 0 < len(t) <= max_positions - 2]  # + eos + the language token
    if not kept:
        raise HltmtInputError(f"no line of {text} fits the encoder ({max_positions} positions)")
    return kept, len(items) - len(kept)


def train(model, lang, dataset, steps, lr=1e-4, max_sentences=64, max_tokens=None, log_interval=50, seed=1, log=print):
    """Adam on ``lang``'s encoder language + invertible adapters for ``steps`` updates of the
    MLM loss (everything else frozen); returns the loss of every step (base 2, per masked token)."""
    import torch

    from hltmt_plugin.adapters.mlm import EncoderMLM, epoch_batches, freeze_all_but_language, mlm_criterion

    trained = freeze_all_but_language(model, lang)
    mlm, criterion = EncoderMLM(model.encoder), mlm_criterion(model.encoder)
    optimizer = torch.optim.Adam(trained.values(), lr=lr)
    device = next(model.parameters()).device
    model.train()
    losses, epoch, t0 = [], 0, time.time()
    while len(losses) < steps:
        epoch += 1
        for sample in epoch_batches(dataset, epoch, seed, max_sentences, max_tokens):
            if len(losses) == steps:
                break
            sample = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in sample.items()}
            sample["net_input"] = {k: v.to(device) for k, v in sample["net_input"].items()}
            loss, sample_size, _ = criterion(mlm, sample)
            optimizer.zero_grad(set_to_none=True)
            (loss / sample_size).backward()
            optimizer.step()
            losses.append(float(loss) / float(sample_size) / math.log(2))
            if len(losses) % log_interval == 0 or len(losses) == steps:
                window = losses[-log_interval:]
                log(
                    f"step {len(losses)}/{steps} | epoch {epoch} | mlm_loss {sum(window) / len(window):.3f} | "
                    f"{time.time() - t0:.1f}s"
                )
    model.eval()
    return losses


def run(args):
    if args.steps < 1 or args.batch_size < 1 or args.log_interval < 1:
        raise HltmtInputError("--steps, --batch-size and --log-interval must be positive")
    if not 0 < args.mask_prob < 1:
        raise HltmtInputError(f"--mask-prob {args.mask_prob} is not a share of the tokens (between 0 and 1)")
    from hltmt_plugin.cli.output import OutputError, refuse_inputs

    try:
        refuse_inputs(
            "--out",
            args.out,
            {"the checkpoint --path": args.path, "the --text file": args.text, "the --spm model": args.spm},
            {"the data folder --data": args.data},
        )
    except OutputError as error:
        raise HltmtInputError(str(error)) from None
    register()  # torch and fairseq, once the arguments are checked (fairseq's start-up noise kept out)
    import torch

    from hltmt_plugin.adapters.files import add_language, export_language
    from hltmt_plugin.adapters.mlm import mlm_dataset

    torch.manual_seed(args.seed)
    model = load_model(args.path, args.data)
    add_language(model, args.lang)  # refuses a language outside --langs; keeps existing adapters
    encoder = model.encoder
    items, skipped = read_sentences(args.text, args.spm, encoder.dictionary, encoder.max_positions(), args.max_lines)
    print(
        f"{args.lang}: {len(items):,} sentences of {args.text}"
        f"{f' ({skipped:,} too long or empty, left out)' if skipped else ''}"
    )
    if not args.cpu and torch.cuda.is_available():
        model.cuda()
    dataset = mlm_dataset(items, model, args.lang, seed=args.seed, mask_prob=args.mask_prob)
    n = sum(p.numel() for p in model.parameters())
    losses = train(
        model, args.lang, dataset, args.steps, args.lr, args.batch_size, args.max_tokens, args.log_interval, args.seed
    )
    k = min(args.log_interval, len(losses))
    print(
        f"mlm_loss (base 2, per masked token): first {k} steps {sum(losses[:k]) / k:.3f}, "
        f"last {k} steps {sum(losses[-k:]) / k:.3f}"
    )
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    blob = export_language(model.cpu(), args.lang, args.out)
    print(
        f"trained {trained:,} of {n:,} parameters; exported {args.lang}: {len(blob['tensors'])} adapter tensors "
        f"to {args.out}"
    )
    return losses


def build_parser():
    """The command line of hltmt-train-language-adapter."""
    from hltmt_plugin.paths import READ_FILE, READ_FOLDER, READ_STREAM, WRITE_FILE, ArgumentParser, path_option

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    path_option(p, "--path", kind=READ_FILE, required=True, help="checkpoint of a translation model with adapters")
    p.add_argument("--lang", required=True, help="the language of --text (one of the model's --langs)")
    path_option(p, "--text", kind=READ_STREAM, required=True, help="plain text of that language, one sentence per line")
    path_option(
        p, "--spm", kind=READ_FILE, required=True, help="the sentencepiece model the model's data was encoded with"
    )
    path_option(p, "--out", kind=WRITE_FILE, required=True, help="the adapter file to write")
    path_option(
        p,
        "--data",
        kind=READ_FOLDER,
        default=None,
        help="binarized data folder (default: the one the checkpoint was trained on)",
    )
    p.add_argument("--steps", type=int, default=1000, help="updates (default 1000)")
    p.add_argument("--lr", type=float, default=1e-4, help="Adam learning rate (MAD-X: 1e-4)")
    p.add_argument("--batch-size", type=int, default=64, help="sentences per batch (MAD-X: 64)")
    p.add_argument("--max-tokens", type=int, default=None, help="also cap the tokens per batch")
    p.add_argument("--mask-prob", type=float, default=0.15, help="share of tokens to predict (BERT: 0.15)")
    p.add_argument("--max-lines", type=int, default=None, help="read at most this many lines of --text")
    p.add_argument("--log-interval", type=int, default=50, help="log the mean MLM loss every this many steps")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cpu", action="store_true", help="train on the CPU even when a GPU is there")
    return add_version(p)


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        run(args)
    except HltmtError as error:
        print(f"hltmt-train-language-adapter: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
