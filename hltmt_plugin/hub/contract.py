"""What every engine of the translator shares: the checkpoint's (:mod:`hltmt_plugin.hub.translator`)
and an export folder's (:mod:`hltmt_plugin.hub.ct2_engine`, :mod:`hltmt_plugin.hub.hf_engine`).
Imports neither torch nor fairseq.

- :func:`admit`: a sentence's refusals before it is tokenized, in the one order both engines
  report them: not text, an unknown language, a direction the model cannot serve (or zero-shot
  without ``zero_shot``), a NUL character or a lone surrogate, an empty line;
- :func:`check_length`: a sentence longer than the model's source positions (refused, not cut);
- :func:`admit_items`: a call's ``(src, tgt, text)`` items, each admitted or given its error
  with its line number;
- :func:`ranked`: a sentence's result from its hypotheses, the ``nbest`` best by score;
- :func:`outcome`: what ``translate_batch`` returns (texts, or lists of ``nbest`` texts, or
  :class:`Translation` objects; :class:`TranslationErrors` naming the failed lines with
  ``errors="raise"``);
- :func:`import_ctranslate2`, :func:`import_transformers`: the engines' libraries, or one line
  saying how to install them;
- :class:`Translator`: the contract itself, kept by every translator: ``load`` (the options
  every engine shares checked, then the engine's own load), ``translate`` and
  ``translate_batch`` (their arguments and bounds checked, each sentence admitted, tokenized and
  measured, the outcome), ``direction``; an engine overrides none of them;
- :class:`ExportedTranslator`: an export folder served with that contract, whatever the engine
  (:mod:`hltmt_plugin.hub.ct2_engine`, :mod:`hltmt_plugin.hub.hf_engine`): its languages and
  directions, a call's tokens, batches by the model that serves them.
"""

import contextlib
import os
import threading
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from hltmt_plugin.directions import TRAINED, ZERO_SHOT, TrainedDirections, marks_target
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.hub import arguments, decoding, engines
from hltmt_plugin.hub.results import Hypothesis, Translation, TranslationErrors

SEEDED_CALLS = threading.Lock()  # one seeded search at a time in the process (Translator._seeded_call)
INSTALL = engines.install_line("ctranslate2")
TRANSFORMERS_INSTALL = engines.install_line("transformers")


def import_ctranslate2(what: str = ""):
    """The ``ctranslate2`` module, or :class:`HltmtConfigError` saying how to install it
    (``what``: why it is needed, put first)."""
    try:
        import ctranslate2
    except ImportError:
        raise HltmtConfigError(f"{what}CTranslate2 is not installed: {INSTALL}") from None
    return ctranslate2


def import_transformers(what: str = "", writes: bool = False):
    """The ``transformers`` module (with ``writes`` also safetensors' torch functions, which
    write an export's weights), or :class:`HltmtConfigError` saying how to install them
    (``what``: why they are needed, put first)."""
    try:
        if writes:
            import safetensors.torch  # noqa: F401
        import transformers
    except ImportError:
        raise HltmtConfigError(f"{what}transformers is not installed: {TRANSFORMERS_INSTALL}") from None
    return transformers


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


def ranked(result: Translation, hypotheses: Sequence[Tuple[str, float, int]], nbest: int) -> None:
    """Fill ``result`` from an engine's ``(text, score, tokens)`` hypotheses (score in base 2):
    its text, score and tokens the best's, and with ``nbest`` above 1 its ``hypotheses``, the
    ``nbest`` best, best first (equal scores in the engine's order), as fairseq orders them."""
    order = sorted(range(len(hypotheses)), key=lambda i: (-hypotheses[i][1], i))[:nbest]
    result.text, result.score, result.tokens = hypotheses[order[0]]
    if nbest > 1:
        result.hypotheses = [Hypothesis(*hypotheses[i]) for i in order]


def outcome(results: List[Translation], details: bool, errors: str, nbest: int = 1) -> list:
    """What ``translate_batch`` returns: the texts (with ``nbest`` above 1, each sentence's list
    of texts, best first; None for a failed sentence), or the Translations with ``details``; with
    ``errors="raise"`` and a failed sentence, :class:`TranslationErrors`."""
    failed = [r for r in results if r.error is not None]
    if details:
        out = results
    elif nbest > 1:
        out = [None if r.text is None else [h.text for h in r.hypotheses] for r in results]
    else:
        out = [r.text for r in results]
    if failed and errors == "raise":
        shown = "; ".join(f"line {r.line}: {r.error}" for r in failed[:5])
        more = f"; and {len(failed) - 5} more" if len(failed) > 5 else ""
        raise TranslationErrors(
            f"{len(failed)} of {len(results)} sentence(s) not translated: {shown}{more}", out, failed
        )
    return out


def batches(rows, max_tokens: int, max_sentences: Optional[int]):
    """``(index, source)`` rows sorted by length, cut into batches of at most ``max_tokens``
    (padded) source tokens and ``max_sentences`` sentences; a longer row is a batch of its own."""
    batch: list = []
    for row in sorted(rows, key=lambda row: len(row[1])):
        size = len(row[1])  # the longest of the batch so far: the rows come shortest first
        if batch and (size * (len(batch) + 1) > max_tokens or (max_sentences and len(batch) >= max_sentences)):
            yield batch
            batch = []
        batch.append(row)
    if batch:
        yield batch


class Translator:
    """The translator's contract, kept by the checkpoint's translator
    (:class:`~hltmt_plugin.hub.translator.HltmtTranslator`) and an export folder's
    (:class:`ExportedTranslator`): the same calls, arguments, refusals and outcome.

    A translator is made by :meth:`load`, which checks the options every engine shares and calls
    the engine's :meth:`_load`; the contract's calls (:data:`SEALED`) are never overridden (a class
    that does is refused when it is defined), so an engine written later keeps every bound.
    A translator has ``langs``, ``directions`` (:class:`~hltmt_plugin.directions.TrainedDirections`,
    or None: every direction trained), ``dictionary``, ``max_source_positions``,
    ``max_target_positions``, ``max_tokens`` and ``max_sentences``. It says how a direction is
    routed (:meth:`routing`, refusing an unknown language), tokenizes a call's admitted texts
    (:meth:`_tokens`: each text's ids with end of sentence), keeps what it needs of a sentence
    that fits (:meth:`_prepared`) and translates the prepared sentences of a call
    (:meth:`_translate_prepared`, given the call's :class:`~hltmt_plugin.hub.arguments.Search`),
    filling each result through :func:`ranked`; a call with a ``seed`` runs inside its
    :meth:`_seeded` (torch's generators, unless the engine draws from others)."""

    langs: List[str]
    directions: Optional[TrainedDirections]
    engine = "fairseq"  # the engine's name (hltmt_plugin.hub.engines), which its search options' entries name
    # an engine's own ranges of search options where it does not search as the others do
    # (decoding.Limit, declared with each option in hltmt_plugin.hub.decoding), applied to every call by
    # translate_batch
    search_limits: Dict[str, arguments.Limit] = decoding.limits("fairseq")
    # values an engine accepts that give other lines than the checkpoint's, outside each Limit's
    # range (docs/deploying.md says why, and tests/hub/test_engine_contract.py allows no other)
    search_differences: Dict[str, arguments.Limit] = decoding.differences("fairseq")

    def engine_label(self) -> str:
        """The engine as a message names it."""
        return getattr(self, "engine_name", "") or "the checkpoint"

    # the contract's own calls: they check every bound before an engine's method runs, so an engine
    # implements the methods they call (_load, routing, _tokens, _prepared, _translate_prepared), never these
    SEALED = ("load", "translate", "translate_batch", "direction", "_prepare_items", "_seeded_call")

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if vars(cls).get("engine") in engines.ENGINES:  # an engine's label (engines) and ranges (decoding)
            cls.engine_name = engines.get(cls.engine).label
            cls.search_limits, cls.search_differences = decoding.limits(cls.engine), decoding.differences(cls.engine)
        overridden = [name for name in Translator.SEALED if name in vars(cls)]
        if overridden:
            raise TypeError(
                f"{cls.__name__} overrides {', '.join(overridden)} of the translator's contract, which checks "
                "the bounds every engine shares: implement _load, routing, _tokens, _prepared and "
                "_translate_prepared instead"
            )

    @classmethod
    def load(
        cls,
        checkpoint: str,
        spm: Optional[str] = None,
        data: Optional[str] = None,
        *,
        device: Optional[str] = None,
        fp16: bool = False,
        max_tokens: int = 4000,
        max_sentences: Optional[int] = None,
        threads: Optional[int] = None,
        compute_type: Optional[str] = None,
        record: Optional[dict] = None,
    ) -> "Translator":
        """Load ``checkpoint`` (a checkpoint, or a folder written by ``hltmt-export``) once.

        The options every engine shares are checked here first (:func:`arguments.load_options`:
        ``max_tokens`` / ``max_sentences``, the batch limits; ``threads``, at most
        :func:`arguments.max_threads`; ``fp16``), then the engine's :meth:`_load` gets them with
        the rest: ``spm``, ``data``, ``device``, ``compute_type`` (CTranslate2's) and ``record``
        (an export folder's manifest when it has been read). See
        :meth:`~hltmt_plugin.hub.translator.HltmtTranslator._load`."""
        options = arguments.load_options(max_tokens, max_sentences, threads, fp16)
        translator = cls._load(
            checkpoint, spm, data, device=device, compute_type=compute_type, record=record, **options
        )
        if options["fp16"] and translator.device_type() == "cpu":  # the same on every engine
            raise HltmtConfigError(
                "fp16 (--fp16) is half precision on a GPU: this model would run on the CPU; leave it out, or give "
                "device cuda (--device cuda)"
            )
        return translator

    def device_type(self) -> str:
        """Where the loaded model runs: ``"cpu"`` or ``"cuda"`` (each engine keeps its ``device``:
        torch's, or CTranslate2's name)."""
        device = getattr(self, "device", "cpu")
        return getattr(device, "type", str(device).split(":")[0])

    @classmethod
    def _load(cls, checkpoint, spm, data, *, device, compute_type, record, max_tokens, max_sentences, threads, fp16):
        """The engine's load, with the shared options checked (:meth:`load`)."""
        raise NotImplementedError

    def routing(self, src: str, tgt: str) -> Dict[str, object]:
        raise NotImplementedError

    def direction(self, src: str, tgt: str) -> str:
        """Whether the model serves ``src -> tgt`` as a direction it was trained on
        (``"trained"``), only when asked (``"zero-shot"``) or not at all (``"refused"``); see
        :mod:`hltmt_plugin.directions`. An unknown language is an error."""
        self.routing(src, tgt)
        return self.directions.kind(src, tgt) if self.directions is not None else TRAINED

    def _tokens(self, texts: List[str]):
        """Each text's ids with end of sentence, in order."""
        raise NotImplementedError

    def _prepared(self, index: int, src: str, tgt: str, tokens):
        """What :meth:`_translate_prepared` needs of the item ``index``, admitted and of a length that fits."""
        raise NotImplementedError

    def _translate_prepared(
        self, prepared: list, results: List[Translation], search, max_tokens, max_sentences, progress
    ):
        raise NotImplementedError

    def _seeded(self, seed: int):
        """A context in which the engine's random draws start from ``seed``: torch's generators,
        seeded, and given back as they were after it."""
        import torch

        stack = contextlib.ExitStack()
        stack.enter_context(torch.random.fork_rng(devices=list(range(torch.cuda.device_count()))))
        torch.manual_seed(seed)
        return stack

    @contextlib.contextmanager
    def _seeded_call(self, seed: Optional[int]):
        """The context of a call's search: with a ``seed``, the engine's :meth:`_seeded`, one
        seeded call at a time in the process (the generators are the process's: two seeded calls
        in two threads at once would draw from each other's seed); the turn is given back however
        the call ends, also when the engine's :meth:`_seeded` refuses it."""
        if seed is None:
            yield
            return
        with SEEDED_CALLS, self._seeded(seed):
            yield

    def _prepare_items(self, items, first_line: int, zero_shot: bool = False) -> Tuple[List[Translation], list]:
        """A :class:`Translation` per item (with its error if it cannot be translated: the
        refusals of this module), and what :meth:`_prepared` keeps of the items that can."""
        results, admitted = admit_items(
            items,
            first_line,
            lambda src, tgt, text: admit(text, src, tgt, self.routing, self.directions, zero_shot),
        )
        prepared = []
        for (index, src, tgt, _), tokens in zip(admitted, self._tokens([text for *_, text in admitted])):
            try:
                check_length(len(tokens), self.max_source_positions)
            except HltmtInputError as error:
                refuse(results[index], error)
                continue
            prepared.append(self._prepared(index, src, tgt, tokens))
        return results, prepared

    # ---- translation -------------------------------------------------------------------
    def translate(self, texts: Sequence[str], src: str, tgt: str, **kwargs):
        """Translate ``texts`` from ``src`` into ``tgt``; same options as :meth:`translate_batch`."""
        return self.translate_batch(arguments.one_direction(texts, src, tgt), **kwargs)

    def translate_batch(
        self,
        items: Sequence[Tuple[str, str, str]],
        *,
        details: bool = False,
        errors: str = "raise",
        max_tokens: Optional[int] = None,
        max_sentences: Optional[int] = None,
        first_line: int = 1,
        progress: Optional[Callable[[int], None]] = None,
        zero_shot: bool = False,
        **search,
    ) -> list:
        """Translate ``(src, tgt, text)`` items of any directions together, in input order.

        Args:
            search: the search options, the fields of :class:`~hltmt_plugin.hub.decoding.Search`
                (each its default when not given):
            beam: beam size (with ``sampling``: how many samples are drawn); lenpen: length
                penalty; max_len: the most tokens of a translation (fairseq's ``--max-len-b``
                with ``--max-len-a 0``).
            nbest: how many hypotheses come back, best first (at most ``beam``): each
                sentence's list of texts, or with ``details`` each Translation's
                ``hypotheses`` (text, score, tokens).
            sampling: draw the hypotheses at random, token by token, instead of beam search;
                with it ``sampling_topk`` (from the k most likely tokens) or ``sampling_topp``
                (from the fewest whose probability reaches p), ``temperature`` and ``seed``
                (the same samples every call; None: not seeded). See
                :class:`~hltmt_plugin.hub.arguments.Search`.
            no_repeat_ngram_size: no n-gram of this size twice in a translation (0: off).
            min_len: no end of sentence before this many tokens (1 to ``max_len``; 1: none at the
                first step, fairseq's ``--min-len``); ``min_len=max_len`` gives every translation
                exactly ``max_len`` tokens on every engine (the same work, for a benchmark).
            details: return :class:`Translation` objects (text, score, routing, error) instead
                of strings.
            errors: ``"raise"``: if any sentence fails, raise :class:`TranslationErrors` (one
                line naming the failed lines; the others are translated and in ``.results``);
                ``"keep"``: return them as ``None`` (with ``details``, a Translation whose
                ``error`` says why).
            first_line: the line number of the first item, for messages.
            progress: called with the number of sentences finished after each batch.
            zero_shot: also translate the directions the model was not trained on whose
                languages it saw in others (:mod:`hltmt_plugin.directions`; each result's
                ``zero_shot`` says which); without it they fail like any bad sentence.

        Every argument is checked first, as the command line checks its options
        (:mod:`hltmt_plugin.hub.arguments`): a bad one is one :class:`HltmtConfigError` or
        :class:`HltmtInputError` (both ``ValueError``) naming it, before any search. A text
        holding a NUL character or a lone surrogate fails alone, like an empty one.
        """
        items, search, max_tokens, max_sentences = arguments.translate_batch(
            items, search, errors, max_tokens, max_sentences, first_line, progress
        )
        search = arguments.model_bounds(search, len(self.dictionary), self.max_target_positions)
        search = arguments.engine_bounds(search, self.search_limits, self.engine_label())
        results, prepared = self._prepare_items(items, first_line, arguments.flag("zero_shot", zero_shot))
        failed_early = len(items) - len(prepared)
        if progress is not None and failed_early:
            progress(failed_early)
        if prepared:
            with self._seeded_call(search.seed):
                self._translate_prepared(
                    prepared,
                    results,
                    search,
                    max_tokens or self.max_tokens,
                    max_sentences or self.max_sentences,
                    progress,
                )
        return outcome(results, details, errors, search.nbest)


class ExportedTranslator(Translator):
    """What the engines of an export folder share (CTranslate2's, transformers'): the folder's
    languages and directions, the refusals, the call's preparation (every line tokenized in one
    call), its batches by the model that serves them, the progress and the outcome.

    An engine says how a source is given to its models (:meth:`source`), which model (and forced
    first token) serves a target (:meth:`batch_key`), and runs one batch (:meth:`_run`), filling
    each result's text, tokens and score."""

    engine = ""
    engine_name = ""  # as a message names it

    @classmethod
    def load_arguments(cls, folder, spm, data, record) -> Tuple[str, dict]:
        """``_load``'s arguments every export engine checks (the contract checked the shared ones):
        ``(folder, the folder's manifest)``, the manifest read and checked
        (:func:`~hltmt_plugin.hub.manifest.read`) unless given; one HltmtConfigError for ``spm`` /
        ``data`` (an export carries its own) or an export for another engine."""
        from hltmt_plugin.hub.manifest import read as read_manifest

        folder = os.fspath(folder)
        if spm is not None or data is not None:
            raise HltmtConfigError(
                f"{folder} is an exported model: it carries its own sentencepiece model and "
                "dictionary (leave out --spm / --data)"
            )
        record = read_manifest(folder) if record is None else record
        if record["engine"] != cls.engine:
            raise HltmtConfigError(
                f"{folder} is an export for {record['engine']!r:.40}, not {cls.engine_name}: load it with that library"
            )
        return folder, record

    def __init__(
        self, folder: str, record: dict, models: Dict[str, object], dictionary, pieces, max_tokens, max_sentences
    ):
        self.folder, self.record, self.models = folder, record, models
        self.dictionary, self.pieces = dictionary, pieces
        self.max_tokens, self.max_sentences = max_tokens, max_sentences
        self.langs = list(record["langs"])
        self.checkpoint = folder
        self.max_source_positions = record["max_source_positions"]
        self.max_target_positions = record["max_target_positions"]
        self.lang_ids = {lang: dictionary.index(tok) for lang, tok in record["language_tokens"].items()}
        pairs = record["lang_pairs"]
        self.directions = TrainedDirections(pairs, marked=marks_target(record)) if pairs else None

    # ---- routing and input checks ------------------------------------------------------
    def routing(self, src: str, tgt: str) -> Dict[str, object]:
        """How ``src -> tgt`` is routed (``{"slp": "m<k>" | "universal"}`` for a pool model, ``{}``
        otherwise); an error naming an unknown language."""
        check_languages(self.langs, src, tgt)
        return {"slp": self.record["targets"][tgt]} if self.record["routes"] and self.record["routing_map"] else {}

    def encode(self, texts: Sequence[str]) -> List[List[int]]:
        """The ids of each text's pieces with end of sentence (as the checkpoint's translator
        binarizes them), the texts tokenized in one call."""
        return [self.dictionary.ids(pieces) for pieces in self.pieces.encode(texts)]

    def language_first(self, src: str, tgt: str, ids: List[int]) -> List[int]:
        """``ids`` after the language token ``--encoder-langtok`` puts first (if any)."""
        side = self.record["encoder_langtok"]
        return ([self.lang_ids[tgt if side == "tgt" else src]] if side is not None else []) + ids

    def source(self, src: str, tgt: str, ids: List[int]):
        """A source as the engine's models take it."""
        return self.language_first(src, tgt, ids)

    def batch_key(self, tgt: str):
        """What a batch holding a sentence into ``tgt`` shares: its model (the group serving ``tgt``)."""
        return self.record["targets"][tgt]

    def _run(self, key, batch, results: List[Translation], search) -> None:
        raise NotImplementedError

    # ---- translation -------------------------------------------------------------------
    def _tokens(self, texts: List[str]) -> List[List[int]]:
        return self.encode(texts)  # the call's lines tokenized in one call

    def _prepared(self, index: int, src: str, tgt: str, tokens: List[int]):
        return index, self.source(src, tgt, tokens)

    def _translate_prepared(self, prepared, results: List[Translation], search, max_tokens, max_sentences, progress):
        """The ``(index, source)`` rows by the model that serves them, in batches."""
        by_key: Dict[object, list] = {}
        for index, source in prepared:
            by_key.setdefault(self.batch_key(results[index].tgt), []).append((index, source))
        for key, rows in sorted(by_key.items()):
            for batch in batches(rows, max_tokens, max_sentences):
                self._run(key, batch, results, search)
                if progress is not None:
                    progress(len(batch))
