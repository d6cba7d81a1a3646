"""Serving an exported model (``hltmt-export --to ctranslate2``) with the translator's contract:
:meth:`HltmtTranslator.load` of an export folder returns a :class:`Ct2Translator`, which has
the same ``translate`` / ``translate_batch`` / ``routing`` and the same refusals.

The folder is checked on load (:func:`hltmt_plugin.export.manifest.read`: fields, languages,
every file's SHA-256). Each sentence is prepared as the checkpoint's translator prepares it:
the sentencepiece pieces of the line binarized with the model's dictionary plus end of
sentence, the language token that ``--encoder-langtok`` puts first on the source, with
``--decoder-langtok`` the target-language token forced as the first target token and left out
of the text. The sentences go to the CTranslate2 model of their target language (the routing
map's pool module, the universal layer, or the one model), sorted by length and batched by
tokens; results come back in input order. Beam search is CTranslate2's: the scores are
fairseq's (sum of the token log-probabilities, end of sentence included, over the length to
the power ``lenpen``, in base 2).
"""

import math
import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from hltmt_plugin.directions import TRAINED, ZERO_SHOT, TrainedDirections
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.export.manifest import apply_patch, read as read_manifest
from hltmt_plugin.hub import arguments
from hltmt_plugin.hub.results import Translation, TranslationErrors

COMPUTE_TYPES = (
    "default",
    "auto",
    "float32",
    "int8",
    "int8_float32",
    "int8_float16",
    "int8_bfloat16",
    "int16",
    "float16",
    "bfloat16",
)
INSTALL = 'pip install "ctranslate2>=4.5" (or pip install -e ".[ctranslate2]")'


def _ctranslate2():
    try:
        import ctranslate2
    except ImportError:
        raise HltmtConfigError(f"this is an exported model and CTranslate2 is not installed: {INSTALL}") from None
    return ctranslate2


class Ct2Translator:
    """An export folder's CTranslate2 models, serving any of its directions, mixed in one call."""

    engine = "ctranslate2"

    def __init__(
        self,
        folder: str,
        record: dict,
        models: Dict[str, object],
        dictionary,
        bpe,
        max_tokens: int = 4000,
        max_sentences: Optional[int] = None,
    ):
        self.folder, self.record, self.models = folder, record, models
        self.dictionary, self.bpe = dictionary, bpe
        self.max_tokens, self.max_sentences = max_tokens, max_sentences
        self.langs = list(record["langs"])
        self.checkpoint = folder
        self.spm = os.path.join(folder, "spm.model")
        self.max_source_positions = record["max_source_positions"]
        self.max_target_positions = record["max_target_positions"]
        self.symbols = ["<blank>" if i == dictionary.pad() else s for i, s in enumerate(dictionary.symbols)]
        self.lang_ids = {lang: dictionary.index(tok) for lang, tok in record["language_tokens"].items()}
        pairs = record["lang_pairs"]
        self.directions = TrainedDirections(pairs) if pairs else None
        self.strip = {dictionary.eos()} | (set(self.lang_ids.values()) if record["decoder_langtok"] else set())

    @classmethod
    def load(
        cls,
        folder: str,
        spm: Optional[str] = None,
        data: Optional[str] = None,
        device: Optional[str] = None,
        compute_type: str = "default",
        threads: Optional[int] = None,
        max_tokens: int = 4000,
        max_sentences: Optional[int] = None,
        fp16: bool = False,
    ) -> "Ct2Translator":
        """Load the export ``folder`` (checked first). ``device``: cpu (default) or cuda;
        ``compute_type``: CTranslate2's (``default``: the exported weights' type); ``threads``:
        CTranslate2's threads per translation (default: $OMP_NUM_THREADS, else its own choice);
        ``fp16``: ``compute_type="float16"`` (GPU)."""
        from fairseq.data import Dictionary
        from fairseq.data.encoders.sentencepiece_bpe import SentencepieceBPE, SentencepieceConfig

        folder = os.fspath(folder)
        if spm is not None or data is not None:
            raise HltmtConfigError(
                f"{folder} is an exported model: it carries its own sentencepiece model and "
                "dictionary (leave out --spm / --data)"
            )
        max_tokens = arguments.positive_int("max_tokens", max_tokens)
        max_sentences = arguments.positive_int("max_sentences", max_sentences, optional=True)
        if compute_type not in COMPUTE_TYPES:
            raise HltmtConfigError(f"compute type {compute_type!r:.40}: choose one of {', '.join(COMPUTE_TYPES)}")
        threads = arguments.positive_int("threads", threads if threads is not None else _omp_threads(), optional=True)
        device = _device(device)
        if fp16:
            compute_type = "float16"
        record = read_manifest(folder)
        ct2 = _ctranslate2()
        dictionary = Dictionary.load(os.path.join(folder, "dict.txt"))
        bpe = SentencepieceBPE(SentencepieceConfig(sentencepiece_model=os.path.join(folder, "spm.model")))
        models = {}
        for group, path in record["models"].items():
            try:
                models[group] = ct2.Translator(
                    os.path.join(folder, path),
                    device=device,
                    compute_type=compute_type,
                    inter_threads=1,
                    intra_threads=threads or 0,
                    files=_patched_files(folder, record, group),
                )
            except (RuntimeError, ValueError) as error:
                if isinstance(error, HltmtInputError):
                    raise
                raise HltmtInputError(
                    f"CTranslate2 cannot load {os.path.join(folder, path)}: "
                    f"{str(error).splitlines()[0] if str(error) else type(error).__name__}"
                ) from None
        return cls(folder, record, models, dictionary, bpe, max_tokens=max_tokens, max_sentences=max_sentences)

    # ---- routing and input checks ------------------------------------------------------
    def routing(self, src: str, tgt: str) -> Dict[str, object]:
        """How ``src -> tgt`` is routed (``{"slp": "m<k>" | "universal"}`` for a pool model, ``{}``
        otherwise); an error naming an unknown language."""
        unknown = [lang for lang in (src, tgt) if not isinstance(lang, str) or lang not in self.langs]
        if unknown:
            raise HltmtInputError(f"unknown language {unknown[0]!r} (this model knows {','.join(self.langs)})")
        return {"slp": self.record["targets"][tgt]} if self.record["routes"] and self.record["routing_map"] else {}

    def encode(self, text: str):
        """The binarized pieces of ``text`` with end of sentence."""
        return self.dictionary.encode_line(self.bpe.encode(text), add_if_not_exist=False, append_eos=True).long()

    def direction(self, src: str, tgt: str) -> str:
        """``"trained"``, ``"zero-shot"`` or ``"refused"`` (:mod:`hltmt_plugin.directions`)."""
        self.routing(src, tgt)
        return self.directions.kind(src, tgt) if self.directions is not None else TRAINED

    def _source(self, src: str, tgt: str, text: str, zero_shot: bool) -> Tuple[List[str], Dict[str, object], str]:
        if not isinstance(text, str):
            raise HltmtInputError(f"expected text, got {type(text).__name__}")
        routing = self.routing(src, tgt)
        kind = self.directions.check(src, tgt, zero_shot) if self.directions is not None else TRAINED
        arguments.check_text(text)
        if not text.strip():
            raise HltmtInputError("empty line: nothing to translate")
        ids = self.encode(text).tolist()
        length = len(ids) + 1  # with the target-language token
        if length > self.max_source_positions:
            raise HltmtInputError(
                f"{length} tokens (pieces, language token and end of sentence), more than the model's "
                f"{self.max_source_positions} source positions: split the line into sentences"
            )
        side = self.record["encoder_langtok"]
        if side is not None:
            ids = [self.lang_ids[tgt if side == "tgt" else src]] + ids
        return [self.symbols[i] for i in ids], routing, kind

    # ---- translation -------------------------------------------------------------------
    def translate(self, texts: Sequence[str], src: str, tgt: str, **kwargs):
        """Translate ``texts`` from ``src`` into ``tgt``; same options as :meth:`translate_batch`."""
        return self.translate_batch(arguments.one_direction(texts, src, tgt), **kwargs)

    def translate_batch(
        self,
        items,
        beam: int = 5,
        lenpen: float = 1.0,
        max_len: int = 200,
        details: bool = False,
        errors: str = "raise",
        max_tokens: Optional[int] = None,
        max_sentences: Optional[int] = None,
        first_line: int = 1,
        progress: Optional[Callable[[int], None]] = None,
        zero_shot: bool = False,
    ) -> list:
        """As :meth:`HltmtTranslator.translate_batch`: ``(src, tgt, text)`` items of any
        directions, results in input order, each failed sentence reported with its line."""
        items, search, max_tokens, max_sentences = arguments.translate_batch(
            items, beam, lenpen, max_len, errors, max_tokens, max_sentences, first_line, progress
        )
        results, prepared = self._prepare_items(items, first_line, arguments.flag("zero_shot", zero_shot))
        if progress is not None and len(items) - len(prepared):
            progress(len(items) - len(prepared))
        by_group: Dict[str, list] = {}
        for index, tokens in prepared:
            by_group.setdefault(self.record["targets"][results[index].tgt], []).append((index, tokens))
        for group, rows in by_group.items():
            for batch in _batches(rows, max_tokens or self.max_tokens, max_sentences or self.max_sentences):
                self._run(self.models[group], batch, results, search)
                if progress is not None:
                    progress(len(batch))
        return _outcome(results, details, errors)

    def _prepare_items(self, items, first_line: int, zero_shot: bool):
        results: List[Translation] = []
        prepared = []
        for i, item in enumerate(items):
            try:
                if not (isinstance(item, (tuple, list)) and len(item) == 3):
                    raise HltmtInputError(f"expected (src, tgt, text), got {item!r:.80}")
                src, tgt, text = item
                results.append(Translation(first_line + i, src, tgt, text))
                tokens, routing, kind = self._source(src, tgt, text, zero_shot)
                results[-1].routing, results[-1].zero_shot = routing, kind == ZERO_SHOT
                prepared.append((i, tokens))
            except HltmtInputError as error:
                if len(results) == i:
                    results.append(Translation(first_line + i, "", "", ""))
                results[-1].error = str(error)
        return results, prepared

    def _run(self, model, batch, results: List[Translation], search) -> None:
        """Beam search on one batch (CTranslate2's, all the beam's hypotheses returned), the best
        by fairseq's score (:func:`_best`)."""
        beam, lenpen, max_len = search
        prefix = None
        if self.record["decoder_langtok"]:
            prefix = [[self.record["language_tokens"][results[index].tgt]] for index, _ in batch]
        sources = [tokens for _, tokens in batch]
        outputs = model.translate_batch(
            sources,
            target_prefix=prefix,
            beam_size=beam,
            length_penalty=lenpen,
            max_input_length=0,
            max_decoding_length=max_len,
            return_scores=True,
            num_hypotheses=beam,
            min_decoding_length=0 if prefix else 1,
        )  # fairseq: no end of sentence at the first step only
        # CTranslate2 leaves a forced prefix's log-probability out of the scores; fairseq counts it
        forced = [s.log_probs[0] for s in model.score_batch(sources, prefix)] if prefix else [0.0] * len(batch)
        for k, ((index, _), output) in enumerate(zip(batch, outputs)):
            tokens, score = _best(model, sources[k], output, max_len, lenpen, forced[k])
            ids = [self.dictionary.index(t if t != "<blank>" else self.dictionary.pad_word) for t in tokens]
            result = results[index]
            result.text = self.bpe.decode(self.dictionary.string(_tensor(ids), extra_symbols_to_ignore=self.strip))
            result.tokens = len(ids) + 1  # end of sentence included
            result.score = score / math.log(2)  # both divide by the length with end of sentence


def _best(model, source: List[str], output, max_len: int, lenpen: float, forced: float) -> Tuple[List[str], float]:
    """The hypothesis fairseq's beam search returns, and its score. The beam's finished
    hypotheses are the same; fairseq's choice among them counts two log-probabilities that
    CTranslate2's scores leave out: the forced target prefix's (``forced``) and, for a
    hypothesis cut at ``max_len``, the end of sentence fairseq forces there (such hypotheses
    are scored again with it, by CTranslate2's ``score_batch``)."""
    hypotheses = list(output.hypotheses)
    scores = [
        (float(x) * (len(h) + 1) ** lenpen + forced) / (len(h) + 1) ** lenpen for h, x in zip(hypotheses, output.scores)
    ]
    cut = [i for i, h in enumerate(hypotheses) if len(h) >= max_len]
    if cut:
        for i, scored in zip(cut, model.score_batch([source] * len(cut), [hypotheses[i] for i in cut])):
            scores[i] = sum(scored.log_probs) / (len(scored.log_probs) ** lenpen)
    best = max(range(len(hypotheses)), key=lambda i: (scores[i], -i))
    return hypotheses[best], scores[best]


def _patched_files(folder: str, record: dict, group: str) -> Optional[Dict[str, bytes]]:
    """The files of a group stored as a patch of another group's model.bin, rebuilt in memory
    (None for a group stored whole: CTranslate2 reads its folder)."""
    base = record["patches"].get(group)
    if base is None:
        return None
    where = os.path.join(folder, record["models"][group])
    files = {}
    for name in os.listdir(where):
        if name != "model.patch":
            with open(os.path.join(where, name), "rb") as f:
                files[name] = f.read()
    with (
        open(os.path.join(folder, record["models"][base], "model.bin"), "rb") as f,
        open(os.path.join(where, "model.patch"), "rb") as p,
    ):
        files["model.bin"] = apply_patch(f.read(), p.read(), os.path.join(where, "model.patch"))
    return files


def _tensor(ids):
    import torch

    return torch.tensor(ids, dtype=torch.long)


def _batches(rows, max_tokens: int, max_sentences: Optional[int]):
    """Rows sorted by length, cut into batches of at most ``max_tokens`` (padded) source tokens
    and ``max_sentences`` sentences; a longer row is a batch of its own."""
    rows = sorted(rows, key=lambda row: len(row[1]))
    batch: list = []
    for row in rows:
        size = max(len(row[1]), max((len(r[1]) for r in batch), default=0))
        if batch and (size * (len(batch) + 1) > max_tokens or (max_sentences and len(batch) >= max_sentences)):
            yield batch
            batch = []
        batch.append(row)
    if batch:
        yield batch


def _outcome(results: List[Translation], details: bool, errors: str) -> list:
    failed = [r for r in results if r.error is not None]
    out = results if details else [r.text for r in results]
    if failed and errors == "raise":
        shown = "; ".join(f"line {r.line}: {r.error}" for r in failed[:5])
        more = f"; and {len(failed) - 5} more" if len(failed) > 5 else ""
        raise TranslationErrors(
            f"{len(failed)} of {len(results)} sentence(s) not translated: {shown}{more}", out, failed
        )
    return out


def _omp_threads() -> Optional[int]:
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def _device(device: Optional[str]) -> str:
    if device is None or device == "cpu":
        return "cpu"
    if device in ("cuda", "cuda:0"):
        return "cuda"
    raise HltmtConfigError(f"device {device!r:.60}: an exported model runs on cpu or cuda")
