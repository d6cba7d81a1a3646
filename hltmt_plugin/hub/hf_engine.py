"""Serving an export to Hugging Face ``transformers`` (``hltmt-export --to transformers``) with
the translator's contract: :meth:`HltmtTranslator.load` of such a folder returns an
:class:`HfTranslator`, with the same ``translate`` / ``translate_batch`` / ``routing`` /
``direction`` and the same refusals (:mod:`hltmt_plugin.hub.contract`).

The folder is checked on load (:func:`hltmt_plugin.hub.manifest.read`), and each model by
transformers' own load report, which must be empty (:func:`load_model`). A pool model's groups
are one model in memory: the first group's is loaded, and each other group whose settings and
weights are that model's but for the decoder's top layer (the pool module: how the export writes
them) adds only that layer, read from its ``model.safetensors`` (:func:`group_layer`); a group
that differs elsewhere is loaded whole. Each sentence is prepared as the checkpoint's translator
prepares it: the sentencepiece pieces of the line as the dictionary's ids plus end of sentence,
the language token ``--encoder-langtok`` puts first. The sentences go to the model of their
target language's group, sorted by length and batched by tokens; with ``--decoder-langtok`` a
batch holds one target language, whose token is forced first.

The search is ``generate``'s with the folder's generation settings (fairseq's) and the call's
search options (:meth:`HfTranslator.generate_options`); the hypotheses are ranked by fairseq's
score, the model's log-probability of every token of a hypothesis and of its end of sentence
(the forced target-language token's and the end of sentence forced at the length limit
included, which ``generate`` counts as 0), computed for the hypotheses whose rank can change in
one pass over them (:meth:`HfTranslator._log_probs`), not kept step by step by ``generate``.
"""

import contextlib
import copy
import logging
import math
import os
import re
import threading
import warnings
from typing import Dict, List, Optional, Sequence, Tuple

from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.hub import contract
from hltmt_plugin.hub.decoding import engine_arguments
from hltmt_plugin.hub.results import Translation
from hltmt_plugin.hub.vocabulary import Dictionary, Pieces

LOGITS_PER_PASS = 2**24  # the most logits one pass of _log_probs holds (64 MiB in float32)
# sentences per batch unless max_sentences says otherwise: generate runs every row of a batch until the
# batch's last hypothesis ends (fairseq and CTranslate2 drop a finished sentence), so a batch of 100
# short lines costs the longest one's steps for all, and holds their beams' caches that long
GENERATE_SENTENCES = 32


class HfTranslator(contract.ExportedTranslator):
    """An export folder's transformers models, serving any of its directions, mixed in one call."""

    engine = "transformers"

    def __init__(self, folder, record, models, dictionary, pieces, device, max_tokens=4000, max_sentences=None):
        super().__init__(folder, record, models, dictionary, pieces, max_tokens, max_sentences)
        self.device = device
        self.spm = os.path.join(folder, "source.spm")
        self.leave_out = {dictionary.eos_index, dictionary.bos_index, dictionary.pad_index} | (
            set(self.lang_ids.values()) if record["decoder_langtok"] else set()
        )

    @classmethod
    def _load(cls, folder, spm, data, *, device, compute_type, record, max_tokens, max_sentences, threads, fp16):
        """Load the export ``folder`` (checked first, unless ``record`` is its manifest just
        read), the shared options checked by the contract
        (:meth:`~hltmt_plugin.hub.contract.Translator.load`). ``device``: cpu (default) or cuda;
        ``threads``: torch's threads (default: torch's choice, ``$OMP_NUM_THREADS`` if set);
        ``fp16``: half precision (GPU); ``max_sentences``: default :data:`GENERATE_SENTENCES`. A
        pool model's groups share one model (the module docstring)."""
        if compute_type is not None:
            raise HltmtConfigError(
                f"compute type {compute_type!r:.40}: --compute-type applies to CTranslate2's exports only; an export "
                "to transformers runs float32 (--fp16 on a GPU)"
            )
        folder, record = cls.load_arguments(folder, spm, data, record)
        transformers = contract.import_transformers("this is an export to transformers and ")
        import torch

        device = _device(torch, device)
        (first, place), *others = record["models"].items()
        base = load_model(transformers, folder, place).eval().to(device)
        base = base.half() if fp16 else base
        models = {first: base}
        for group, other in others:
            layer = group_layer(folder, place, other, base)
            if layer is None:  # not the same model but for the top layer: loaded whole
                model = load_model(transformers, folder, other).eval().to(device)
                models[group] = model.half() if fp16 else model
            else:
                layer = layer.eval().to(device)
                models[group] = with_top_layer(base, layer.half() if fp16 else layer)
        dictionary = Dictionary.load(os.path.join(folder, "dict.txt"))
        pieces = Pieces(os.path.join(folder, "source.spm"))
        mt = cls(folder, record, models, dictionary, pieces, device, max_tokens, max_sentences or GENERATE_SENTENCES)
        mt.threads = threads
        return mt

    def _translate_prepared(self, *args, **kwargs):
        """The contract's batches, with torch's threads set to the translator's ``threads`` for the
        call and given back after it (:func:`torch_threads`): the process keeps its own setting."""
        with torch_threads(getattr(self, "threads", None)):
            return super()._translate_prepared(*args, **kwargs)

    def batch_key(self, tgt: str) -> Tuple[str, str]:
        """The group serving ``tgt`` and, with ``--decoder-langtok``, ``tgt`` itself: its token is
        forced first for the whole batch."""
        return self.record["targets"][tgt], tgt if self.record["decoder_langtok"] else ""

    def generate_options(self, search) -> dict:
        """``generate``'s options for the call's search (:class:`~hltmt_plugin.hub.decoding.Search`,
        fairseq's meaning), from the options' declarations
        (:func:`~hltmt_plugin.hub.decoding.engine_arguments`): ``search.beam`` hypotheses a
        sentence, at most ``search.max_len`` tokens then the end of sentence; beam search with the
        length penalty, or sampling (from the ``sampling_topk`` most likely tokens or the fewest
        reaching ``sampling_topp``, at the ``temperature``); no n-gram of ``no_repeat_ngram_size``
        twice; no end of sentence before ``min_len`` tokens."""
        return engine_arguments(search, "transformers")

    def _run(self, key: Tuple[str, str], batch, results: List[Translation], search) -> None:
        """``generate`` on one batch, every hypothesis returned; ranked by fairseq's score. Beam
        search returns them by ``generate``'s score, which is fairseq's when no token of theirs was
        forced: then only the first ``nbest`` are scored again (:meth:`_log_probs`), else all."""
        import torch

        group, forced = key[0], key[1] or None
        model = self.models[group]
        beam, nbest = search.beam, search.nbest
        lenpen, max_len = search.lenpen, search.max_len
        sampling = search.sampling
        pad = self.dictionary.pad_index
        width = max(len(ids) for _, ids in batch)
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
        for k, (_, ids) in enumerate(batch):
            input_ids[k, : len(ids)] = torch.tensor(ids)
        input_ids = input_ids.to(self.device)
        mask = (input_ids != pad).long()
        extra = {"forced_bos_token_id": self.lang_ids[forced]} if forced is not None else {}
        with torch.no_grad():
            encoded = model.get_encoder()(input_ids=input_ids, attention_mask=mask)
            out = model.generate(
                input_ids=input_ids,
                attention_mask=mask,
                encoder_outputs=type(encoded)(last_hidden_state=encoded.last_hidden_state),  # expanded by generate
                **self.generate_options(search),
                **extra,
            )
        sequences = out.view(len(batch), beam, -1).tolist()
        wanted = []  # (sentence, hypothesis) whose fairseq score is needed
        hypotheses = [[_hypothesis(s, self.dictionary) for s in sequences[k]] for k in range(len(batch))]
        for k, found in enumerate(hypotheses):
            cut = any(len(h) >= max_len for h in found)  # generate forced the end of sentence, scored 0
            count = beam if forced is not None or cut or sampling else nbest
            wanted += [(k, b) for b in range(count)]
        totals = self._log_probs(model, encoded, mask, wanted, hypotheses, search.temperature)
        scored: Dict[int, list] = {}
        for (k, b), total in zip(wanted, totals):
            ids = hypotheses[k][b]
            score = total / (len(ids) + 1) ** lenpen
            scored.setdefault(k, []).append(
                (self.dictionary.text(ids, self.leave_out), score / math.log(2), len(ids) + 1)
            )
        for k, (index, _) in enumerate(batch):
            contract.ranked(results[index], scored[k], nbest)

    def _log_probs(self, model, encoded, mask, wanted, hypotheses, temperature: float) -> List[float]:
        """The model's log-probability (natural log, at ``temperature``) of each ``(sentence,
        hypothesis)`` of ``wanted``: of each of its tokens and of the end of sentence after them,
        given its source (``encoded``, ``mask``): the decoder run once over them, teacher-forced,
        at most :data:`LOGITS_PER_PASS` logits at a time."""
        import torch

        eos, pad = self.dictionary.eos_index, self.dictionary.pad_index
        targets = [hypotheses[k][b] + [eos] for k, b in wanted]
        rows = torch.tensor([k for k, _ in wanted], device=self.device)
        width = max(len(t) for t in targets)
        step = max(1, LOGITS_PER_PASS // (width * model.config.vocab_size))
        totals: List[float] = []
        for start in range(0, len(targets), step):
            part = targets[start : start + step]
            target = torch.full((len(part), width), pad, dtype=torch.long)
            for k, tokens in enumerate(part):
                target[k, : len(tokens)] = torch.tensor(tokens)
            target = target.to(self.device)
            decoder = torch.cat([torch.full_like(target[:, :1], eos), target[:, :-1]], dim=1)
            chosen = rows[start : start + step]
            with torch.no_grad():
                logits = model(
                    encoder_outputs=(encoded.last_hidden_state[chosen],),
                    attention_mask=mask[chosen],
                    decoder_input_ids=decoder,
                ).logits.float()
                logp = torch.log_softmax(logits / temperature, dim=-1).gather(-1, target[..., None])[..., 0]
            lengths = torch.tensor([len(t) for t in part], device=self.device)
            inside = torch.arange(width, device=self.device)[None, :] < lengths[:, None]
            totals += torch.where(inside, logp, 0.0).sum(dim=1).tolist()
        return totals


def load_model(transformers, folder: str, place: str):
    """The model of ``folder``'s subfolder ``place``, loaded by ``transformers`` whose load report
    is empty: no weight missing, unexpected or of another shape than the folder's ``config.json``
    gives it (an edited layer count, width or position count); else one HltmtInputError naming
    the folder, the subfolder and what transformers said. Its log and progress bars are kept off
    the terminal."""
    with _transformers_quiet(transformers) as said:
        try:
            model, info = transformers.AutoModelForSeq2SeqLM.from_pretrained(
                os.path.join(folder, place), output_loading_info=True
            )
        except (OSError, ValueError, RuntimeError, OverflowError, MemoryError) as error:
            model, info = None, error
    what = f"transformers cannot load the export {folder}" + ("" if place == "." else f" (its model {place})")
    found = _reported(said)  # its rows also when it raised after them ("look at the above report")
    if model is None and not found:
        words = str(info).strip().splitlines()[0] if str(info).strip() else type(info).__name__
        raise HltmtInputError(f"{what}: {words:.300}")
    if model is not None and not found:  # the report as returned, should its log say nothing
        found = [
            f"{', '.join(sorted(str(k[0] if isinstance(k, tuple) else k) for k in info[key])[:3])} {status}"
            for key, status in (
                ("mismatched_keys", "MISMATCH"),
                ("missing_keys", "MISSING"),
                ("unexpected_keys", "UNEXPECTED"),
            )
            if info.get(key)
        ] + [str(m).splitlines()[0] for m in info.get("error_msgs") or []]
    if found:
        raise HltmtInputError(
            f"{what}: transformers' load report is not empty: {'; '.join(found):.400} (the folder's config.json "
            "and weights disagree: export the checkpoint again)"
        )
    return model


CODE = re.compile(r">>[^<>\s]*<<")  # a language code in a line, as MarianTokenizer splits it off


def from_pretrained(folder: str, tgt: str, subfolder: Optional[str] = None):
    """``(tokenizer, model)`` of the export ``folder`` that serve the target language ``tgt``,
    for ``generate`` (a transformers user's loader: the folder's group for ``tgt`` found, no
    model of another group given). The folder is checked (its manifest); an unknown ``tgt``, a
    ``subfolder`` (as ``from_pretrained(folder, subfolder=...)`` names one) that does not serve
    ``tgt``, or a model whose config.json does not name ``tgt`` among its targets is one
    HltmtInputError. With ``--decoder-langtok`` the model's generation settings force ``tgt``'s
    code first. The tokenizer (:class:`CheckedTokenizer`) refuses a line holding a language
    code the folder does not know, or (with ``--encoder-langtok tgt``) the code of a target the
    model does not serve."""
    from hltmt_plugin.hub.manifest import read as read_manifest

    folder = os.fspath(folder)
    record = read_manifest(folder)
    if record["engine"] != "transformers":
        raise HltmtConfigError(f"{folder} is an export for {record['engine']!r:.40}, not transformers")
    contract.check_languages(list(record["langs"]), tgt, tgt)
    place = record["models"][record["targets"][tgt]]
    if subfolder is not None and os.path.normpath(subfolder) != os.path.normpath(place):
        raise HltmtInputError(
            f"{folder}: {subfolder!r:.100} does not serve {tgt} ({place} does): load subfolder={place!r}"
        )
    transformers = contract.import_transformers("this is an export to transformers and ")
    model = load_model(transformers, folder, place).eval()
    served = (getattr(model.config, "hltmt", None) or {}).get("targets", [])
    if tgt not in served:
        raise HltmtInputError(f"{folder}: the config.json of {place} does not name {tgt} among its targets")
    if record["decoder_langtok"]:
        model.generation_config.forced_bos_token_id = Dictionary.load(os.path.join(folder, "dict.txt")).index(
            record["language_tokens"][tgt]
        )
    with _transformers_quiet(transformers):
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    codes = record["language_codes"]
    allowed = [codes[lang] for lang in served] if record["encoder_langtok"] == "tgt" else list(codes.values())
    return CheckedTokenizer(tokenizer, allowed, sorted(codes.values())), model


class CheckedTokenizer:
    """A tokenizer that refuses, in one HltmtInputError, a line holding a language code outside
    ``allowed`` (``known``: every code of the folder) before tokenizing it; everything else is
    the tokenizer's own (``batch_decode``, ``convert_tokens_to_ids`` ...)."""

    def __init__(self, tokenizer, allowed: Sequence[str], known: Sequence[str]):
        self.tokenizer, self.allowed, self.known = tokenizer, set(allowed), list(known)

    def __call__(self, text, *args, **kwargs):
        for line in [text] if isinstance(text, str) else list(text):
            for code in CODE.findall(line) if isinstance(line, str) else []:
                if code not in self.known:
                    raise HltmtInputError(
                        f"unknown language code {code!r:.40} (this model knows {', '.join(self.known)})"
                    )
                if code not in self.allowed:
                    raise HltmtInputError(
                        f"{code} is not a target this model serves ({', '.join(sorted(self.allowed))}): load the "
                        "model of its target language"
                    )
        return self.tokenizer(text, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


def group_layer(folder: str, place: str, other: str, model):
    """The decoder's top layer of ``folder``'s subfolder ``other`` as a module (a copy of
    ``model``'s, given ``other``'s weights), when ``other`` is ``model`` (loaded from ``place``)
    but for that layer: the same settings (``config.json`` but the targets it serves,
    ``generation_config.json``), the same weight names, and every weight outside the layer
    equal. None otherwise (the group is then loaded whole). Read with safetensors: no code runs."""
    import torch
    from safetensors import safe_open

    for name in ("config.json", "generation_config.json"):
        if _settings(os.path.join(folder, other, name)) != _settings(os.path.join(folder, place, name)):
            return None
    top = f"model.decoder.layers.{len(model.get_decoder().layers) - 1}."
    with (
        safe_open(os.path.join(folder, place, "model.safetensors"), "pt") as mine,
        safe_open(os.path.join(folder, other, "model.safetensors"), "pt") as theirs,
    ):
        if set(mine.keys()) != set(theirs.keys()):
            return None
        for key in mine.keys():
            if not key.startswith(top) and not torch.equal(mine.get_tensor(key), theirs.get_tensor(key)):
                return None
        layer = copy.deepcopy(model.get_decoder().layers[-1])
        weights = {key[len(top) :]: theirs.get_tensor(key) for key in theirs.keys() if key.startswith(top)}
    try:
        layer.load_state_dict({k: v.to(next(layer.parameters()).dtype) for k, v in weights.items()}, strict=True)
    except RuntimeError:  # other names or shapes than the layer's
        return None
    return layer


def with_top_layer(model, layer):
    """``model`` with ``layer`` as its decoder's top layer: a new model object sharing every
    other module and weight of ``model`` (which is left as it was), so that each group's model
    serves its batches while others run."""
    import torch

    decoder = model.get_decoder()
    path = [name for name, module in model.named_modules() if module is decoder][0].split(".")
    outer = copy.copy(model)
    outer._modules = dict(model._modules)
    parent = outer
    for name in path[:-1]:  # the modules above the decoder, each a copy holding the next copy
        child = copy.copy(parent._modules[name])
        child._modules = dict(child._modules)
        parent._modules[name] = parent = child
    mine = copy.copy(decoder)
    mine._modules = dict(decoder._modules)
    mine._modules["layers"] = torch.nn.ModuleList([*decoder.layers[:-1], layer])
    parent._modules[path[-1]] = mine
    return outer


def _settings(path: str) -> Optional[dict]:
    """A model's settings file as JSON (bounded), without the ``hltmt`` record of the targets it serves."""
    from hltmt_plugin import records

    found = records.parse_json(records.read_text(path, "model settings"), f"model settings {path}")
    return {k: v for k, v in found.items() if k != "hltmt"} if isinstance(found, dict) else None


@contextlib.contextmanager
def _transformers_quiet(transformers):
    """For a load: transformers' log records kept (yielded, not printed; also where a command
    has turned logging off), its progress bars and Python warnings off; all restored after. One
    load at a time in the process (these settings are the process's: two loads in two threads
    would restore each other's)."""
    with _LOADS:
        yield from _quiet_load(transformers)


_LOADS = threading.RLock()


def _quiet_load(transformers):
    hf_logging = transformers.utils.logging
    root = logging.getLogger("transformers")
    saved = root.handlers[:], root.level, root.propagate, hf_logging.is_progress_bar_enabled()
    disabled = logging.root.manager.disable
    logging.disable(logging.NOTSET)
    said: List[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = said.append
    root.handlers[:], root.propagate = [handler], False
    root.setLevel(logging.WARNING)
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield said
    finally:
        root.handlers[:], root.propagate = saved[0], saved[2]
        root.setLevel(saved[1])
        logging.disable(disabled)
        if saved[3]:
            hf_logging.enable_progress_bar()


_THREADS_LOCK = threading.Lock()
_threads_state = {"calls": 0, "saved": None}


@contextlib.contextmanager
def torch_threads(count: Optional[int]):
    """torch's intra-op threads set to ``count`` (None: left as they are) while the block runs,
    restored when the last overlapping call ends (torch's setting is the process's: calls from
    several threads share one setting, the first call's saved value restored by the last)."""
    if not count:
        yield
        return
    import torch

    with _THREADS_LOCK:
        if _threads_state["calls"] == 0:
            _threads_state["saved"] = torch.get_num_threads()
        _threads_state["calls"] += 1
        torch.set_num_threads(count)
    try:
        yield
    finally:
        with _THREADS_LOCK:
            _threads_state["calls"] -= 1
            if _threads_state["calls"] == 0:
                torch.set_num_threads(_threads_state["saved"])


def _reported(said: List[logging.LogRecord]) -> List[str]:
    """The rows of the load report transformers logged, in its words (key, status, details), by
    status (shapes first): each status's first three rows (sorted)."""
    rows = {status: [] for status in ("MISMATCH", "MISSING", "UNEXPECTED", "CONVERSION")}
    for record in said:
        for line in re.sub(r"\x1b\[[0-9;]*m", "", record.getMessage()).splitlines():
            cells = [cell.strip() for cell in line.split("|")]
            if len(cells) >= 2 and cells[1] in rows:
                rows[cells[1]].append(" ".join(cell for cell in cells if cell))
    return [
        ", ".join(sorted(found)[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        for found in rows.values()
        if found
    ]


def _hypothesis(sequence: List[int], dictionary) -> List[int]:
    """A generated sequence's tokens after the decoder's start, up to (without) its end of sentence."""
    tokens = sequence[1:]
    return tokens[: tokens.index(dictionary.eos_index)] if dictionary.eos_index in tokens else tokens


def _device(torch, device: Optional[str]):
    if device is None or device == "cpu":
        return torch.device("cpu")
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.device(device)
    raise HltmtConfigError(f"device {device!r:.60}: cpu, or cuda where torch sees a GPU")
