#!/usr/bin/env python3
"""Translate lines in any mix of directions with one loaded HLT-MT checkpoint.

    hltmt-translate --checkpoint ckpt/checkpoint_best.pt --spm runs/data/spm/spm.model < in.tsv > out.txt

Input (a file given with --input, or stdin): one sentence per line, ``SRC<TAB>TGT<TAB>TEXT``
(e.g. ``en<TAB>de<TAB>The file is open.``), or plain text with ``--src`` and ``--tgt``.
Output (stdout or --output): one line per input line, in input order: the translation, or
with ``--json`` an object with the translation, its score (base 2, as fairseq-generate
prints it), pieces and routing (pool module or universal layer, adapters, skills).

Lines are read in chunks of --buffer-size; the directions of a chunk are batched together
and its translations written (and flushed) before the next chunk is read, so the command
streams. A file gets a progress bar on stderr; the rate (sentences/s) is printed at the end.

A line that cannot be translated (unknown language, a direction the model cannot serve,
empty, longer than the model's source positions) is reported on stderr with its line number
and written as an empty line (with --json: an object with "error"); the other lines are
translated. Exit status: 0 all translated, 1 some lines failed, 2 nothing could start (bad
checkpoint, options or files), with one line on stderr.
"""
import argparse
import json
import logging
import os
import sys
import time


PROG = "hltmt-translate"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", "--path", required=True, help="checkpoint of an hltmt_transformer model")
    p.add_argument("--spm", default=None, help="sentencepiece model (default: found beside the data folder "
                                               "(../spm/spm.model), in it, or beside the checkpoint)")
    p.add_argument("--data", default=None, help="binarized data folder with the dict.*.txt (default: the one "
                                                "stored in the checkpoint)")
    p.add_argument("--input", "-i", default="-", help="input file (default: stdin)")
    p.add_argument("--output", "-o", default="-", help="output file (default: stdout)")
    p.add_argument("--src", default=None, help="source language of every line (plain-text input; with --tgt)")
    p.add_argument("--tgt", default=None, help="target language of every line (plain-text input; with --src)")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--lenpen", type=float, default=1.0, help="length penalty")
    p.add_argument("--max-len", type=int, default=200, help="the most tokens of a translation")
    p.add_argument("--max-tokens", type=int, default=4000, help="source tokens per batch")
    p.add_argument("--batch-size", type=int, default=None, help="sentences per batch (default: no limit)")
    p.add_argument("--buffer-size", type=int, default=None,
                   help="lines read and batched together before their translations are written (default: 1024, "
                        "1 when stdin is a terminal)")
    p.add_argument("--json", action="store_true", help="one JSON object per line: translation, score, routing")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    p.add_argument("--fp16", action="store_true", help="half precision (GPU)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--verbose", action="store_true", help="fairseq's log messages on stderr")
    args = p.parse_args(argv)
    if (args.src is None) != (args.tgt is None):
        p.error("give both --src and --tgt (plain-text input), or neither (SRC<TAB>TGT<TAB>TEXT lines)")
    for name in ("beam", "max_len", "max_tokens"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.buffer_size is not None and args.buffer_size < 1:
        p.error("--buffer-size must be at least 1")
    return args


def fail(message, status=2):
    sys.stderr.write(f"{PROG}: error: {message}\n")
    return status


def split_line(text, args):
    """(src, tgt, text) of one input line; a malformed line gives a tuple the API refuses."""
    if args.src is not None:
        return args.src, args.tgt, text
    parts = text.split("\t", 2)
    if len(parts) != 3:
        return ("?", "?", None)
    return parts[0].strip(), parts[1].strip(), parts[2]


def chunks(stream, size):
    chunk = []
    for line in stream:
        chunk.append(line.rstrip("\r\n"))
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def main(argv=None):
    args = parse_args(argv)
    if not args.verbose:
        logging.disable(logging.WARNING)  # fairseq's INFO/WARNING lines; errors still end in one line
    try:
        from hltmt_plugin.errors import HltmtError
        from hltmt_plugin.hub import HltmtTranslator
    except ImportError as error:
        return fail(f"cannot import the plugin ({error}): run from the repository's .venv")

    if args.input != "-" and not os.path.isfile(args.input):
        return fail(f"input file {args.input} does not exist")
    try:
        translator = HltmtTranslator.load(args.checkpoint, spm=args.spm, data=args.data, device=args.device,
                                          fp16=args.fp16, max_tokens=args.max_tokens, max_sentences=args.batch_size)
    except HltmtError as error:
        return fail(error)
    except Exception as error:  # noqa: BLE001 (whatever fairseq raises on a file it cannot use: one line)
        return fail(f"cannot load {args.checkpoint}: {type(error).__name__}: {str(error).strip()[:300]}")
    if args.src is not None:
        try:
            translator.routing(args.src, args.tgt)
        except HltmtError as error:
            return fail(error)

    source = sys.stdin if args.input == "-" else open(args.input, encoding="utf-8", errors="replace")
    sink = sys.stdout if args.output == "-" else open(args.output, "w", encoding="utf-8")
    size = args.buffer_size or (1 if args.input == "-" and sys.stdin.isatty() else 1024)
    bar = None
    if args.input != "-" and not args.no_progress:
        from tqdm import tqdm

        with open(args.input, encoding="utf-8", errors="replace") as f:
            total = sum(1 for _ in f)
        bar = tqdm(total=total, unit="sent", file=sys.stderr, dynamic_ncols=True, desc=PROG)

    done = failed = 0
    start = time.perf_counter()
    try:
        for chunk in chunks(source, size):
            items = [split_line(text, args) for text in chunk]
            results = translator.translate_batch(
                items, beam=args.beam, lenpen=args.lenpen, max_len=args.max_len, details=True, errors="keep",
                first_line=done + 1, progress=bar.update if bar is not None else None)
            for text, item, result in zip(chunk, items, results):
                if item[2] is None:
                    result.error = "expected SRC<TAB>TGT<TAB>TEXT (or give --src and --tgt for plain text)"
                    result.src = result.tgt = ""
                    result.source = text
                if result.error is not None:
                    failed += 1
                    message = f"{PROG}: line {result.line}: {result.error}\n"
                    if bar is not None:
                        bar.write(message.rstrip("\n"), file=sys.stderr)
                    else:
                        sys.stderr.write(message)
                if args.json:
                    record = result.to_dict()
                    record["translation"] = record.pop("text")
                    sink.write(json.dumps(record, ensure_ascii=False) + "\n")
                else:
                    sink.write((result.text or "") + "\n")
            sink.flush()
            done += len(chunk)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return fail(f"interrupted after {done} line(s)", 130)
    except HltmtError as error:
        return fail(error)
    finally:
        if bar is not None:
            bar.close()
        if sink is not sys.stdout:
            sink.close()
    seconds = time.perf_counter() - start
    rate = (done - failed) / seconds if seconds > 0 else 0.0
    sys.stderr.write(f"{PROG}: {done - failed} of {done} sentence(s) translated in {seconds:.1f} s: "
                     f"{rate:.1f} sentences/s\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
