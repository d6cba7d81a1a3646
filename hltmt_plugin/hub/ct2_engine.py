"""Serving an exported model (``hltmt-export``) with the translator's contract, with neither torch
nor fairseq: :meth:`HltmtTranslator.load` of an export folder returns a :class:`Ct2Translator`,
which has the same ``translate`` / ``translate_batch`` / ``routing`` / ``direction`` and the
same refusals (:mod:`hltmt_plugin.hub.contract`).

The folder is checked on load (:func:`hltmt_plugin.hub.manifest.read`: fields, languages,
every file's SHA-256). A call's sentences are prepared as the checkpoint's translator prepares
them (:mod:`hltmt_plugin.hub.vocabulary`): the sentencepiece pieces of all its lines in one
call, binarized with the model's dictionary plus end of sentence, the language token that
``--encoder-langtok`` puts first on the source, with ``--decoder-langtok`` the target-language
token forced as the first target token and left out of the text. The sentences go to the
CTranslate2 model of their target language (the routing map's pool module, the universal layer,
or the one model), sorted by length and cut into the call's batches (``max_tokens``,
``max_sentences``), which CTranslate2 sorts and cuts again into batches of at most
:data:`ENGINE_BATCH_TOKENS` tokens; results come back in input order. Beam search is
CTranslate2's; the translation and its score are fairseq's (:func:`_scores`: the sum of the token
log-probabilities, end of sentence included, over the length to the power ``lenpen``, in base 2),
and so are the ``nbest`` best. The other search options are CTranslate2's own (:func:`decoding`):
sampling draws ``beam`` samples (``num_hypotheses``, a beam of 1) with ``sampling_topk`` (the
whole vocabulary without it), ``sampling_topp``, ``sampling_temperature``, seeded by
``set_random_seed``; ``no_repeat_ngram_size``; ``min_len`` (its entry in :mod:`hltmt_plugin.hub.decoding`).

Where it runs (:func:`engine_options`, :func:`check_machine`): ``device`` cpu, cuda or cuda:N
(default: cuda when CTranslate2 sees one, else cpu), ``compute_type`` CTranslate2's
(``float16`` and ``int8_float16`` on a GPU; ``int8`` on the CPU), ``threads`` per translation.
"""

import contextlib
import math
import os
import re
from typing import Dict, List, Optional

from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.hub import arguments, contract
from hltmt_plugin.hub.decoding import engine_arguments
from hltmt_plugin.hub.patches import apply_patch
from hltmt_plugin.hub.results import Translation
from hltmt_plugin.hub.vocabulary import Dictionary, Pieces

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
# CTranslate2's own batches (sorted by length, at most this many source tokens): on the study's
# HLT-MT at one CPU thread, 240 sentences in 2.0 CPU seconds against 2.6 in batches of up to 4,000
# (256 to 1,024 within 3% of each other)
ENGINE_BATCH_TOKENS = 512
BLANK = "<blank>"  # CTranslate2's name of the padding symbol


def engine_options(device: Optional[str], compute_type: Optional[str], threads, fp16: bool = False) -> dict:
    """The keyword arguments of ``ctranslate2.Translator`` for these options, checked (one
    HltmtConfigError naming the option); the machine is asked later (:func:`check_machine`).
    ``device`` None is ``auto`` (cuda when there is one); ``threads`` None is
    ``$OMP_NUM_THREADS``, else CTranslate2's choice; ``fp16`` is ``compute_type="float16"``."""
    compute_type = "default" if compute_type is None else compute_type
    if compute_type not in COMPUTE_TYPES:
        raise HltmtConfigError(f"compute type {compute_type!r:.40}: choose one of {', '.join(COMPUTE_TYPES)}")
    if fp16:
        compute_type = "float16"
    threads = arguments.threads(threads if threads is not None else _omp_threads())
    found = re.fullmatch(r"(cpu|cuda)(?::(\d{1,3}))?", device or "auto")
    if device is not None and (found is None or (found.group(1) == "cpu" and found.group(2))):
        raise HltmtConfigError(f"device {device!r:.60}: an exported model runs on cpu, cuda or cuda:N")
    return {
        "device": found.group(1) if found else "auto",
        "device_index": int(found.group(2) or 0) if found else 0,
        "compute_type": compute_type,
        "inter_threads": 1,
        "intra_threads": threads or 0,
    }


def check_machine(ct2, options: dict) -> dict:
    """``options`` with ``auto`` resolved, refused in one line when this machine cannot run them:
    a CUDA device CTranslate2 does not see, a compute type it cannot run on the device."""
    options = dict(options)
    count = ct2.get_cuda_device_count()
    if options["device"] == "auto":
        options["device"] = "cuda" if count > 0 else "cpu"
    device, index, compute_type = options["device"], options["device_index"], options["compute_type"]
    name = f"cuda:{index}" if device == "cuda" and index else device
    if device == "cuda" and index >= count:
        raise HltmtConfigError(f"device {name} is not available here (CTranslate2 sees {count} CUDA device(s))")
    if compute_type not in ("default", "auto"):
        supported = sorted(ct2.get_supported_compute_types(device, index))
        if compute_type not in supported:
            hint = "; float16 and int8_float16 run on a GPU (--device cuda)" if device == "cpu" else ""
            raise HltmtConfigError(
                f"compute type {compute_type} does not run on {name} here: CTranslate2 runs "
                f"{', '.join(supported)} there{hint}"
            )
    return options


def decoding(search: arguments.Search, prefix: bool = False) -> dict:
    """CTranslate2's ``translate_batch`` options of a call's checked search, from the options'
    declarations (:func:`hltmt_plugin.hub.decoding.engine_arguments`): a beam search returning
    its whole beam, or ``beam`` samples; ``prefix``: a target-language token is forced first."""
    return engine_arguments(search, "ctranslate2", prefix=prefix)


class Ct2Translator(contract.ExportedTranslator):
    """An export folder's CTranslate2 models, serving any of its directions, mixed in one call."""

    engine = "ctranslate2"

    def __init__(
        self,
        folder: str,
        record: dict,
        models: Dict[str, object],
        dictionary: Dictionary,
        pieces: Pieces,
        max_tokens: int = 4000,
        max_sentences: Optional[int] = None,
        options: Optional[dict] = None,
    ):
        super().__init__(folder, record, models, dictionary, pieces, max_tokens, max_sentences)
        self.options = options or {}
        self.device = self.options.get("device", "cpu")
        self.spm = os.path.join(folder, "spm.model")
        self.symbols = [BLANK if i == dictionary.pad_index else s for i, s in enumerate(dictionary.symbols)]
        self.leave_out = {dictionary.eos_index, dictionary.bos_index} | (
            set(self.lang_ids.values()) if record["decoder_langtok"] else set()
        )

    @classmethod
    def _load(cls, folder, spm, data, *, device, compute_type, record, max_tokens, max_sentences, threads, fp16):
        """Load the export ``folder`` (checked first), the shared options checked by the contract
        (:meth:`~hltmt_plugin.hub.contract.Translator.load`). ``device``: cpu, cuda or cuda:N
        (default: cuda when CTranslate2 sees one, else cpu); ``compute_type``: CTranslate2's
        (default: the exported weights' type); ``threads``: CTranslate2's threads per translation
        (default: $OMP_NUM_THREADS, else its own choice); ``fp16``: ``compute_type="float16"``
        (GPU); ``record``: the folder's manifest when it has been read
        (:func:`~hltmt_plugin.hub.manifest.read`)."""
        options = engine_options(device, compute_type, threads, fp16)
        folder, record = cls.load_arguments(folder, spm, data, record)
        ct2 = contract.import_ctranslate2("this is an exported model and ")
        options = check_machine(ct2, options)
        dictionary = Dictionary.load(os.path.join(folder, "dict.txt"))
        pieces = Pieces(os.path.join(folder, "spm.model"))
        models = {group: _load_model(ct2, folder, record, group, options) for group in record["models"]}
        return cls(folder, record, models, dictionary, pieces, max_tokens, max_sentences, options)

    def source(self, src: str, tgt: str, ids: List[int]) -> List[str]:
        """The CTranslate2 tokens of a source: the language token ``--encoder-langtok`` puts
        first, then ``ids``."""
        return [self.symbols[i] for i in self.language_first(src, tgt, ids)]

    def _seeded(self, seed: int):
        """CTranslate2's random generators seeded: each worker thread seeds its own when it first
        draws, so the models are loaded again (new workers) after ``set_random_seed``, from the
        folder checked again; there is no state to give back."""
        from hltmt_plugin.hub.manifest import read as read_manifest

        if read_manifest(self.folder) != self.record:
            raise HltmtInputError(f"{self.folder} has changed since it was loaded: load it again")
        ct2 = contract.import_ctranslate2()
        ct2.set_random_seed(seed)
        self.models = {group: _load_model(ct2, self.folder, self.record, group, self.options) for group in self.models}
        return contextlib.nullcontext()

    def _run(self, group: str, batch, results: List[Translation], search) -> None:
        """Beam search or sampling on one batch (CTranslate2's, all the beam's hypotheses
        returned), the ``nbest`` best by fairseq's score (:func:`_scores`)."""
        prefix = None
        if self.record["decoder_langtok"]:
            prefix = [[self.record["language_tokens"][results[index].tgt]] for index, _ in batch]
        sources = [tokens for _, tokens in batch]
        model = self.models[group]
        outputs = model.translate_batch(
            sources,
            target_prefix=prefix,
            max_input_length=0,
            return_scores=True,
            **decoding(search, prefix is not None),
            max_batch_size=ENGINE_BATCH_TOKENS,
            batch_type="tokens",
        )
        index_of, pad = self.dictionary.index, self.dictionary.pad_word
        scores = _scores(model, sources, prefix, outputs, search.max_len, search.lenpen)
        for k, ((index, _), output) in enumerate(zip(batch, outputs)):
            hypotheses = []
            for tokens, score in zip(output.hypotheses, scores[k]):
                ids = [index_of(t if t != BLANK else pad) for t in tokens]
                # end of sentence counted in the tokens; both scores divide by the length with it
                hypotheses.append((self.dictionary.text(ids, self.leave_out), score / math.log(2), len(ids) + 1))
            contract.ranked(results[index], hypotheses, search.nbest)


def _load_model(ct2, folder: str, record: dict, group: str, options: dict):
    """The CTranslate2 model of ``group`` (a patched one rebuilt in memory, and released once
    CTranslate2 has loaded it: the groups are loaded one at a time, so at most one rebuilt
    model.bin is held beside the loaded models); one line if CTranslate2 cannot load it.
    CTranslate2 shares no weights between two models: each group holds all its weights
    (docs/deploying.md: int8 for a pool model)."""
    path = os.path.join(folder, record["models"][group])
    try:
        return ct2.Translator(path, files=_patched_files(folder, record, group), **options)
    except (RuntimeError, ValueError) as error:
        if isinstance(error, HltmtInputError):
            raise
        raise HltmtInputError(
            f"CTranslate2 cannot load {path}: {str(error).splitlines()[0] if str(error) else type(error).__name__}"
        ) from None


def _scores(model, sources: List[List[str]], prefix, outputs, max_len: int, lenpen: float) -> List[List[float]]:
    """fairseq's score of each hypothesis of each of ``outputs`` (natural log). The beam's
    finished hypotheses are the same; fairseq's scores of them count two log-probabilities that
    CTranslate2's scores leave out: the forced target prefix's (``prefix``, one token per
    sentence, or None) and, for a hypothesis cut at ``max_len``, the end of sentence fairseq
    forces there. A cut hypothesis is scored again whole, prefix and end of sentence included;
    the prefix alone is scored for the sentences with a hypothesis that ended before
    ``max_len``. Each is one call of CTranslate2's ``score_batch`` over every sentence of the
    batch that needs it, in CTranslate2's batches of :data:`ENGINE_BATCH_TOKENS` tokens."""
    cut = [(k, i, h) for k, output in enumerate(outputs) for i, h in enumerate(output.hypotheses) if len(h) >= max_len]
    ended = [k for k, output in enumerate(outputs) if any(len(h) < max_len for h in output.hypotheses)]
    forced = dict.fromkeys(ended, 0.0)
    if prefix and ended:
        for k, scored in zip(ended, _score(model, [sources[k] for k in ended], [prefix[k] for k in ended])):
            forced[k] = scored.log_probs[0]
    scores = [
        [
            None if len(h) >= max_len else (float(x) * (len(h) + 1) ** lenpen + forced[k]) / (len(h) + 1) ** lenpen
            for h, x in zip(output.hypotheses, output.scores)
        ]
        for k, output in enumerate(outputs)
    ]
    if cut:  # the rest: the cut hypotheses
        for (k, i, _), scored in zip(cut, _score(model, [sources[k] for k, _, _ in cut], [h for _, _, h in cut])):
            scores[k][i] = sum(scored.log_probs) / (len(scored.log_probs) ** lenpen)
    return scores


def _score(model, sources: List[List[str]], targets: List[List[str]]):
    """CTranslate2's ``score_batch`` of these pairs, sorted by length and cut into batches of
    :data:`ENGINE_BATCH_TOKENS` tokens (one batch of all would pad every source to the longest)."""
    return model.score_batch(sources, targets, max_batch_size=ENGINE_BATCH_TOKENS, batch_type="tokens")


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


def _omp_threads() -> Optional[int]:
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) > 0 else None
