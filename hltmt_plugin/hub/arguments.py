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
from hltmt_plugin.hub import decoding
from hltmt_plugin.hub.decoding import (  # noqa: F401 (the API's names of the declarations)
    MAX_LENPEN,
    MAX_SEED,
    MAX_TEMPERATURE,
    MIN_TEMPERATURE,
    MIN_TOPP,
    Limit,
    Search,
)


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


def length_penalty(value) -> float:
    """``value`` as a finite length penalty within its declaration (:data:`decoding.MAX_LENPEN`)."""
    return decoding.check_value("lenpen", value)


def generation(beam, lenpen, max_len):
    """(beam, lenpen, max_len) checked."""
    return positive_int("beam", beam), length_penalty(lenpen), positive_int("max_len", max_len)


# One sentence's search, the cost model every engine shares: each step scores beam x vocabulary
# logits (and keeps each hypothesis' states), for at most max_len + 1 steps. Measured on the
# study's HLT-MT (8,014 symbols, d 256) on one CPU thread, beam 512 held to 64 tokens: 6.4 s
# (CTranslate2), 7.7 s (the checkpoint), 17.7 s and 848 MiB (transformers), 2.7e8 logits.
MAX_STEP_LOGITS = 2**24  # one step's scores: 64 MiB of float32 a sentence
MAX_SEARCH_LOGITS = 2**32  # a whole search: about 16 x the measure above, some 5 minutes on the slowest engine


def search_bounds(beam, max_len, vocab_size: int, max_positions: int):
    """(beam, max_len) for a model of ``vocab_size`` symbols and ``max_positions`` target
    positions, the same for every engine: a translation of at most ``max_positions - 1`` tokens
    (the first position is the decoder's start; fairseq's search stops there too), and a search
    within the cost model: at most :data:`MAX_STEP_LOGITS` scores a step (beam x vocabulary: so
    also one hypothesis per symbol) and :data:`MAX_SEARCH_LOGITS` over the search (steps x beam x
    vocabulary), so that the largest beam accepted finishes, on every engine."""
    beam, max_len = positive_int("beam", beam), positive_int("max_len", max_len)
    max_len = max(1, min(max_len, max_positions - 1))
    largest = min(vocab_size, MAX_STEP_LOGITS // vocab_size, MAX_SEARCH_LOGITS // (vocab_size * (max_len + 1)))
    if beam > largest:
        raise HltmtConfigError(
            f"beam {beam} is more than one search of this model may cost: with {vocab_size} symbols and max_len "
            f"{max_len} give at most {max(1, largest)} (at most {MAX_STEP_LOGITS} scores a step, "
            f"{MAX_SEARCH_LOGITS} a search; lower max_len for a larger beam)"
        )
    return beam, max_len


def search(**options) -> Search:
    """The search options (the fields of :class:`~hltmt_plugin.hub.decoding.Search`, the others
    their defaults) checked: each within its own declaration (:func:`decoding.checked`), then the
    rules between them, each bound a model does not set (:func:`model_bounds` sets the others):
    ``nbest`` at most ``beam``; the sampling options only with ``sampling``, and
    ``sampling_topk`` or ``sampling_topp``, not both (fairseq keeps one of them, the other engines
    both); ``min_len`` at most ``max_len``."""
    checked = decoding.checked(options)
    if checked.nbest > checked.beam:
        raise HltmtConfigError(
            f"nbest {checked.nbest} is more than the beam ({checked.beam}): a search returns at most beam hypotheses"
        )
    given = decoding.given_sampling_options(checked)
    if given and not checked.sampling:
        raise HltmtConfigError(f"{given[0]} applies to sampling: give sampling=True (--sampling) with it")
    if checked.sampling_topk is not None and checked.sampling_topp is not None:
        raise HltmtConfigError("give sampling_topk or sampling_topp, not both")
    if checked.min_len > checked.max_len:
        raise HltmtConfigError(
            f"min_len {checked.min_len} is more than max_len {checked.max_len}: no translation could end"
        )
    return checked


def outside(limit: Limit, value) -> bool:
    """Whether ``value`` lies outside ``limit``'s range."""
    return (limit.low is not None and value < limit.low) or (limit.high is not None and value > limit.high)


def engine_bounds(options: Search, limits: dict, engine: str) -> Search:
    """``options`` within an engine's own :class:`Limit` of each option (``limits``: an engine
    class's ``search_limits``), applied by the contract to every engine; one line naming the
    option, the engine and why."""
    for name, limit in limits.items():
        value = getattr(options, name)
        if value is None or isinstance(value, bool):
            continue
        if outside(limit, value):
            shown = decoding.range_text(limit.low, limit.high)
            raise HltmtConfigError(f"{name} {value:g} is refused on {engine}: give {shown} there ({limit.why})")
    return options


def model_bounds(options: Search, vocab_size: int, max_positions: int) -> Search:
    """``options`` within a model of ``vocab_size`` symbols and ``max_positions`` target
    positions, the same for every engine: the beam and length of :func:`search_bounds`, at most
    ``vocab_size`` tokens to sample from, an n-gram no longer than a translation can be, a
    ``min_len`` no longer than its longest translation."""
    beam, max_len = search_bounds(options.beam, options.max_len, vocab_size, max_positions)
    if options.min_len > max_len:
        raise HltmtConfigError(
            f"min_len {options.min_len} is more than this model's longest translation ({max_len} tokens: "
            f"{max_positions} target positions)"
        )
    if options.sampling_topk is not None and options.sampling_topk > vocab_size:
        raise HltmtConfigError(
            f"sampling_topk {options.sampling_topk} is more than the model's vocabulary ({vocab_size} symbols)"
        )
    if options.no_repeat_ngram_size > max_positions:
        raise HltmtConfigError(
            f"no_repeat_ngram_size {options.no_repeat_ngram_size} is longer than any translation of this model "
            f"({max_positions} target positions)"
        )
    return options.replace(beam=beam, max_len=max_len)


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


def _count(text: str, low: int, why: str) -> int:
    """``text`` as a count of processes or threads from ``low`` to :func:`max_threads`, else
    argparse's one line (``why``: what the range means)."""
    value = int(text)  # argparse turns a ValueError into "invalid int value"
    if not low <= value <= max_threads():
        raise argparse.ArgumentTypeError(
            f"{text:.40} is out of range: a count of processes or threads is from {low} to {max_threads()} {why}"
        )
    return value


def count_option(text: str) -> int:
    """argparse's type of every command option that counts processes or threads (``--nproc``,
    ``--workers``, ``--threads``, ``--decode-workers``, ...): a whole number from 0 to
    :func:`max_threads`, the bound of every engine's threads, refused at parsing in one line;
    what 0 means (the command's choice, or a refusal) is the command's to say."""
    return _count(text, 0, "(four per core, and at least 256)")


def threads_option(text: str) -> int:
    """argparse's type of an engine's ``--threads``: :func:`count_option`'s range without 0
    (leaving the option out is the engine's choice), so the parser and the contract
    (:func:`threads`) give one range."""
    return _count(text, 1, "here (leave the option out for the engine's choice)")


count_option.__name__ = threads_option.__name__ = "int"  # argparse names the type in its messages


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


def translate_batch(items, search_options: dict, errors, max_tokens, max_sentences, first_line, progress):
    """The arguments of :meth:`~hltmt_plugin.hub.HltmtTranslator.translate_batch`, checked in
    order: ``(items as a list, the search options (:func:`search`), max_tokens, max_sentences)``;
    a bad one raises."""
    if not isinstance(errors, str) or errors not in ("raise", "keep"):
        raise HltmtConfigError(f"errors must be 'raise' or 'keep', got {errors!r:.60}")
    items = as_list("items", items, "(src, tgt, text) tuples")
    if len(items) > text_rule.MAX_LINES:
        raise HltmtInputError(
            f"items holds {len(items)} sentences, more than {text_rule.MAX_LINES} in one call: split it"
        )
    options = search(**search_options)
    max_tokens = positive_int("max_tokens", max_tokens, optional=True)
    max_sentences = positive_int("max_sentences", max_sentences, optional=True)
    if isinstance(first_line, bool) or not isinstance(first_line, int):
        raise HltmtConfigError(f"first_line must be a whole number, got {first_line!r:.60}")
    if progress is not None and not callable(progress):
        raise HltmtConfigError(f"progress must be a function (or None), got {type(progress).__name__}")
    return items, options, max_tokens, max_sentences
