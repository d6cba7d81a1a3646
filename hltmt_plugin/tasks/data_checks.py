"""The data folder, languages, dictionaries and split files the options name, checked before
fairseq reads them, so a mistake is one clear line instead of a traceback."""

import itertools
import logging
import os
import struct
import sys
import threading
from argparse import Namespace
from typing import List, Optional

from fairseq import utils
from fairseq.data.multilingual.multilingual_data_manager import MultilingualDatasetManager

from hltmt_plugin.data_fingerprint import check_dictionaries as changed_dictionaries
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.languages import split_list, unknown_languages

logger = logging.getLogger(__name__)


_FAIRSEQ_LOG = threading.Lock()  # task_languages' hold on fairseq's logger level


def task_languages(args) -> Optional[List[str]]:
    """The task's language list as fairseq reads it (``MultilingualDatasetManager.load_langs``:
    ``--langs``, or the lines of ``--lang-dict``), read before fairseq so that a mistake is one
    line; None when neither option is given (fairseq then infers the list from the pairs)."""
    lang_dict = getattr(args, "lang_dict", None)
    if args.langs is None and not lang_dict:
        return None
    if args.langs is not None and lang_dict:
        raise HltmtConfigError("give the language list once: --langs or --lang-dict, not both")
    if lang_dict and not os.path.isfile(lang_dict):
        raise HltmtConfigError(f"--lang-dict {lang_dict} does not exist")
    fairseq_log = logging.getLogger(MultilingualDatasetManager.__module__)
    with _FAIRSEQ_LOG:  # one reading at a time: each puts back the level it found
        level = fairseq_log.level
        fairseq_log.setLevel(logging.WARNING)  # fairseq logs the list itself when it reads it next
        try:
            langs = MultilingualDatasetManager.load_langs(
                Namespace(langs=split_list(args.langs) if args.langs is not None else None, lang_dict=lang_dict)
            )
        finally:
            fairseq_log.setLevel(level)
    return split_list(langs)


def _directions(args) -> List[str]:
    pairs = split_list(args.lang_pairs)
    if not pairs:
        raise HltmtConfigError("--lang-pairs is required: the directions in training order, e.g. en-de,de-en")
    malformed = [p for p in pairs if len(p.split("-")) != 2 or not all(p.split("-"))]
    if malformed:
        raise HltmtConfigError(f"--lang-pairs: {','.join(malformed)} is not SRC-TGT")
    if args.source_lang is not None or args.target_lang is not None:
        if not (args.source_lang and args.target_lang):
            raise HltmtConfigError("give both -s/--source-lang and -t/--target-lang")
        return [f"{args.source_lang}-{args.target_lang}"]
    return pairs


def check_data(args) -> None:
    paths = utils.split_paths(args.data) if getattr(args, "data", None) else []
    if not paths or not os.path.isdir(paths[0]):
        raise HltmtConfigError(
            f"data folder {paths[0] if paths else args.data!r} does not exist (the folder "
            "that fairseq-preprocess / hltmt-prepare-data wrote)"
        )
    pairs = _directions(args)
    inference = args.source_lang is not None
    langs = task_languages(args)
    used = sorted({x for p in pairs for x in p.split("-")})
    if langs is not None:
        unknown = unknown_languages(used, langs)
        if unknown:
            raise HltmtConfigError(
                f"language(s) {','.join(unknown)} of {'-s/-t' if inference else '--lang-pairs'} "
                f"not in --langs / --lang-dict ({','.join(langs)})"
            )
    check_dictionaries(args)
    if not (getattr(args, "source_dict", None) or getattr(args, "fixed_dictionary", None)):
        missing = [x for x in used if not os.path.isfile(os.path.join(paths[0], f"dict.{x}.txt"))]
        if missing:
            raise HltmtConfigError(
                f"{paths[0]} has no dictionary for {','.join(missing)} (dict.XX.txt): is that language in the data?"
            )
    if inference:
        for path in filter(None, str(getattr(args, "path", "") or "").split(":")):
            if "://" not in path and not os.path.isfile(path):
                raise HltmtConfigError(f"--path {path}: checkpoint does not exist")


def check_dictionaries(args) -> None:
    """The data folder's dictionaries are the ones its binarized files were made with (the
    fingerprint that hltmt-prepare-data records)."""
    folder = utils.split_paths(args.data)[0]
    try:
        problems = changed_dictionaries(folder)
    except ValueError as error:
        raise HltmtConfigError(str(error)) from None
    if problems:
        raise HltmtConfigError(
            f"{folder}: {'; '.join(problems)}: the token ids of its binarized files no longer "
            "mean what they meant; binarize again (hltmt-prepare-data) or restore the "
            "dictionaries"
        )


def check_split(args, split: str, pairs: List[str]) -> None:
    """Every pair has binarized data for the split (in either orientation) before fairseq opens it."""
    folder = utils.split_paths(args.data)[0]
    for pair in pairs:
        src, tgt = pair.split("-")
        names = [f"{split}.{a}-{b}.{src}.idx" for a, b in ((src, tgt), (tgt, src))]
        if not any(
            os.path.isfile(os.path.join(folder, n)) or os.path.isfile(os.path.join(folder, n[: -len(".idx")] + "0.idx"))
            for n in names
        ):
            raise HltmtConfigError(f"{folder} has no {split} data for {pair} (looked for {names[0]} and {names[1]})")
        for a, b in ((src, tgt), (tgt, src)):
            for k in itertools.count():
                prefix = os.path.join(folder, f"{split}{k or ''}.{a}-{b}.")
                if not os.path.isfile(prefix + src + ".idx"):
                    break
                check_pair_files(prefix + src, prefix + tgt, f"{split}{k or ''} {pair}")


MMAP_MAGIC = b"MMIDIDX\x00\x00"  # fairseq's --dataset-impl mmap index (fairseq-preprocess's default)
MMAP_HEADER = 9 + 8 + 1 + 8  # magic, version, dtype code, number of sentences
MMAP_DTYPE_SIZE = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 8, 7: 8, 8: 2, 9: 4, 10: 8}


def binarized_length(prefix: str) -> Optional[int]:
    """The number of sentences of the binarized file pair ``prefix.idx`` / ``prefix.bin``, after
    checking that neither is empty or truncated; None for a format other than fairseq's mmap
    (the other formats are fairseq's to read)."""
    idx, data = prefix + ".idx", prefix + ".bin"
    again = "binarize the data again (hltmt-prepare-data or fairseq-preprocess)"
    size = os.path.getsize(idx)
    if size == 0:
        raise HltmtConfigError(f"{idx} is empty (0 bytes), not a fairseq index: {again}")
    with open(idx, "rb") as f:
        head = f.read(MMAP_HEADER)
        if not head.startswith(MMAP_MAGIC[:8]):
            return None
        if len(head) < MMAP_HEADER:
            raise HltmtConfigError(f"{idx} is truncated ({size} bytes, less than an index header): {again}")
        (code,) = struct.unpack("<B", head[17:18])
        (n,) = struct.unpack("<Q", head[18:26])
        if code not in MMAP_DTYPE_SIZE:
            raise HltmtConfigError(f"{idx} is not a fairseq index (unknown token type {code}): {again}")
        want = MMAP_HEADER + 12 * n
        if size != want:
            raise HltmtConfigError(
                f"{idx} is {'truncated' if size < want else 'damaged'}: an index of {n} "
                f"sentences has {want} bytes, this one {size}: {again}"
            )
        last = 0
        if n:
            f.seek(MMAP_HEADER + 4 * (n - 1))
            (last_size,) = struct.unpack("<i", f.read(4))
            f.seek(MMAP_HEADER + 4 * n + 8 * (n - 1))
            (last_pointer,) = struct.unpack("<q", f.read(8))
            last = last_pointer + last_size * MMAP_DTYPE_SIZE[code]
    if not os.path.isfile(data):
        raise HltmtConfigError(f"{data} is missing (its index {os.path.basename(idx)} is there): {again}")
    have = os.path.getsize(data)
    if have != last:
        state = "empty" if have == 0 else "truncated" if have < last else "longer than its index says"
        raise HltmtConfigError(
            f"{data} is {state}: its index lists {n} sentences in {last} bytes, the file holds {have}: {again}"
        )
    return n


def check_pair_files(src_prefix: str, tgt_prefix: str, what: str) -> None:
    """Both sides of one binarized split of a pair are whole and hold as many sentences."""
    n_src = binarized_length(src_prefix)
    if not os.path.isfile(tgt_prefix + ".idx"):
        raise HltmtConfigError(
            f"{tgt_prefix}.idx is missing ({os.path.basename(src_prefix)}.idx, the other side of "
            f"{what}, is there): binarize the data again"
        )
    n_tgt = binarized_length(tgt_prefix)
    if n_src is not None and n_tgt is not None and n_src != n_tgt:
        raise HltmtConfigError(
            f"{src_prefix}.idx holds {n_src} sentences and {tgt_prefix}.idx {n_tgt}: the two "
            f"sides of {what} do not match; binarize the data again"
        )


def refuse_overlong_pairs(indices, dataset, max_positions, split: str):
    """``indices`` (all within the model's positions), or one line for a split holding sentence
    pairs longer than the model's positions, where fairseq 0.12 stops the run with an exception
    and its traceback (a validation or test split: fairseq-train drops a training pair with a
    warning): how many, the first with its lengths, and the two ways out."""
    kept, skipped = dataset.filter_indices_by_size(indices, max_positions)
    if len(skipped) == 0:
        return kept
    first = int(min(skipped))
    lengths = tuple(int(n) for n in dataset.size(first)) if hasattr(dataset, "size") else ()
    raise HltmtInputError(
        f"the {split} data holds {len(skipped)} sentence pair(s) longer than the model's positions "
        f"{_positions(max_positions)}"
        f" (source, target): the first is pair {first} ({', '.join(map(str, lengths))} tokens); leave them "
        "out with --skip-invalid-size-inputs-valid-test, or split long lines when preparing the data "
        "(hltmt-prepare-data --segment-words)"
    )


def name_skipped_pairs(indices, dataset, max_positions, split: str):
    """``indices`` within the model's positions, and one line on standard error for each pair
    ``--skip-invalid-size-inputs-valid-test`` leaves out of fairseq-generate (fairseq 0.12 says
    only how many): every sentence given gets a translation or a line saying why not."""
    kept, skipped = dataset.filter_indices_by_size(indices, max_positions)
    for index in sorted(int(i) for i in skipped):
        lengths = tuple(int(n) for n in dataset.size(index)) if hasattr(dataset, "size") else ()
        print(
            f"hltmt_plugin: sentence {index} of the {split} data ({', '.join(map(str, lengths))} tokens) is longer "
            f"than the model's positions {_positions(max_positions)}: not translated "
            "(--skip-invalid-size-inputs-valid-test)",
            file=sys.stderr,
            flush=True,
        )
    return kept


def _positions(max_positions) -> str:
    return str(tuple(int(n) for n in max_positions) if isinstance(max_positions, (tuple, list)) else max_positions)


class OverlongInputs:
    """fairseq-interactive's input lines longer than the model takes: each is reported (its line
    number, counted over the whole input, and its length) and skipped, and the other lines of its
    buffer are translated; fairseq 0.12 stops the whole run at the first such line unless
    ``--skip-invalid-size-inputs-valid-test`` is given, which skips it with no line number."""

    def __init__(self):
        self.lines_before = 0  # input lines of the earlier datasets (fairseq-interactive's start_id)

    def filter(self, indices, dataset, max_positions):
        kept, skipped = dataset.filter_indices_by_size(indices, max_positions)
        limit = max_positions[0] if isinstance(max_positions, (tuple, list)) else max_positions
        for index in sorted(int(i) for i in skipped):
            line = self.lines_before + index + 1
            length = (
                int(dataset.src_sizes[index])
                if getattr(dataset, "src_sizes", None) is not None
                else dataset.size(index)
            )
            logger.warning(
                f"input line {line} (S-{line - 1}) has {length} tokens (pieces and end "
                f"of sentence), more than the model's {limit} source positions: not translated; split "
                f"it into sentences"
            )
        self.lines_before += len(dataset)
        return kept
