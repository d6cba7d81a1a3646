"""What every engine of the translator shares: the checkpoint's (:mod:`hltmt_plugin.hub.translator`)
and an export folder's (:mod:`hltmt_plugin.hub.ct2_engine`). Imports neither torch nor fairseq.

- :func:`admit`: a sentence's refusals before it is tokenized, in the one order both engines
  report them: not text, an unknown language, a direction the model cannot serve (or zero-shot
  without ``zero_shot``), a NUL character or a lone surrogate, an empty line;
- :func:`check_length`: a sentence longer than the model's source positions (refused, not cut);
- :func:`admit_items`: a call's ``(src, tgt, text)`` items, each admitted or given its error
  with its line number;
- :func:`outcome`: what ``translate_batch`` returns (texts or :class:`Translation` objects;
  :class:`TranslationErrors` naming the failed lines with ``errors="raise"``);
- :func:`import_ctranslate2`: CTranslate2, or one line saying how to install it.
"""

from typing import Callable, Dict, List, Optional, Sequence, Tuple

from hltmt_plugin.directions import TRAINED, ZERO_SHOT, TrainedDirections
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.hub import arguments
from hltmt_plugin.hub.results import Translation, TranslationErrors

INSTALL = 'pip install "ctranslate2>=4.5" (or pip install -e ".[ctranslate2]")'


def import_ctranslate2(what: str = ""):
    """The ``ctranslate2`` module, or :class:`HltmtConfigError` saying how to install it
    (``what``: why it is needed, put first)."""
    try:
        import ctranslate2
    except ImportError:
        raise HltmtConfigError(f"{what}CTranslate2 is not installed: {INSTALL}") from None
    return ctranslate2


def check_languages(langs: Sequence[str], src, tgt) -> None:
    """An unknown language (or one that is not a string) of ``src -> tgt``: HltmtInputError."""
    unknown = [lang for lang in (src, tgt) if not isinstance(lang, str) or lang not in langs]
    if unknown:
        raise HltmtInputError(f"unknown language {unknown[0]!r} (this model knows {','.join(langs)})")


def admit(
    text,
    src: str,
    tgt: str,
    routing: Callable[[str, str], Dict[str, object]],
    directions: Optional[TrainedDirections],
    zero_shot: bool,
) -> Tuple[Dict[str, object], str]:
    """``(routing, kind)`` of a sentence the engine may tokenize; HltmtInputError naming the
    first thing that refuses it. ``routing(src, tgt)`` refuses an unknown language."""
    if not isinstance(text, str):
        raise HltmtInputError(f"expected text, got {type(text).__name__}")
    route = routing(src, tgt)
    kind = directions.check(src, tgt, zero_shot) if directions is not None else TRAINED
    arguments.check_text(text)
    if not text.strip():
        raise HltmtInputError("empty line: nothing to translate")
    return route, kind


def check_length(tokens: int, max_source_positions: int) -> None:
    """``tokens`` (pieces and end of sentence) plus the language token must fit the model's
    source positions: a longer line is refused, not cut."""
    length = tokens + 1
    if length > max_source_positions:
        raise HltmtInputError(
            f"{length} tokens (pieces, language token and end of sentence), more than the model's "
            f"{max_source_positions} source positions: split the line into sentences"
        )


def admit_items(
    items: Sequence, first_line: int, admit_one: Callable[[str, str, str], Tuple[Dict[str, object], str]]
) -> Tuple[List[Translation], List[Tuple[int, str, str, str]]]:
    """A :class:`Translation` per item (with its error when ``admit_one(src, tgt, text)``
    refuses it), and ``(index, src, tgt, text)`` of the items admitted."""
    results: List[Translation] = []
    admitted = []
    for i, item in enumerate(items):
        line = first_line + i
        try:
            if not (isinstance(item, (tuple, list)) and len(item) == 3):
                raise HltmtInputError(f"expected (src, tgt, text), got {item!r:.80}")
            src, tgt, text = item
            results.append(Translation(line, src, tgt, text))
            routing, kind = admit_one(src, tgt, text)
            results[-1].routing, results[-1].zero_shot = routing, kind == ZERO_SHOT
            admitted.append((i, src, tgt, text))
        except HltmtInputError as error:
            if len(results) == i:
                results.append(Translation(line, "", "", ""))
            results[-1].error = str(error)
    return results, admitted


def refuse(result: Translation, error: Exception) -> None:
    """Mark ``result`` failed with ``error`` (a sentence refused once admitted: no routing)."""
    result.error, result.routing, result.zero_shot = str(error), None, False


def outcome(results: List[Translation], details: bool, errors: str) -> list:
    """What ``translate_batch`` returns: the texts (or the Translations with ``details``); with
    ``errors="raise"`` and a failed sentence, :class:`TranslationErrors`."""
    failed = [r for r in results if r.error is not None]
    out = results if details else [r.text for r in results]
    if failed and errors == "raise":
        shown = "; ".join(f"line {r.line}: {r.error}" for r in failed[:5])
        more = f"; and {len(failed) - 5} more" if len(failed) > 5 else ""
        raise TranslationErrors(
            f"{len(failed)} of {len(results)} sentence(s) not translated: {shown}{more}", out, failed
        )
    return out
