"""The Python API's arguments, checked as the command line checks its options: each problem is
one :class:`~hltmt_plugin.errors.HltmtConfigError` (an option) or
:class:`~hltmt_plugin.errors.HltmtInputError` (the input) naming the argument, before any
search runs."""

import argparse
import math
import numbers
import os
from typing import Iterable, List, Optional

from hltmt_plugin import text as text_rule
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError


def positive_int(name: str, value, optional: bool = False) -> Optional[int]:
    """``value`` as an int of at least 1 (None allowed when ``optional``)."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise HltmtConfigError(f"{name} must be a whole number of at least 1, got {value!r:.60}")
    if value < 1:
        raise HltmtConfigError(f"{name} must be at least 1, got {value}")
    return int(value)


def finite_float(name: str, value) -> float:
    """``value`` as a finite float (not NaN, not infinite)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise HltmtConfigError(f"{name} must be a number, got {value!r:.60}")
    if not math.isfinite(float(value)):
        raise HltmtConfigError(f"{name} must be a finite number, got {value}")
    return float(value)


def flag(name: str, value) -> bool:
    """``value`` as a bool (True or False only)."""
    if not isinstance(value, bool):
        raise HltmtConfigError(f"{name} must be True or False, got {value!r:.60}")
    return value


MAX_LENPEN = 10.0  # |lenpen|: a length to a larger power overflows the scores of long translations


def length_penalty(value) -> float:
    """``value`` as a finite length penalty in [-MAX_LENPEN, MAX_LENPEN]."""
    lenpen = finite_float("lenpen", value)
    if abs(lenpen) > MAX_LENPEN:
        raise HltmtConfigError(f"lenpen must be between {-MAX_LENPEN:g} and {MAX_LENPEN:g}, got {lenpen:g}")
    return lenpen


def generation(beam, lenpen, max_len):
    """(beam, lenpen, max_len) checked."""
    return positive_int("beam", beam), length_penalty(lenpen), positive_int("max_len", max_len)


def search_bounds(beam, max_len, vocab_size: int, max_positions: int):
    """(beam, max_len) for a model of ``vocab_size`` symbols and ``max_positions`` target
    positions, the same for every engine: a beam of at most one hypothesis per symbol (a larger
    one is refused: it only costs memory), and a translation of at most ``max_positions - 1``
    tokens (the first position is the decoder's start; fairseq's search stops there too)."""
    beam, max_len = positive_int("beam", beam), positive_int("max_len", max_len)
    if beam > vocab_size:
        raise HltmtConfigError(
            f"beam {beam} is larger than the model's vocabulary ({vocab_size} symbols): a beam keeps at "
            f"most one hypothesis per symbol; give at most {vocab_size}"
        )
    return beam, max(1, min(max_len, max_positions - 1))


def max_threads() -> int:
    """The most threads one translation may use: four per core, and at least 256."""
    return max(256, 4 * (os.cpu_count() or 1))


def threads(value, name: str = "threads") -> Optional[int]:
    """``value`` as a number of threads or processes (None: the engine's choice), at least 1 and
    at most :func:`max_threads` (more cannot run faster, and an engine may fail to start them);
    ``name``: the option's, as a message names it."""
    count = positive_int(name, value, optional=True)
    if count is not None and count > max_threads():
        raise HltmtConfigError(f"{name} must be at most {max_threads()} (four per core, and at least 256), got {count}")
    return count


def count_option(text: str) -> int:
    """argparse's type of every command option that counts processes or threads (``--nproc``,
    ``--workers``, ``--threads``, ``--decode-workers``, ...): a whole number from 0 to
    :func:`max_threads`, the bound of every engine's threads, refused at parsing in one line;
    what 0 means (the command's choice, or a refusal) is the command's to say."""
    value = int(text)  # argparse turns a ValueError into "invalid int value"
    if not 0 <= value <= max_threads():
        raise argparse.ArgumentTypeError(
            f"{text:.40} is out of range: a count of processes or threads is from 0 to {max_threads()} "
            "(four per core, and at least 256)"
        )
    return value


count_option.__name__ = "int"  # argparse names the type in its messages


def load_options(max_tokens, max_sentences, thread_count, fp16) -> dict:
    """The options of ``load`` every engine shares, checked by the contract before an engine's own
    load runs (:meth:`~hltmt_plugin.hub.contract.Translator.load`): the batch limits, the threads
    (:func:`threads`) and half precision."""
    return {
        "max_tokens": positive_int("max_tokens", max_tokens),
        "max_sentences": positive_int("max_sentences", max_sentences, optional=True),
        "threads": threads(thread_count),
        "fp16": flag("fp16", fp16),
    }


def as_list(name: str, value, what: str) -> List:
    """A list of the items of ``value``: a list, tuple or other iterable of items; None, a
    single string or bytes, a mapping or a non-iterable is refused naming ``name``."""
    if value is None:
        raise HltmtInputError(f"{name} is None: give a list of {what}")
    if isinstance(value, (str, bytes, bytearray)):
        raise HltmtInputError(f"{name} is a single {type(value).__name__}: give a list of {what}")
    if isinstance(value, dict) or not isinstance(value, Iterable):
        raise HltmtInputError(f"{name} must be a list of {what}, got {type(value).__name__}")
    return list(value)


def one_direction(texts, src, tgt) -> List:
    """``translate(texts, src, tgt)``'s arguments checked, as ``translate_batch``'s items."""
    if isinstance(texts, str):
        texts = [texts]
    texts = as_list("texts", texts, "sentences (str)")
    for name, lang in (("src", src), ("tgt", tgt)):
        if not isinstance(lang, str):
            raise HltmtInputError(f"{name} must be a language code (str), got {type(lang).__name__}")
    return [(src, tgt, text) for text in texts]


def check_text(text: str) -> None:
    """A sentence the model can be given as it is: the one text rule of every reader
    (:func:`hltmt_plugin.text.problem`: valid Unicode, no control character but TAB) and at most
    :data:`~hltmt_plugin.text.MAX_LINE_BYTES` bytes of UTF-8, as the readers of lines bound them."""
    why = text_rule.problem(text)
    if why is None and len(text) > text_rule.MAX_LINE_BYTES // 4 and len(text.encode()) > text_rule.MAX_LINE_BYTES:
        why = f"is longer than {text_rule.MAX_LINE_BYTES} bytes of UTF-8 (not one sentence)"
    if why is not None:
        raise HltmtInputError(f"the text {why}: not translated")


def translate_batch(items, beam, lenpen, max_len, errors, max_tokens, max_sentences, first_line, progress):
    """The arguments of :meth:`~hltmt_plugin.hub.HltmtTranslator.translate_batch`, checked in
    order: ``(items as a list, (beam, lenpen, max_len), max_tokens, max_sentences)``; a bad one
    raises."""
    if not isinstance(errors, str) or errors not in ("raise", "keep"):
        raise HltmtConfigError(f"errors must be 'raise' or 'keep', got {errors!r:.60}")
    items = as_list("items", items, "(src, tgt, text) tuples")
    if len(items) > text_rule.MAX_LINES:
        raise HltmtInputError(
            f"items holds {len(items)} sentences, more than {text_rule.MAX_LINES} in one call: split it"
        )
    search = generation(beam, lenpen, max_len)
    max_tokens = positive_int("max_tokens", max_tokens, optional=True)
    max_sentences = positive_int("max_sentences", max_sentences, optional=True)
    if isinstance(first_line, bool) or not isinstance(first_line, int):
        raise HltmtConfigError(f"first_line must be a whole number, got {first_line!r:.60}")
    if progress is not None and not callable(progress):
        raise HltmtConfigError(f"progress must be a function (or None), got {type(progress).__name__}")
    return items, search, max_tokens, max_sentences
