"""One loaded model, any direction: translate mixed-direction input with an HLT-MT checkpoint
or any fairseq ``translation_multi_simple_epoch`` checkpoint (fairseq's ``transformer`` too).

::

    from hltmt_plugin.hub import HltmtTranslator
    mt = HltmtTranslator.load("ckpt/checkpoint_best.pt", spm="runs/data/spm/spm.model")
    mt.translate(["The file is open."], src="en", tgt="de")
    mt.translate_batch([("en", "de", "The file is open."), ("gu", "en", "...")], beam=5)
    mt.translate_batch(items, details=True)[0].routing      # {'slp': 'm1', ...}

The checkpoint gives everything it stores: the task's options (``--langs``, ``--lang-pairs``,
``--encoder-langtok`` ...), the model's (pool, adapters, skills) and the data folder whose
``dict.*.txt`` it was trained with (``data=`` overrides a folder that has moved). The
sentencepiece model is not in the checkpoint: give it once (``spm=``) or keep it where
``hltmt-prepare-data`` writes it (``DATA/../spm/spm.model``), in the data folder or beside
the checkpoint.

Every sentence carries its own direction. Batches are built the way the task builds
``fairseq-generate``'s: the sentencepiece pieces of the line, binarized with the shared
dictionary plus end of sentence, the language token the checkpoint's ``--encoder-langtok``
puts on the source (the task's data manager), for the plugin's models each row's
source-language id (``--enable-lang-ids``, which the adapters and skills read), collated by fairseq's
``LanguagePairDataset`` (left-padded sources). Sentences of all directions are sorted by
length and batched by tokens together; results come back in input order. Beam search is the
task's own generator and ``inference_step``, so a sentence gets the translation
``fairseq-generate`` gives it for the same checkpoint, direction and beam (and its ``--nbest``,
``--sampling``, ``--sampling-topk``, ``--sampling-topp``, ``--temperature``,
``--no-repeat-ngram-size``: the generator's own; ``--seed``: torch's generators seeded); with
``--decoder-langtok`` each row's translation starts with its own target-language token,
forced as fairseq-generate forces it (``prefix_tokens``) and left out of the text.

A direction the model was not trained on is served by the rule of
:mod:`hltmt_plugin.directions`: into a language the model never produced (or from one it never
read) it is refused; between languages it saw in other directions it is a zero-shot direction,
translated only with ``zero_shot=True`` and marked (``Translation.zero_shot``).

A sentence that cannot be translated (unknown language, a direction the model cannot serve,
a direction refused or zero-shot without ``zero_shot=True``, an empty line, a line longer
than the model's source positions: refused, not cut; a NUL character or a lone surrogate) is
reported with its line number; the others are still translated. A sentence longer than the
token budget is a batch of its own.
"""

import importlib.util
import logging
import math
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

import hltmt_plugin
from hltmt_plugin.directions import TRAINED_KEY, TrainedDirections, marks_target
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.hub import arguments, contract, engines
from hltmt_plugin.hub.decoding import engine_arguments
from hltmt_plugin.hub.manifest import is_export, read as read_manifest
from hltmt_plugin.hub.results import Translation

if TYPE_CHECKING:  # torch and fairseq are imported once a checkpoint is loaded: an export folder needs neither
    import torch

    from hltmt_plugin.languages import LanguageTable

logger = logging.getLogger(__name__)


class HltmtTranslator(contract.Translator):
    """A loaded multilingual checkpoint that translates any of its directions, mixed in one call."""

    def __init__(
        self,
        task,
        model,
        cfg,
        bpe,
        device,
        max_tokens: int = 4000,
        max_sentences: Optional[int] = None,
        checkpoint: str = "",
        spm: str = "",
    ):
        from hltmt_plugin.hub.loading import LoadedCheckpoint, _stored

        self.task, self.model, self.cfg, self.bpe, self.device = task, model, cfg, bpe, device
        self.max_tokens, self.max_sentences = max_tokens, max_sentences
        self.checkpoint, self.spm = checkpoint, spm
        self.loaded = LoadedCheckpoint(checkpoint, model, cfg, task, spm)
        self.dictionary, self.langs = self.loaded.dictionary, self.loaded.langs
        self.ours = self.loaded.ours  # the plugin's model (routing, language table), or None
        self.max_source_positions = self.loaded.max_source_positions
        self.max_target_positions = self.loaded.max_target_positions
        self._generators: Dict[Tuple, object] = {}
        self._routes: Dict[Tuple[str, str], Dict[str, object]] = {}
        # the directions it was trained on (kept from the model it started from, and from imported
        # adapters); languages whose adapters were imported later without any
        stored = {name: _stored(cfg, "model", name) for name in (TRAINED_KEY, "adapter_langs")}
        stored["lang_pairs"] = list(getattr(task, "lang_pairs", None) or [])
        self.directions = TrainedDirections.from_options(stored, marks_target(task.args))
        # The task knows a dictionary per language of its training pairs; all are the one shared
        # dictionary (the task asserts it). Languages of --langs outside those pairs (served by
        # imported adapters or the skill matrix) get it too, so the data manager finds their tokens.
        for lang in self.langs:
            task.data_manager.dicts.setdefault(lang, self.dictionary)

    @classmethod
    def _load(cls, checkpoint, spm, data, *, device, compute_type, record, max_tokens, max_sentences, threads, fp16):
        """Load ``checkpoint`` once (through :meth:`~hltmt_plugin.hub.contract.Translator.load`,
        which checks the options every engine shares first).

        Args:
            checkpoint: a checkpoint written by fairseq-train for ``--task hltmt_translation`` or
                ``translation_multi_simple_epoch`` (any of their models); or a folder written by
                ``hltmt-export``, served by the engine it was exported to with the same contract
                (:class:`~hltmt_plugin.hub.ct2_engine.Ct2Translator`: its ``compute_type`` and
                ``threads``; :class:`~hltmt_plugin.hub.hf_engine.HfTranslator`: its ``threads``).
            spm: the sentencepiece model of the data (default: found, see the module docstring).
            data: the binarized data folder (default: the one stored in the checkpoint, or the
                checkpoint's own folder when that one is gone and holds the dict.*.txt).
            device: ``"cpu"``, ``"cuda"``, ``"cuda:1"`` ... (default: cuda if available).
            fp16: run the model in half precision (GPU).
            max_tokens / max_sentences: batch size limits (source tokens / sentences per batch).
        """
        options = {"max_tokens": max_tokens, "max_sentences": max_sentences, "threads": threads, "fp16": fp16}
        if is_export(checkpoint):  # a folder written by hltmt-export: neither torch nor fairseq
            return _load_export(checkpoint, spm, data, device=device, compute_type=compute_type, **options)
        engine = [
            name
            for name, value in (("compute_type", compute_type), ("threads", threads), ("record", record))
            if value is not None
        ]
        if engine:
            raise HltmtConfigError(
                f"{', '.join(engine)}: options of an exported model (hltmt-export), not of a checkpoint"
            )
        if not hltmt_plugin.fairseq_installed() or importlib.util.find_spec("hltmt_plugin.tasks") is None:
            raise HltmtConfigError(  # the serving install (serving/): no training stack, no checkpoint
                f"{checkpoint} is not an export folder, and this install serves export folders only (hltmt-export "
                "makes one from a checkpoint): to load a checkpoint, install the plugin with its training stack "
                '(pip install -e . in the repository, or pip install "hltmt_plugin" with torch and fairseq-fixed)'
            )
        hltmt_plugin.register()  # the task, model and safe loading, before fairseq's modules are imported
        from fairseq.data.encoders.sentencepiece_bpe import SentencepieceBPE, SentencepieceConfig

        from hltmt_plugin.hub.loading import load_for_translation

        device = _device(device)
        loaded, folder = load_for_translation(checkpoint, spm, data)
        checkpoint, model, cfg, task, spm_path = loaded.path, loaded.model, loaded.cfg, loaded.task, loaded.spm
        if fp16:
            model.half()
        model.to(device)
        bpe = SentencepieceBPE(SentencepieceConfig(sentencepiece_model=spm_path))
        logger.info(
            f"loaded {checkpoint} ({len(task.langs)} languages: {','.join(task.langs)}; data {folder}; "
            f"sentencepiece {spm_path}; {device})"
        )
        return cls(
            task,
            model,
            cfg,
            bpe,
            device,
            max_tokens=max_tokens,
            max_sentences=max_sentences,
            checkpoint=checkpoint,
            spm=spm_path,
        )

    @property
    def languages(self) -> "LanguageTable":
        """The languages' tokens and ids (:attr:`~hltmt_plugin.hub.loading.LoadedCheckpoint.languages`)."""
        return self.loaded.languages

    # ---- routing and input checks ------------------------------------------------------
    def routing(self, src: str, tgt: str) -> Dict[str, object]:
        """How the model routes ``src -> tgt`` (the model's ``route_of``); an error if it cannot."""
        contract.check_languages(self.langs, src, tgt)
        key = (src, tgt)
        if self.ours is None:  # a model without routing (fairseq's transformer)
            return {}
        if key not in self._routes:
            try:
                self._routes[key] = self.model.route_of(src, tgt)
            except HltmtInputError as error:
                self._routes[key] = error
        found = self._routes[key]
        if isinstance(found, Exception):
            raise found
        return dict(found)

    def encode(self, text: str) -> "torch.Tensor":
        """The binarized pieces of ``text`` with end of sentence (as the test sets are)."""
        return self.dictionary.encode_line(self.bpe.encode(text), add_if_not_exist=False, append_eos=True).long()

    # ---- batching ----------------------------------------------------------------------
    def _datasets(self, prepared: Sequence[Tuple[int, str, str, "torch.Tensor"]]):
        """One fairseq LanguagePairDataset per direction, built as the task's data manager
        builds its test sets; returns [(global index, dataset, index in it)]."""
        from fairseq.data import LanguagePairDataset, ListDataset

        from hltmt_plugin.tasks.collation import with_row_ids  # the task's datasets: language ids per row

        args, dm = self.task.args, self.task.data_manager
        with_ids = bool(getattr(args, "enable_lang_ids", False))
        spec = args.langtoks["main"][0]
        by_direction: Dict[Tuple[str, str], List[Tuple[int, torch.Tensor]]] = {}
        for index, src, tgt, tokens in prepared:
            by_direction.setdefault((src, tgt), []).append((index, tokens))
        entries = []
        for (src, tgt), rows in by_direction.items():
            tokens = [t for _, t in rows]
            source = dm.src_dataset_tranform_func(
                src, tgt, ListDataset(tokens, np.array([t.numel() for t in tokens])), spec
            )
            dataset = with_row_ids(
                LanguagePairDataset(
                    source,
                    source.sizes,
                    self.dictionary,
                    left_pad_source=args.left_pad_source,
                    left_pad_target=args.left_pad_target,
                    src_lang_id=self.languages.lang_id(src) if with_ids else None,
                    tgt_lang_id=self.languages.lang_id(tgt) if with_ids else None,
                )
            )
            entries.extend((index, dataset, j) for j, (index, _) in enumerate(rows))
        return entries

    def _batches(self, entries, max_tokens, max_sentences) -> Iterable[dict]:
        """Sorted by source length, batched by tokens, collated by fairseq."""
        from fairseq.data import data_utils

        sizes = np.array([dataset.src_sizes[j] for _, dataset, j in entries], dtype=np.int64)
        order = np.argsort(sizes, kind="mergesort")
        fits = sizes[order] <= max_tokens  # a sentence longer than the token budget is a batch of its own
        batches = (
            data_utils.batch_by_size(
                order[fits],
                num_tokens_fn=None,
                num_tokens_vec=sizes[order][fits],
                max_tokens=max_tokens,
                max_sentences=max_sentences,
            )
            if fits.any()
            else []
        )
        for batch in list(batches) + [[k] for k in order[~fits]]:
            samples = []
            for k in batch:
                index, dataset, j = entries[k]
                samples.append(dict(dataset[j], id=index))
            yield entries[batch[0]][1].collater(samples)

    def generator(self, **options):
        """fairseq's generator of these search options (those of ``translate_batch``), checked."""
        search = arguments.search(**options)
        return self._generator(arguments.model_bounds(search, len(self.dictionary), self.max_target_positions))

    def _generator(self, search: arguments.Search):
        """fairseq's generator of ``search`` (checked), made once (the seed is the call's)."""
        options = engine_arguments(search, "fairseq")  # the seed is the call's, the n-best the contract's
        key = tuple(sorted(options.items()))
        if key not in self._generators:
            from fairseq.dataclass.configs import GenerationConfig

            args = GenerationConfig(**options)
            task_args = self.task.args
            unset = getattr(task_args, "target_lang", None) is None
            if unset:  # fairseq's generator looks up one target-language token; each row brings its own (_run)
                task_args.target_lang = self.langs[0]
            try:
                generator = self.task.build_generator([self.model], args)
            finally:
                if unset:
                    task_args.target_lang = None
            if getattr(generator, "repeat_ngram_blocker", None) is not None:
                generator.repeat_ngram_blocker = _generated_so_far(generator.repeat_ngram_blocker)
            self._generators[key] = generator
        return self._generators[key]

    # ---- translation -------------------------------------------------------------------
    def _tokens(self, texts: List[str]) -> Iterable["torch.Tensor"]:
        return (self.encode(text) for text in texts)

    def _prepared(self, index: int, src: str, tgt: str, tokens: "torch.Tensor"):
        return index, src, tgt, tokens

    def _translate_prepared(self, prepared, results: List[Translation], search, max_tokens, max_sentences, progress):
        """Beam search on the ``(index, src, tgt, tokens)`` rows, batched as the task batches them."""
        generator = self._generator(search)
        entries = self._datasets(prepared)
        for sample in self._batches(entries, max_tokens, max_sentences):
            self._run(generator, sample, results, entries, search.nbest)
            if progress is not None:
                progress(len(sample["id"]))

    def _run(self, generator, sample, results: List[Translation], entries, nbest: int = 1) -> None:
        """Beam search on one batch, the ``nbest`` best of each sentence kept; if the model
        refuses the batch, each sentence alone, so that only the sentences at fault fail."""
        import torch
        from fairseq import utils

        sample = utils.move_to_cuda(sample, self.device) if self.device.type == "cuda" else sample
        tgt_spec = self.task.args.langtoks["main"][1]
        try:
            with torch.no_grad():
                if tgt_spec:  # --decoder-langtok: each row's translation starts with its target-language token
                    prefix = torch.tensor(
                        [
                            [self.task.data_manager.get_decoder_langtok(results[i].tgt, tgt_spec)]
                            for i in sample["id"].tolist()
                        ]
                    ).to(sample["net_input"]["src_tokens"])
                    hypos = generator.generate([self.model], sample, prefix_tokens=prefix)
                else:
                    hypos = self.task.inference_step(generator, [self.model], sample)
        except HltmtInputError as error:
            ids = sample["id"].tolist()
            if len(ids) == 1:
                results[ids[0]].error = str(error)
                return
            by_index = {index: (dataset, j) for index, dataset, j in entries}
            for index in ids:
                dataset, j = by_index[index]
                self._run(generator, dataset.collater([dict(dataset[j], id=index)]), results, entries, nbest)
            return
        strip = set(getattr(generator, "symbols_to_strip_from_output", {generator.eos}))
        if tgt_spec:  # the target-language token that starts each translation
            strip |= {self.task.data_manager.get_decoder_langtok(lang, tgt_spec) for lang in self.langs}
        for index, found in zip(sample["id"].tolist(), hypos):  # fairseq's hypotheses, best first
            hypotheses = [
                (
                    self.bpe.decode(
                        self.task.target_dictionary.string(h["tokens"].int().cpu(), extra_symbols_to_ignore=strip)
                    ),
                    float(h["score"]) / math.log(2),
                    int(h["tokens"].numel()),
                )
                for h in found[:nbest]
            ]
            contract.ranked(results[index], hypotheses, nbest)


def _generated_so_far(block):
    """fairseq's n-gram block given the tokens generated so far: fairseq 0.12's generator gives it
    the whole token buffer, whose last places (padding) its CPU code reads as the latest n-gram,
    so that on the CPU ``--no-repeat-ngram-size`` blocked nothing."""
    import torch

    class GeneratedSoFar(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block = block

        def forward(self, tokens, lprobs, bsz: int, beam_size: int, step: int):
            return self.block(tokens[:, : step + 1], lprobs, bsz, beam_size, step)

    return GeneratedSoFar()


def _device(device: Optional[str]) -> "torch.device":
    """The device to translate on: ``device`` checked (one line, not torch's message), or cuda
    when there is one."""
    import torch

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        found = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise HltmtConfigError(
            f"device {device!r:.60} is not a torch device (cpu, cuda, cuda:1 ...): "
            f"{str(error).splitlines()[0] if str(error) else type(error).__name__}"
        ) from None
    if found.type == "cuda" and (not torch.cuda.is_available() or (found.index or 0) >= torch.cuda.device_count()):
        raise HltmtConfigError(f"device {device} is not available here ({torch.cuda.device_count()} CUDA device(s))")
    if found.type not in ("cpu", "cuda"):
        raise HltmtConfigError(f"device {device}: translation runs on cpu or cuda")
    return found


def _load_export(folder, spm, data, **options):
    """The engine of an export folder (its manifest checked once): the translator its engine
    declares (:mod:`hltmt_plugin.hub.engines`: CTranslate2's
    :class:`~hltmt_plugin.hub.ct2_engine.Ct2Translator`, transformers'
    :class:`~hltmt_plugin.hub.hf_engine.HfTranslator`), given the options the contract checked."""
    record = read_manifest(folder)
    return engines.translator(record["engine"])._load(folder, spm, data, record=record, **options)


def load(checkpoint: str, spm: Optional[str] = None, **kwargs) -> HltmtTranslator:
    """Shorthand for :meth:`HltmtTranslator.load`."""
    return HltmtTranslator.load(checkpoint, spm=spm, **kwargs)
