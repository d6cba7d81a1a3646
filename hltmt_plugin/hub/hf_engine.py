"""Serving an export to Hugging Face ``transformers`` (``hltmt-export --to transformers``) with
the translator's contract: :meth:`HltmtTranslator.load` of such a folder returns an
:class:`HfTranslator`, with the same ``translate`` / ``translate_batch`` / ``routing`` /
``direction`` and the same refusals (:mod:`hltmt_plugin.hub.contract`).

The folder is checked on load (:func:`hltmt_plugin.hub.manifest.read`), and each model by
transformers' own load report, which must be empty (:func:`load_model`). Each sentence is
prepared as the checkpoint's translator prepares it: the sentencepiece pieces of the line as the
dictionary's ids plus end of sentence, the language token ``--encoder-langtok`` puts first. The
sentences go to the model of their target language's group, sorted by length and batched by
tokens; with ``--decoder-langtok`` a batch holds one target language, whose token is forced first.
The search is ``generate``'s with the folder's generation settings (fairseq's) and the call's
beam, length penalty and length limit; all the beam's finished hypotheses come back, and the
best is taken by fairseq's score: with a forced target-language token, its log-probability
(which ``generate`` leaves out) is counted, as fairseq counts it.
"""

import contextlib
import logging
import math
import os
import re
import warnings
from typing import List, Optional, Tuple

from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.hub import contract
from hltmt_plugin.hub.results import Translation
from hltmt_plugin.hub.vocabulary import Dictionary, Pieces


class HfTranslator(contract.ExportedTranslator):
    """An export folder's transformers models, serving any of its directions, mixed in one call."""

    engine = "transformers"
    engine_name = "transformers"

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
        ``threads``: torch's threads (default: torch's choice); ``fp16``: half precision (GPU)."""
        if compute_type is not None:
            raise HltmtConfigError(
                f"compute type {compute_type!r:.40} is CTranslate2's: an export to transformers runs float32 "
                "(--fp16 on a GPU)"
            )
        folder, record = cls.load_arguments(folder, spm, data, record)
        transformers = contract.import_transformers("this is an export to transformers and ")
        import torch

        if threads:
            torch.set_num_threads(threads)
        device = _device(torch, device)
        models = {}
        for group, place in record["models"].items():
            model = load_model(transformers, folder, place).eval().to(device)
            models[group] = model.half() if fp16 else model
        dictionary = Dictionary.load(os.path.join(folder, "dict.txt"))
        pieces = Pieces(os.path.join(folder, "source.spm"))
        return cls(folder, record, models, dictionary, pieces, device, max_tokens, max_sentences)

    def batch_key(self, tgt: str) -> Tuple[str, str]:
        """The group serving ``tgt`` and, with ``--decoder-langtok``, ``tgt`` itself: its token is
        forced first for the whole batch."""
        return self.record["targets"][tgt], tgt if self.record["decoder_langtok"] else ""

    def _run(self, key: Tuple[str, str], batch, results: List[Translation], search) -> None:
        """``generate`` on one batch, every finished hypothesis returned; the best by fairseq's score."""
        import torch

        group, forced = key[0], key[1] or None
        model = self.models[group]
        beam, lenpen, max_len = search.beam, search.lenpen, search.max_len
        pad = self.dictionary.pad_index
        width = max(len(ids) for _, ids in batch)
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
        for k, (_, ids) in enumerate(batch):
            input_ids[k, : len(ids)] = torch.tensor(ids)
        inputs = {"input_ids": input_ids.to(self.device), "attention_mask": (input_ids != pad).long().to(self.device)}
        extra = {"forced_bos_token_id": self.lang_ids[forced]} if forced is not None else {}
        if search.sampling:  # beam samples, their tokens' log-probabilities (at the temperature) kept
            extra.update(
                do_sample=True,
                top_k=search.sampling_topk or 0,  # 0: the whole vocabulary
                top_p=1.0 if search.sampling_topp is None else search.sampling_topp,
                temperature=search.temperature,
                output_logits=True,
            )
        with torch.no_grad():
            out = model.generate(
                **inputs,
                num_beams=1 if search.sampling else beam,
                num_return_sequences=beam,
                length_penalty=lenpen,
                max_new_tokens=max_len + 1,
                no_repeat_ngram_size=search.no_repeat_ngram_size,
                return_dict_in_generate=True,
                output_scores=True,
                **extra,
            )
            first = self._forced_log_prob(model, inputs, forced) if forced is not None else [0.0] * len(batch)
        sequences = out.sequences.view(len(batch), beam, -1).tolist()
        if search.sampling:  # fairseq's score of a sample: its tokens' log-probabilities, forced ones included
            logp = torch.stack(out.logits, 1).float().div(search.temperature).log_softmax(-1)
            picked = logp.gather(-1, out.sequences[:, 1:, None])[..., 0].view(len(batch), beam, -1).tolist()
        else:
            scores = out.sequences_scores.view(len(batch), beam).tolist()
        for k, (index, _) in enumerate(batch):
            hypotheses = []
            for b in range(beam):
                ids = _hypothesis(sequences[k][b], self.dictionary)
                if search.sampling:
                    fairseq = sum(picked[k][b][: len(ids) + 1]) / (len(ids) + 1) ** lenpen
                else:
                    fairseq = self._score(model, inputs, k, sequences[k][b], scores[k][b], lenpen, max_len, first[k])
                hypotheses.append((self.dictionary.text(ids, self.leave_out), fairseq / math.log(2), len(ids) + 1))
            contract.ranked(results[index], hypotheses, search.nbest)  # end of sentence counted in the tokens

    def _score(self, model, inputs, row: int, sequence, score: float, lenpen: float, max_len: int, forced: float):
        """fairseq's score of a hypothesis (natural log): ``generate``'s normalized score with the
        log-probabilities it leaves out counted: the forced target-language token's (``forced``) and,
        for a hypothesis cut at ``max_len``, the end of sentence forced there (scored again here)."""
        import torch

        length = len(_hypothesis(sequence, self.dictionary)) + 1
        total = score * length**lenpen + forced
        if length > max_len:  # cut: generate gave the forced end of sentence log-probability 0
            decoder = torch.tensor([sequence[:length]], device=self.device)
            one = {name: value[row : row + 1] for name, value in inputs.items()}
            with torch.no_grad():
                logits = model(**one, decoder_input_ids=decoder).logits[0, -1].float()
            total += float(torch.log_softmax(logits, -1)[self.dictionary.eos_index])
        return total / length**lenpen

    def _forced_log_prob(self, model, inputs, forced: str) -> List[float]:
        """The model's log-probability of the forced target-language token as the first token."""
        import torch

        start = torch.full((inputs["input_ids"].shape[0], 1), self.dictionary.eos_index, device=self.device)
        logits = model(**inputs, decoder_input_ids=start).logits[:, -1, :].float()
        return torch.log_softmax(logits, dim=-1)[:, self.lang_ids[forced]].tolist()


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


@contextlib.contextmanager
def _transformers_quiet(transformers):
    """For a load: transformers' log records kept (yielded, not printed; also where a command
    has turned logging off), its progress bars and Python warnings off; all restored after."""
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
