#!/usr/bin/env python3
r"""Translate lines in any mix of directions with one loaded multilingual checkpoint (HLT-MT, or any
fairseq translation_multi_simple_epoch model).

    hltmt-translate --checkpoint ckpt/checkpoint_best.pt --spm runs/data/spm/spm.model < in.tsv > out.txt

Input (a file given with --input, or stdin): one sentence per line, ``SRC<TAB>TGT<TAB>TEXT``
(e.g. ``en<TAB>de<TAB>The file is open.``), or plain text with ``--src`` and ``--tgt``.
Output (stdout or --output): one line per input line, in input order: the translation, or
with ``--json`` an object with the translation, its score (base 2, as fairseq-generate
prints it), pieces and routing (pool module or universal layer, adapters, skills). With
``--nbest N`` (N above 1): N lines per input line, its N best translations best first, or with
``--json`` one object whose "hypotheses" hold them (translation, score, tokens).
``--format fairseq`` writes each hypothesis as fairseq-generate does, ``H-<id><TAB><score><TAB>
<translation>``, and a line not translated as ``E-<id><TAB><why>`` (as many times as --nbest),
so that a refused line stands apart from an empty translation; ``--format moses`` writes
Moses' n-best form, ``<id> ||| <translation> ||| Log2Prob0= <score> ||| <score>``, and nothing
for a line not translated (Moses' lists are grouped by id). ``<id>``: the input line's number
counted from 0, as both count sentences. Every score is a log-probability in base 2, as
fairseq-generate prints it (natural log: multiply by ln 2 = 0.693).

Search: fairseq-generate's options, the same on every engine: --beam, --lenpen, --max-len,
--nbest, --no-repeat-ngram-size, --min-len; --sampling draws --beam samples instead of a beam search, from
the --sampling-topk most likely tokens or the fewest whose probability reaches --sampling-topp
(neither: the whole vocabulary), at --temperature; --seed makes them the same every run.

Lines are read in chunks of --buffer-size; the directions of a chunk are batched together
and its translations written (and flushed) before the next chunk is read, so the command
streams. A file gets a progress bar on stderr; the rate (sentences/s, and output tokens/s: the
translations' tokens, end of sentence included) is printed at the end.

Lines: a line ends at ``\n``, ``\r\n`` or a lone ``\r`` (files of every platform; the output
always ends its lines with ``\n``); no other character ends a line (U+2028 and U+2029 stay
inside theirs; a line holding a control character other than TAB, such as ``\x0b``, ``\x0c``
or ``\x85``, is not translated; a translation holding a character some reader takes for a line
end gets a space there, and with --json it is escaped). A UTF-8 byte order mark at the start of
the input is dropped; a UTF-16 or UTF-32 one is refused (convert the file to UTF-8). The
output has exactly one line per input line (--nbest N: N lines; --format moses: one per hypothesis), in
order. Lines are read in bounded pieces: a line
longer than 1 MiB, or more than 100 million lines, stops the command with one line naming the
input and the line (standard input from ``/dev/zero`` too, before memory grows).

Directions: a line in a direction the model was trained on (its --lang-pairs) is translated;
one into a language the model never produced (or from one it never read as a source) is
refused; one from a source of some trained direction into a target of some trained direction
is zero-shot: translated only with --zero-shot, and marked ``"zero_shot": true`` with --json.

A line that cannot be translated (unknown language, a direction the model cannot serve or
refuses, a zero-shot direction without --zero-shot, empty, longer than the model's source
positions, not text by the rule every reader of the plugin keeps: not valid UTF-8, holding a
NUL or another control character but TAB) is reported on stderr with its line number
and written as an empty line (with --json: an object with "error"); the other lines are
translated. Exit status: 0 all translated, 1 some lines failed, 2 nothing could start (bad
checkpoint, options or files), with one line on stderr.

--output is written to a temporary file beside it and renamed over it only when every line
is written: a failure or an interrupt leaves the old file as it was. An --output that is one
of the files the command reads (--input, the checkpoint, the sentencepiece model, a file of the
data folder) is refused.
"""

import argparse
import json
import logging
import math
import os
import sys
import time

from hltmt_plugin import text as text_rule
from hltmt_plugin.cli import add_version
from hltmt_plugin.cli.export import add_engine_options, engine_load_options, served_folder
from hltmt_plugin.cli.output import AtomicOutput, OutputError, refuse_inputs, stream_problem
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.hub import arguments, decoding
from hltmt_plugin.paths import (
    READ_FILE,
    READ_FOLDER,
    READ_PATH,
    READ_STREAM,
    WRITE_STREAM,
    ArgumentParser as PathsParser,
    path_option,
)

PROG = "hltmt-translate"


class Parser(PathsParser):
    """argparse, with a wrong option reported in one line."""

    def error(self, message):
        self.exit(2, f"{PROG}: error: {message} (see --help)\n")


def build_parser():
    """The command line of hltmt-translate."""
    p = Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    path_option(
        p,
        "--checkpoint",
        "--path",
        kind=READ_PATH,
        required=True,
        help="checkpoint of --task hltmt_translation or translation_multi_simple_epoch "
        "(any of their models, fairseq's transformer included)",
    )
    path_option(
        p,
        "--spm",
        kind=READ_FILE,
        default=None,
        help="sentencepiece model (default: found beside the data folder "
        "(../spm/spm.model), in it, or beside the checkpoint)",
    )
    path_option(
        p,
        "--data",
        kind=READ_FOLDER,
        default=None,
        help="binarized data folder with the dict.*.txt (default: the one "
        "stored in the checkpoint, or the checkpoint's own folder when "
        "that one is gone and the dictionaries lie beside the checkpoint)",
    )
    path_option(p, "--input", "-i", kind=READ_STREAM, default="-", help="input file (default: stdin)")
    path_option(p, "--output", "-o", kind=WRITE_STREAM, default="-", help="output file (default: stdout)")
    p.add_argument("--src", default=None, help="source language of every line (plain-text input; with --tgt)")
    p.add_argument("--tgt", default=None, help="target language of every line (plain-text input; with --src)")
    decoding.add_arguments(p)  # the search options, declared once (hltmt_plugin.hub.decoding)
    p.add_argument("--max-tokens", type=int, default=4000, help="source tokens per batch")
    p.add_argument("--batch-size", type=int, default=None, help="sentences per batch (default: no limit)")
    p.add_argument(
        "--buffer-size",
        type=int,
        default=None,
        help="lines read and batched together before their translations are written (default: 1024, "
        "1 when stdin is a terminal)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per line: translation, score, routing")
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="plain output: the translations (text), fairseq-generate's H-<id> lines with scores and E-<id> for a "
        "line not translated (fairseq), or Moses' n-best lines (moses)",
    )
    p.add_argument(
        "--zero-shot",
        action="store_true",
        help="also translate directions the model was not trained on from a source of some trained direction "
        'into a target of some trained direction (marked "zero_shot": true with --json); without it such lines fail',
    )
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    p.add_argument("--fp16", action="store_true", help="half precision (GPU)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--verbose", action="store_true", help="fairseq's log messages on stderr")
    add_engine_options(p)  # an exported model (hltmt-export): --engine, --compute-type, --threads
    return add_version(p)


def check_args(p, args):
    """Options that cannot work together or cannot work at all: ``p.error`` (one line, exit 2)."""
    if (args.src is None) != (args.tgt is None):
        p.error("give both --src and --tgt (plain-text input), or neither (SRC<TAB>TGT<TAB>TEXT lines)")
    if args.max_tokens < 1:
        p.error("--max-tokens must be at least 1")
    if args.buffer_size is not None and args.buffer_size < 1:
        p.error("--buffer-size must be at least 1")
    if args.json and args.format != "text":
        p.error(f"--format {args.format} is a plain-text form: leave out --json, whose objects hold the scores")
    try:
        arguments.search(**decoding.of_args(args))
    except HltmtConfigError as error:  # the Python API's bound, each argument named as its option
        p.error(decoding.as_flags(str(error)))


def parse_args(argv=None):
    """The options of ``argv`` (default: the command line), checked."""
    p = build_parser()
    args = p.parse_args(argv)
    check_args(p, args)
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


CHUNK_BYTES = 64 << 20  # a chunk is cut at this many bytes of input too, whatever --buffer-size says


def input_name(args):
    """The input as a message names it."""
    return "standard input" if args.input == "-" else f"--input {args.input}"


def chunks(stream, name, size):
    """The input's lines as ``(text, None)`` or ``(None, why it is not translated)``, in chunks of
    ``size`` lines (fewer when they reach :data:`CHUNK_BYTES`), read by the one reader of lines
    (:func:`hltmt_plugin.text.raw_lines`: bounded, a lone ``\r`` a line end too) and judged by
    the one text rule (:func:`hltmt_plugin.text.decode`)."""
    chunk, held = [], 0
    for _, raw in text_rule.raw_lines(stream, name, split_cr=True):
        line, why = text_rule.decode(raw)
        chunk.append((line, None if why is None else f"{why}: not translated"))
        held += len(raw)
        if len(chunk) >= size or held >= CHUNK_BYTES:
            yield chunk
            chunk, held = [], 0
    if chunk:
        yield chunk


LINE_BREAKS = "\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # what some reader takes for a line end
ONE_LINE = str.maketrans({c: " " for c in LINE_BREAKS})
JSON_ESCAPES = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}  # json.dumps escapes the rest


FORMATS = ("text", "fairseq", "moses")


def _scored(result):
    """``[(text, score)]``: the result's hypotheses, best first ([] for a line not translated)."""
    if result.error is not None or result.text is None:
        return []
    if result.hypotheses:
        return [(h.text, h.score) for h in result.hypotheses]
    return [(result.text, result.score)]


def plain_lines(result, nbest=1, form="text"):
    """The plain output of one result (``form``: :data:`FORMATS`), each line with its ``\\n``:
    ``nbest`` lines (moses: one per hypothesis, none for a line not translated)."""
    one = lambda text: (text or "").translate(ONE_LINE)  # noqa: E731
    scored = [(text, "nan" if score is None else f"{score:.4f}") for text, score in _scored(result)]
    line_id = (result.line or 1) - 1
    if form == "fairseq":
        if not scored:
            return f"E-{line_id}\t{one(result.error or 'not translated')}\n" * nbest
        return "".join(f"H-{line_id}\t{score}\t{one(text)}\n" for text, score in scored)
    if form == "moses":
        return "".join(f"{line_id} ||| {one(text)} ||| Log2Prob0= {score} ||| {score}\n" for text, score in scored)
    texts = [text for text, _ in scored] or [result.text]
    texts += [""] * (nbest - len(texts))
    return "".join(one(text) + "\n" for text in texts)


def _finite(value):
    """``value`` with every float that is not finite (NaN, an infinity: no JSON number) as None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def output_line(result, as_json, nbest=1, form="text"):
    """One output line (with its \\n) that no reader splits in two; without ``as_json``, the
    plain lines of ``form`` (:func:`plain_lines`)."""
    if not as_json:
        return plain_lines(result, nbest, form)
    record = result.to_dict()
    record["translation"] = record.pop("text")
    for hypothesis in record.get("hypotheses") or ():
        hypothesis["translation"] = hypothesis.pop("text")
    line = json.dumps(_finite(record), ensure_ascii=False, allow_nan=False)  # every number valid JSON
    for char, escaped in JSON_ESCAPES.items():
        line = line.replace(char, escaped)
    return line + "\n"


def same_as_stdin(path):
    """Whether ``path`` is the file on stdin (``hltmt-translate -o F < F``)."""
    try:
        here, there = os.fstat(sys.stdin.fileno()), os.stat(path)
    except (OSError, ValueError, AttributeError):
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino) and os.path.isfile(path)


def main(argv=None):
    args = parse_args(argv)
    if not args.verbose:
        logging.disable(logging.WARNING)  # fairseq's INFO/WARNING lines; errors still end in one line
    try:
        from hltmt_plugin.errors import HltmtError
        from hltmt_plugin.hub import HltmtTranslator
    except ImportError as error:
        return fail(f"cannot import the plugin ({error}): run from the repository's .venv")

    if stream_problem(args.input) is not None:  # a regular file or a pipe (<(cmd)) is read
        return fail(stream_problem(args.input))
    sink = None
    try:
        sink = open_output(args)
        status = translate_all(args, sink, HltmtTranslator, HltmtError)
    except OutputError as error:
        status = fail(error)
    finally:
        if sink is not None:
            sink.discard()  # unless committed: the old file stays as it was
    return status


def open_output(args):
    """The :class:`AtomicOutput` of --output (None for stdout), created now so that an
    unwritable place fails before loading; an --output that is an input raises OutputError."""
    if args.output == "-":
        return None
    refuse_inputs(
        "--output",
        args.output,
        {
            "the --input file": None if args.input == "-" else args.input,
            "the checkpoint": args.checkpoint,
            "the --spm model": args.spm,
        },
    )
    if args.input == "-" and same_as_stdin(args.output):
        raise OutputError(
            f"--output {args.output} is the file on stdin: writing there would replace it; name another file"
        )
    return AtomicOutput(args.output, "--output")


class LoadError(HltmtInputError):
    """A checkpoint the command cannot load (one line, exit 2)."""


def load_translator(args, sink, HltmtTranslator, HltmtError):
    """The translator of --checkpoint; --output checked against the files it reads, --src and
    --tgt against the model. Raises LoadError, HltmtError or OutputError."""
    try:
        checkpoint, spm, data, engine = engine_load_options(args)
        translator = HltmtTranslator.load(
            checkpoint,
            spm=spm,
            data=data,
            device=args.device,
            fp16=args.fp16,
            max_tokens=args.max_tokens,
            max_sentences=args.batch_size,
            **engine,
        )
    except HltmtError:
        raise
    except Exception as error:  # noqa: BLE001 (whatever fairseq raises on a file it cannot use: one line)
        raise LoadError(f"cannot load {args.checkpoint}: {type(error).__name__}: {str(error).strip()[:300]}") from None
    if sink is not None:
        refuse_inputs(
            "--output",
            args.output,
            {"the sentencepiece model": translator.spm},
            {"the data folder": served_folder(translator)},
        )
    if args.src is not None:
        translator.routing(args.src, args.tgt)
    return translator


def translate_all(args, sink, HltmtTranslator, HltmtError):
    """Load the checkpoint and write the translation of every input line to ``sink`` (stdout when
    None), chunk by chunk; the exit status."""
    try:
        translator = load_translator(args, sink, HltmtTranslator, HltmtError)
    except OutputError:
        raise  # main's handler, as for an --output refused before loading
    except (LoadError, HltmtError) as error:
        return fail(error)
    out = sink.file if sink is not None else sys.stdout
    if sink is None and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(encoding="utf-8", newline="\n")
    size = args.buffer_size or (1 if args.input == "-" and sys.stdin.isatty() else 1024)
    try:
        source = sys.stdin.buffer if args.input == "-" else open(args.input, "rb")
    except OSError as error:
        return fail(f"cannot read --input {args.input}: {error.strerror or error}")
    bar = None
    done = failed = tokens = 0
    start = time.perf_counter()
    try:
        bar = progress_bar(args)
        for chunk in chunks(source, input_name(args), size):
            chunk_failed, chunk_tokens = translate_chunk(translator, chunk, args, done + 1, out, bar)
            failed, tokens, done = failed + chunk_failed, tokens + chunk_tokens, done + len(chunk)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return fail(
            f"interrupted after {done} line(s)" + (f"; --output {args.output} left as it was" if sink else ""), 130
        )
    except OutputError:
        raise  # main's handler, once the input is closed
    except HltmtError as error:  # an input that cannot be read as lines of text: one line, exit 2
        return fail(error)
    finally:
        if bar is not None:
            bar.close()
        if source is not sys.stdin.buffer:
            source.close()
    if sink is not None:
        sink.commit()  # every line written: the output replaces the old file now
    return summary(done, failed, time.perf_counter() - start, tokens)


def progress_bar(args):
    """A progress bar on stderr over the lines of the --input file (None for stdin or with
    --no-progress)."""
    if args.input == "-" or args.no_progress or not os.path.isfile(args.input):  # a pipe is read once
        return None
    from tqdm import tqdm

    with open(args.input, "rb") as f:
        total = sum(1 for _ in text_rule.raw_lines(f, input_name(args), split_cr=True))
    return tqdm(total=total, unit="sent", file=sys.stderr, dynamic_ncols=True, desc=PROG)


def translate_chunk(translator, chunk, args, first_line, out, bar):
    """Translate one chunk of ``(text, why unreadable)`` lines, numbered from ``first_line``;
    write an output line for each (flushed) and each failure on stderr. Returns the number
    of lines that failed and the tokens of the translations written."""
    items = [split_line(text, args) if text is not None else ("?", "?", None) for text, _ in chunk]
    results = translator.translate_batch(
        items,
        **decoding.of_args(args),
        details=True,
        errors="keep",
        first_line=first_line,
        progress=bar.update if bar is not None else None,
        zero_shot=args.zero_shot,
    )
    failed = tokens = 0
    for (text, unreadable), item, result in zip(chunk, items, results):
        if unreadable is not None:
            result.error, result.src, result.tgt, result.source = unreadable, "", "", ""
        elif item[2] is None:
            result.error = "expected SRC<TAB>TGT<TAB>TEXT (or give --src and --tgt for plain text)"
            result.src = result.tgt = ""
            result.source = text
        if result.error is not None:
            failed += 1
            message = f"{PROG}: line {result.line}: {result.error}"
            if bar is not None:
                bar.write(message, file=sys.stderr)
            else:
                sys.stderr.write(message + "\n")
        out.write(output_line(result, args.json, args.nbest, args.format))
        if result.error is None:
            tokens += result.tokens or 0
    out.flush()
    return failed, tokens


def summary(done, failed, seconds, tokens=0):
    """The closing line on stderr (translated lines, their rate and the rate of the translations'
    tokens); the exit status."""
    rate = (done - failed) / seconds if seconds > 0 else 0.0
    token_rate = tokens / seconds if seconds > 0 else 0.0
    sys.stderr.write(
        f"{PROG}: {done - failed} of {done} sentence(s) translated in {seconds:.1f} s: {rate:.1f} sentences/s, "
        f"{token_rate:.1f} output tokens/s\n"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
