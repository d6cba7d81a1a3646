#!/usr/bin/env python3
"""Prepare English-centric parallel text for ``hltmt_translation``.

Reads ``{train,valid,test}.en-XX.{en,XX}`` from a raw folder (DebMT-10 by default, the
WMT-10 recipe writes the same layout), checks it, trains one joint sentencepiece model,
encodes every split and binarizes it with fairseq's preprocessing (in this process, one pair
after another) into one folder with a
shared dictionary (``dict.{lang}.txt`` for every language), ready for
``--task hltmt_translation --langs en,XX,...``.

    hltmt-prepare-data --out runs/data --langs de,fr,gu --max-train 2000
    hltmt-prepare-data --out runs/short --segment-words 12,16   # only short segments, in every split

With ``--spm-model M --dict D`` (e.g. XLM-R's ``sentencepiece.bpe.model`` and ``dict.txt``)
no sentencepiece model is trained: every split is encoded with M and binarized with the
fixed dictionary D, so token ids are those of the pretrained model (the task appends the
language tokens ``__xx__`` to the dictionary when it loads it). The binarized folder records a
fingerprint of its dictionaries (``bin/dict_fingerprint.json``, sha256 of every
``dict.*.txt``), so a dictionary changed after binarization can be refused.

``spm/`` and ``bin/`` are written whole (both complete, or the earlier ones left as they were)
and replace only what an earlier run wrote there (``.hltmt-output.json`` lists it): a folder of
yours in their place, or a file you added to them, is refused and kept. Raw lines are counted as
``wc -l`` counts them: a carriage return inside a line is a space there, not a line end. Every
raw line keeps the text rule of every reader of the plugin (valid UTF-8, no NUL or other control
character but TAB, at most 1 MiB): the first that does not is refused with its file and line.
A raw file that is not a regular file (a FIFO, a device, a folder) is refused as what it is.
"""

import argparse
import errno
import os
import random
import re
import shutil
import sys
import time

from hltmt_plugin import text
from hltmt_plugin.atomic_files import check_folder_output, inside, write_folder
from hltmt_plugin.cli import DEBMT10, add_version, register
from hltmt_plugin.corpora import WMT10_LANGS
from hltmt_plugin.data_fingerprint import write_fingerprint
from hltmt_plugin.errors import HltmtError, HltmtInputError

SPLITS = ["train", "valid", "test"]


class DataError(HltmtInputError):
    """Data, a dictionary or an option of hltmt-prepare-data that cannot be used: one line, exit 2."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as written, and every option's default in --help."""


def check_options(args):
    """Numbers that cannot work, before any data is read."""
    from hltmt_plugin.hub.arguments import threads

    for name, value in (("--workers", args.workers), ("--threads", args.threads)):
        threads(value, name)  # processes and threads: the bound of every engine's threads
    for name, value, low in (
        ("--vocab-size", args.vocab_size, 1),
        ("--max-train", args.max_train, 1),
        ("--max-valid", args.max_valid, 1),
        ("--max-test", args.max_test, 1),
        ("--max-words", args.max_words, 1),
        ("--max-eval-pieces", args.max_eval_pieces, 1),
    ):
        if value is not None and value < low:
            raise DataError(f"{name} must be at least {low}, got {value}")
    parse_segment_words(args.segment_words)
    if args.dict and not args.spm_model:
        raise DataError("--dict needs --spm-model: the sentencepiece model the dictionary was made for")
    dict_langs(args)
    for option, path in (("--spm-model", args.spm_model), ("--dict", args.dict)):
        if path and not os.path.isfile(path):
            raise DataError(f"{option} {path} does not exist")


def dict_langs(args):
    """--dict-langs: the languages given a copy of --dict beside the prepared ones, each a name
    fairseq's multilingual task can read from a file name (letters, digits, ``_`` and ``-``),
    none twice; it needs --dict (a dictionary made from the data serves only the data's
    languages)."""
    names = [name.strip() for name in args.dict_langs.split(",") if name.strip()]
    if names and not args.dict:
        raise DataError("--dict-langs needs --dict: the pretrained model's dictionary the languages share")
    bad = [name for name in names if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name)]
    if bad:
        raise DataError(f"--dict-langs: {bad[0]!r} is not a language name (letters, digits, _ and -)")
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise DataError(f"--dict-langs names {','.join(twice)} twice: name each language once")
    return names


def check_writable(out):
    """Prove the output folder writable before hours of work go into it, creating nothing: a
    file is made and removed in ``out``, or in its nearest folder that exists (the writer makes
    ``out`` only when it writes the output, once every input is checked)."""
    above = os.path.abspath(out)
    while not os.path.lexists(above):
        above = os.path.dirname(above)
    try:
        if not os.path.isdir(above):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        probe = os.path.join(above, f".write-test-{os.getpid()}")
        with open(probe, "x") as f:
            f.write("ok\n")
        os.remove(probe)
    except OSError as error:
        raise DataError(f"cannot write to --out {out}: {error.strerror or error}") from None


def read_fairseq_dict(path):
    """The symbols of a fairseq dictionary file (``SYMBOL COUNT`` per line, as fairseq reads
    it); a malformed file is a DataError naming the line."""
    symbols, seen = [], set()
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.rstrip("\n")
                if not line.strip():
                    continue
                overwrite = line.endswith(" #fairseq:overwrite")
                if overwrite:
                    line = line[: -len(" #fairseq:overwrite")]
                symbol, _, count = line.rpartition(" ")
                if not symbol or not count.lstrip("-").isdigit():
                    raise DataError(f"--dict {path} line {n} is not 'SYMBOL COUNT' (a fairseq dictionary)")
                if symbol in seen and not overwrite:
                    raise DataError(f"--dict {path} line {n} repeats the symbol {symbol!r}")
                seen.add(symbol)
                symbols.append(symbol)
    except UnicodeDecodeError as error:
        raise DataError(f"--dict {path} is not valid UTF-8: {error}") from None
    if not symbols:
        raise DataError(f"--dict {path} is empty")
    return symbols


def log(msg):
    print(f"[prepare_data] {msg}", flush=True)


def read_lines(path, limit=None):
    """The lines of a raw text file as ``wc -l`` counts them, read by the one reader of sentences
    (:func:`hltmt_plugin.text.read_lines`: bounded, a line ends at ``\n``, the ``\r`` of ``\r\n``
    dropped, the one text rule with the file and line); a carriage return inside a line is
    whitespace there (a space), never a line end, so that both sides of a pair keep their line
    numbers (logged with a count)."""
    inner = 0

    def inner_cr(raw):
        nonlocal inner
        if b"\r" in raw:
            inner += 1
            raw = raw.replace(b"\r", b" ")
        return raw

    lines = text.read_lines(path, limit, prepare=inner_cr)
    if inner:
        log(f"{path}: {inner} line(s) hold a carriage return inside the line: read as a space")
    return lines


def short_pair(en: str, xx: str, max_en: int, max_xx: int) -> bool:
    """Whether a segment pair is short: its English has 1 to ``max_en`` words and its other
    side 1 to ``max_xx`` (``--segment-words``; the quality study's selection)."""
    return 0 < len(en.split()) <= max_en and 0 < len(xx.split()) <= max_xx


def parse_segment_words(text):
    """``--segment-words EN,XX`` -> (EN, XX), or None when not given."""
    if not text:
        return None
    en, _, xx = text.partition(",")
    if not (en.isdigit() and xx.isdigit() and int(en) > 0 and int(xx) > 0):
        raise DataError(f"--segment-words {text!r}: expected EN,XX, two word counts of at least 1 (e.g. 12,16)")
    return int(en), int(xx)


def load_pair(raw, split, lang, limit, segment_words=None):
    """Both sides of en-XX for a split (with ``segment_words``, its short pairs only); every
    problem is a DataError naming the file."""
    paths = [os.path.join(raw, f"{split}.en-{lang}.{side}") for side in ("en", lang)]
    for path in paths:  # missing, or a FIFO, a device, a folder: said as what it is
        text.check_regular_file(path, f" (language {lang!r}, split {split})")
    en, xx = (read_lines(p) for p in paths)
    if len(en) != len(xx):
        raise DataError(f"{paths[0]} has {len(en)} lines but {paths[1]} has {len(xx)}: the sides are misaligned")
    if not en:
        raise DataError(f"split {split} of en-{lang} is empty ({paths[0]})")
    if segment_words:
        kept = [(e, x) for e, x in zip(en, xx) if short_pair(e, x, *segment_words)]
        if not kept:
            raise DataError(
                f"split {split} of en-{lang} has no segment pair of at most {segment_words[0]} English "
                f"and {segment_words[1]} {lang} words (--segment-words)"
            )
        en, xx = [e for e, _ in kept], [x for _, x in kept]
    en, xx = en[:limit], xx[:limit]
    if split != "train":  # evaluation sets must stay whole: refuse what cannot be translated
        for path, lines in zip(paths, (en, xx)):
            empty = next((i for i, line in enumerate(lines, 1) if not line.strip()), None)
            if empty:
                raise DataError(f"{path} line {empty} is empty (an evaluation set needs text on every line)")
    return en, xx


def drop_unusable(en, xx, max_words):
    """Training pairs with an empty side or a side over max_words words are dropped."""
    keep = [
        (e, x)
        for e, x in zip(en, xx)
        if e.strip() and x.strip() and len(e.split()) <= max_words and len(x.split()) <= max_words
    ]
    return [e for e, _ in keep], [x for _, x in keep], len(en) - len(keep)


def nproc():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def train_spm(texts, prefix, vocab_size, seed, threads=2):
    import sentencepiece as spm

    random.Random(seed).shuffle(texts)
    chars = {c for t in texts for c in t if not c.isspace()}
    if vocab_size <= len(chars) + 1:  # one piece per character, the word-boundary piece and <unk>
        raise DataError(
            f"--vocab-size {vocab_size} is too small for this text: it has {len(chars)} distinct "
            f"characters and sentencepiece needs a piece for each; use --vocab-size "
            f"{max(len(chars) + 2, 100)} or more"
        )
    with open(prefix + ".input.txt", "w", encoding="utf-8") as f:
        f.writelines(t + "\n" for t in texts if t.strip())
    try:
        spm.SentencePieceTrainer.train(
            input=prefix + ".input.txt",
            model_prefix=prefix,
            vocab_size=vocab_size,
            character_coverage=1.0,
            model_type="unigram",
            input_sentence_size=2_000_000,
            shuffle_input_sentence=True,
            bos_id=-1,
            eos_id=-1,
            pad_id=-1,
            unk_id=0,
            hard_vocab_limit=False,
            num_threads=threads,
            minloglevel=2,
            seed_sentencepiece_size=200_000,
        )
    except RuntimeError as error:  # sentencepiece's own checks: one line, the first of its message
        raise DataError(
            f"sentencepiece could not train a {vocab_size}-piece model on this text: "
            f"{str(error).strip().splitlines()[0]}"
        ) from None
    finally:
        os.remove(prefix + ".input.txt")
    return spm.SentencePieceProcessor(model_file=prefix + ".model")


def write_dict(sp, path):
    """A fairseq dictionary of every sentencepiece piece (fixed order, no pruning)."""
    with open(path, "w", encoding="utf-8") as f:
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            if piece in ("<unk>", "<s>", "</s>", "<pad>"):
                continue
            f.write(f"{piece} 1\n")


def binarize(spm_dir, bin_dir, lang, workers):
    """Binarize the encoded splits of en-``lang`` into ``bin_dir`` with fairseq's preprocessing
    (``fairseq_cli.preprocess.main``, as ``fairseq-preprocess`` runs it) in this process: a
    process per pair cost ~5 s of start-up each, which grew to most of the preparation at 100+
    languages (docs/benchmarks.md, "Scale in languages")."""
    import fairseq_cli.preprocess as preprocess
    from fairseq import options

    dictionary = os.path.join(spm_dir, "dict.txt")
    args = options.get_preprocessing_parser().parse_args(
        [
            "--source-lang",
            "en",
            "--target-lang",
            lang,
            "--destdir",
            bin_dir,
            *(x for split in SPLITS for x in (f"--{split}pref", os.path.join(spm_dir, f"{split}.en-{lang}"))),
            "--srcdict",
            dictionary,
            "--tgtdict",
            dictionary,
            "--workers",
            str(workers),
        ]
    )
    before = list(preprocess.logger.handlers)
    propagate, preprocess.logger.propagate = preprocess.logger.propagate, False  # its log goes to its file only
    try:
        preprocess.main(args)
    except (Exception, SystemExit) as error:  # one line, not fairseq's traceback
        raise DataError(f"fairseq-preprocess failed for en-{lang}: {error!r}") from None
    finally:
        preprocess.logger.propagate = propagate
        for handler in preprocess.logger.handlers[len(before) :]:  # main() adds a file handler per call
            preprocess.logger.removeHandler(handler)
            handler.close()


def build_parser():
    """The command line of hltmt-prepare-data."""
    from hltmt_plugin.hub.arguments import count_option
    from hltmt_plugin.paths import READ_FILE, READ_FOLDER, WORK_FOLDER, ArgumentParser, path_option

    p = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    path_option(
        p,
        "--raw",
        kind=READ_FOLDER,
        default=DEBMT10,
        help="folder of {split}.en-XX.{en,XX} files (DebMT-10 by default)",
    )
    path_option(p, "--out", kind=WORK_FOLDER, required=True, help="output folder (spm/ and bin/ inside)")
    p.add_argument("--langs", default=",".join(WMT10_LANGS), help="non-English languages, comma-separated")
    p.add_argument(
        "--segment-words",
        default=None,
        metavar="EN,XX",
        help="keep only the segment pairs whose English has at most EN words and whose other side at "
        "most XX, in every split (train, valid and test), before the --max-* limits: the short "
        "segments a small model learns first",
    )
    p.add_argument("--max-train", type=int, default=None, help="first N training lines per pair")
    p.add_argument(
        "--max-train-lang",
        default="",
        metavar="XX=N,...",
        help="per-language override of --max-train, e.g. gu=500,hi=800",
    )
    p.add_argument("--max-valid", type=int, default=None, help="first N valid lines per pair")
    p.add_argument("--max-test", type=int, default=None, help="first N test lines per pair")
    p.add_argument("--vocab-size", type=int, default=8000, help="joint sentencepiece vocabulary")
    path_option(
        p,
        "--spm-model",
        kind=READ_FILE,
        default=None,
        help="reuse this sentencepiece model instead of training one (e.g. XLM-R's sentencepiece.bpe.model)",
    )
    path_option(
        p,
        "--dict",
        kind=READ_FILE,
        default=None,
        help="with --spm-model: binarize with this fixed fairseq dictionary "
        "(e.g. XLM-R's dict.txt) instead of one made from the model's pieces",
    )
    p.add_argument(
        "--dict-langs",
        default="",
        metavar="LANGS",
        help="with --dict: write the same dictionary as dict.LANG.txt for each of these languages too (a pretrained "
        "model's whole language list, e.g. an hltmt-import folder's langs.txt), so that fine-tuning from "
        "it finds every dictionary its checkpoint records",
    )
    p.add_argument(
        "--max-words", type=int, default=250, help="training pairs with a side longer than this (or empty) are dropped"
    )
    p.add_argument(
        "--max-eval-pieces",
        type=int,
        default=1000,
        help="a valid/test line longer than this many pieces is an error (the models take 1024)",
    )
    p.add_argument("--seed", type=int, default=1, help="seed of the sentencepiece input shuffle")
    p.add_argument(
        "--workers",
        type=count_option,
        default=nproc(),
        help="processes of fairseq-preprocess (one per core by default)",
    )
    p.add_argument(
        "--threads", type=count_option, default=nproc(), help="sentencepiece training threads (one per core by default)"
    )
    return p


def fail(error, status):
    """``error`` as one line on stderr; returns the exit status."""
    print(f"hltmt-prepare-data: error: {error}", file=sys.stderr)
    return status


def check_languages(args, langs):
    """--langs against --raw (data for every language) and --raw against --out."""
    if not langs:
        raise DataError("--langs is empty")
    twice = sorted({lang for lang in langs if langs.count(lang) > 1})
    if twice:
        raise DataError(f"--langs names {','.join(twice)} twice: name each language once")
    if "en" in langs:
        raise DataError("--langs lists the non-English languages; en is always included")
    if not os.path.isdir(args.raw):
        raise DataError(f"raw data folder {args.raw} does not exist")
    for made in ("spm", "bin"):  # replaced whole at the end: the raw text must not lie in them
        if inside(args.raw, os.path.join(args.out, made)):
            raise DataError(
                f"--raw {args.raw} lies in {os.path.join(args.out, made)}, which this command "
                f"replaces with its {made} output: give another --out"
            )
    known = sorted({f.split(".")[1].split("-")[1] for f in os.listdir(args.raw) if f.count(".") == 2 and "-" in f})
    unknown = [lang for lang in langs if lang not in known]
    if unknown:
        raise DataError(f"no data for language(s) {','.join(unknown)} in {args.raw} (it has {','.join(known)})")


def train_limits(args, langs):
    """--max-train-lang as {language: lines}."""
    per_lang = {}
    for item in filter(None, args.max_train_lang.split(",")):
        lang, _, n = item.partition("=")
        if lang not in langs or not n.isdigit():
            raise DataError(f"--max-train-lang: {item!r} is not LANG=N for a language of --langs")
        per_lang[lang] = int(n)
    return per_lang


def load_data(args, langs):
    """{(split, language): (English lines, other lines)} of every split of every pair, within
    the --max-* limits; unusable training pairs dropped (and counted in the log)."""
    limits = {"train": args.max_train, "valid": args.max_valid, "test": args.max_test}
    segment_words = parse_segment_words(args.segment_words)
    per_lang = train_limits(args, langs)
    data = {
        (s, lang): load_pair(
            args.raw, s, lang, per_lang.get(lang, limits[s]) if s == "train" else limits[s], segment_words
        )
        for s in SPLITS
        for lang in langs
    }
    for lang in langs:
        en, xx, dropped = drop_unusable(*data[("train", lang)], args.max_words)
        if dropped:
            log(f"train en-{lang}: dropped {dropped} pairs with an empty side or over {args.max_words} words")
        if not en:
            raise DataError(f"no usable training pair for en-{lang}")
        data[("train", lang)] = (en, xx)
    return data


def main(argv=None):
    args = add_version(build_parser()).parse_args(argv)
    langs = [lang.strip() for lang in args.langs.split(",") if lang.strip()]
    try:
        check_options(args)
        check_writable(args.out)
        check_languages(args, langs)
        data = load_data(args, langs)
    except HltmtError as error:  # DataError, and the text of a raw file (hltmt_plugin.text)
        return fail(error, 2)
    register()  # fairseq's preprocessing, with the plugin's workarounds: once the arguments and data are checked
    return write_output(args, data, langs)


KIND = "hltmt-prepare-data"  # the writer named in the marker of spm/ and bin/


def write_output(args, data, langs):
    """Build spm/ and bin/ of --out beside them (:func:`hltmt_plugin.atomic_files.write_folder`:
    a temporary folder each, a lock on each) and put them in place only when both are complete:
    a failed run leaves the previous ones. Each replaces only a folder an earlier run wrote
    (with nothing added to it since) or an empty one; the exit status."""
    t0 = time.time()
    spm_dir, bin_dir = os.path.join(args.out, "spm"), os.path.join(args.out, "bin")
    inputs = {"--raw": args.raw, "--spm-model": args.spm_model, "--dict": args.dict}
    made = missing_folders(args.out)  # the folders the writer makes: removed again when the run fails
    try:
        for folder in (spm_dir, bin_dir):
            check_folder_output(folder, kind=KIND, force=True, option="--out", inputs=inputs)

        def fill_spm(work_spm):
            def fill_bin(work_bin):
                status = build(args, data, langs, work_spm, work_bin)
                if status:
                    raise _Failed(status)  # neither folder is replaced: the earlier spm/ and bin/ stay

            write_folder(bin_dir, fill_bin, kind=KIND, force=True, option="--out", inputs=inputs)

        write_folder(spm_dir, fill_spm, kind=KIND, force=True, option="--out", inputs=inputs)
    except _Failed as failed:
        remove_empty(made)
        return failed.status
    except HltmtError as error:
        remove_empty(made)
        return fail(error, 2)
    log(f"done in {time.time() - t0:.0f}s: {bin_dir} (languages en,{','.join(langs)})")
    return 0


def missing_folders(out):
    """The folders of the path ``out`` that do not exist yet, deepest first."""
    missing, path = [], os.path.abspath(out)
    while not os.path.lexists(path):
        missing.append(path)
        path = os.path.dirname(path)
    return missing


def remove_empty(folders):
    """The folders of :func:`missing_folders` that a failed run made, deepest first, each only while empty."""
    for folder in folders:
        try:
            os.rmdir(folder)
        except OSError:  # not made, or not empty: kept
            return


class _Failed(Exception):
    def __init__(self, status):
        super().__init__(status)
        self.status = status


def build(args, data, langs, spm_dir, tmp_bin):
    """Sentencepiece model, dictionary and encoded splits into ``spm_dir``, the binarized data
    into ``tmp_bin`` (both new folders); 0 when both are complete, else an exit status."""
    try:
        sp = sentencepiece_model(args, data, langs, spm_dir)
        write_dictionary(args, data, langs, sp, spm_dir)
        encode_splits(args, data, sp, spm_dir)
    except DataError as error:
        return fail(error, 2)
    for i, lang in enumerate(langs, 1):
        log(f"[{i}/{len(langs)}] binarizing en-{lang}")
        try:
            binarize(spm_dir, tmp_bin, lang, args.workers)
        except DataError as error:
            return fail(error, 1)
    for lang in dict.fromkeys(["en"] + langs + dict_langs(args)):
        shutil.copy(os.path.join(spm_dir, "dict.txt"), os.path.join(tmp_bin, f"dict.{lang}.txt"))
    with open(os.path.join(tmp_bin, "langs.txt"), "w") as f:
        f.write("\n".join(["en"] + langs) + "\n")
    write_fingerprint(tmp_bin)  # refuse training on a dictionary changed later
    return 0


def sentencepiece_model(args, data, langs, spm_dir):
    """The sentencepiece model: --spm-model (copied to ``spm_dir/spm.model``), or one trained
    there on the training text of every pair."""
    if args.spm_model:
        import sentencepiece as spm

        try:
            sp = spm.SentencePieceProcessor(model_file=args.spm_model)
        except (RuntimeError, OSError) as error:
            raise DataError(
                f"--spm-model {args.spm_model} is not a sentencepiece model "
                f"({str(error).strip().splitlines()[0] if str(error).strip() else error})"
            ) from None
        shutil.copy(args.spm_model, os.path.join(spm_dir, "spm.model"))
        return sp
    texts = [t for lang in langs for side in data[("train", lang)] for t in side]
    log(f"training a sentencepiece model of at most {args.vocab_size} pieces on {len(texts)} lines")
    sp = train_spm(texts, os.path.join(spm_dir, "spm"), args.vocab_size, args.seed, max(1, args.threads))
    if sp.get_piece_size() < args.vocab_size:
        log(
            f"the text allows {sp.get_piece_size()} pieces, fewer than --vocab-size {args.vocab_size}: the model "
            f"has {sp.get_piece_size()}"
        )
    return sp


def write_dictionary(args, data, langs, sp, spm_dir):
    """``spm_dir/dict.txt``: --dict, refused when most training pieces are not in it, or a
    dictionary of every piece of the model."""
    if not args.dict:
        write_dict(sp, os.path.join(spm_dir, "dict.txt"))
        return
    symbols = set(read_fairseq_dict(args.dict))
    shutil.copy(args.dict, os.path.join(spm_dir, "dict.txt"))
    pieces = [
        p
        for lang in langs
        for side in data[("train", lang)]
        for line in side[:2000]
        for p in sp.encode(line, out_type=str)
    ]
    unknown = sum(p not in symbols for p in pieces) / max(1, len(pieces))
    if unknown > 0.5:
        raise DataError(
            f"--dict {args.dict} does not belong to --spm-model {args.spm_model}: "
            f"{100 * unknown:.0f}% of the training pieces are not in it"
        )
    log(
        f"fixed dictionary {args.dict}: {len(symbols)} symbols; {100 * unknown:.2f}% of the training "
        "pieces are not in it (they become <unk>)"
    )


def encode_splits(args, data, sp, spm_dir):
    """Every split of every pair as sentencepiece pieces, ``spm_dir/{split}.en-XX.{side}``; a
    valid/test line over --max-eval-pieces is a DataError."""
    for i, ((split, lang), (en, xx)) in enumerate(data.items(), 1):
        log(f"[{i}/{len(data)}] encoding {split} en-{lang} ({len(en)} lines)")
        for side, lines in (("en", en), (lang, xx)):
            encoded = sp.encode(lines, out_type=str)
            if split != "train":
                longest = max(range(len(encoded)), key=lambda j: len(encoded[j]))
                if len(encoded[longest]) > args.max_eval_pieces:
                    raise DataError(
                        f"{split}.en-{lang}.{side} line {longest + 1} has {len(encoded[longest])} "
                        f"pieces, more than --max-eval-pieces {args.max_eval_pieces}"
                    )
            with open(os.path.join(spm_dir, f"{split}.en-{lang}.{side}"), "w", encoding="utf-8") as f:
                f.writelines(" ".join(pieces) + "\n" for pieces in encoded)


if __name__ == "__main__":
    sys.exit(main())
