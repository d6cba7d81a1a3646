"""``hltmt_translation``: fairseq's ``translation_multi_simple_epoch`` + HLT-MT's two stages.

Every option of the parent task keeps working (``--lang-pairs``, ``--langs`` /
``--lang-dict``, ``--encoder-langtok``, ``--decoder-langtok``, sampling options).

Stages (HLT-MT trains high-resource directions first, then all):

- ``high``: the training data holds only the directions whose languages are all
  high-resource (``--high-resource-langs``) or pivots (``--pivot-langs``, default ``en``),
  so no batch is spent on a low-resource direction; the gate learns with alternating
  hard/soft updates (the draw lives in the model's ``set_num_updates``).
- ``all``: every direction; at the start of the stage the routing map ``g(l) = argmax p_l``
  is computed from the final gate, printed, stored in the model (and so in every
  checkpoint), and the gate stops training.

Two ways to run it: two fairseq-train runs (``--hlt-stage high``, then ``--hlt-stage all``
with ``--restore-file STAGE1/checkpoint_last.pt --reset-optimizer --reset-dataloader
--reset-meters``), or one run with ``--high-stage-updates N``: its training epochs are cut
so that the epoch in which update N falls ends exactly at N; the next epoch is stage
``all``. The cut is recorded in the train iterator's state, so a resume from a checkpoint on
either side of N switches at N too.
"""
import hashlib
import logging
import os
import sys
from typing import List, Optional

import torch

from fairseq.data import iterators
from fairseq.data.multilingual.multilingual_data_manager import MultilingualDatasetManager
from fairseq.tasks import register_task
from fairseq.tasks.translation_multi_simple_epoch import TranslationMultiSimpleEpochTask

from hltmt_plugin.errors import HltmtConfigError
from hltmt_plugin.models.hltmt_transformer import split_langs
from hltmt_plugin.modules.language_pool import SelectiveLanguagePool
from hltmt_plugin.pretrained import load_pretrained

logger = logging.getLogger(__name__)

HIGH, ALL = "high", "all"


class StageDataManager(MultilingualDatasetManager):
    """fairseq's multilingual data manager, restricted to ``pair_filter`` when it is set."""

    pair_filter: Optional[List[str]] = None

    def get_split_data_param_list(self, split, epoch, shard_epoch=None):
        params = super().get_split_data_param_list(split, epoch, shard_epoch=shard_epoch)
        if self.pair_filter is not None:
            params = [p for p in params if f"{p['src']}-{p['tgt']}" in self.pair_filter]
        return params


class StageEpochBatchIterator(iterators.EpochBatchIterator):
    """Ends the training epoch in which update ``switch_update`` falls exactly there.

    ``start_update`` (the update count when the epoch began) is part of the iterator's
    state, so a resumed run rebuilds the same cut epoch.
    """

    def __init__(self, *args, switch_update: int, batches_per_update: int, count_updates, **kwargs):
        self.switch_update, self.batches_per_update, self.count_updates = switch_update, batches_per_update, count_updates
        self.start_update = None
        super().__init__(*args, **kwargs)

    @property
    def frozen_batches(self):
        if self._frozen_batches is None:
            if self.start_update is None:
                self.start_update = self.count_updates()
            batches = tuple(self.batch_sampler(self.dataset, self.epoch))
            left = self.switch_update - self.start_update
            if 0 < left and left * self.batches_per_update < len(batches):
                batches = batches[: left * self.batches_per_update]
                logger.info(f"HLT-MT: epoch {self.epoch} ends at update {self.switch_update} "
                            f"(end of stage high) after {len(batches)} batches")
            self._frozen_batches = batches
        return self._frozen_batches

    def next_epoch_itr(self, *args, **kwargs):
        if self._next_epoch_itr is None and self.next_epoch_idx != self.epoch:
            self.start_update = None  # a new epoch: its start is the count now
        return super().next_epoch_itr(*args, **kwargs)

    def state_dict(self):
        state = super().state_dict()
        state["hltmt_start_update"] = None if self.end_of_epoch() else self.start_update
        return state

    def load_state_dict(self, state_dict):
        self.start_update = state_dict.get("hltmt_start_update")
        self._frozen_batches = None  # rebuild with the recorded start
        super().load_state_dict(state_dict)


@register_task("hltmt_translation")
class HltmtTranslationTask(TranslationMultiSimpleEpochTask):
    """Multilingual translation with HLT-MT's language-specific decoder top and stages."""

    @staticmethod
    def add_args(parser):
        TranslationMultiSimpleEpochTask.add_args(parser)
        parser.add_argument("--hlt-stage", choices=[HIGH, ALL], default=None,
                            help="HLT-MT training stage: 'high' trains the high-resource directions and "
                                 "learns the gate; 'all' trains every direction with the routing map fixed "
                                 "from the gate (default: high, or as --high-stage-updates says)")
        parser.add_argument("--high-stage-updates", type=int, default=0, metavar="N",
                            help="one run for both stages: stage high for the first N updates, then "
                                 "stage all (0: off)")
        parser.add_argument("--hlt-param-digest-interval", type=int, default=0, metavar="N",
                            help="every N updates, print each rank's parameter digest to stderr (check that "
                                 "distributed workers stay identical; 0: off)")
        parser.add_argument("--pivot-langs", default="en", metavar="LANGS",
                            help="comma-separated languages that are neither high- nor low-resource (the "
                                 "hub of an English-centric corpus); stage high trains the directions whose "
                                 "languages are all high-resource or pivots")

    @classmethod
    def setup_task(cls, args, **kwargs):
        check_data(args)
        return super().setup_task(args, **kwargs)

    def __init__(self, args, langs, dicts, training):
        super().__init__(args, langs, dicts, training)
        self.data_manager = StageDataManager(args, self.lang_pairs, langs, dicts, self.sampling_method)
        self.model = None
        self.train_stage = None  # the stage of the loaded training data
        if training:
            self.high_pairs = self._high_pairs()

    # ---- stages --------------------------------------------------------------------
    def _high_pairs(self) -> List[str]:
        args = self.args
        if args.high_stage_updates < 0:
            raise HltmtConfigError(f"--high-stage-updates must be >= 0, got {args.high_stage_updates}")
        if args.high_stage_updates > 0 and args.hlt_stage == ALL:
            raise HltmtConfigError("--hlt-stage all cannot be combined with --high-stage-updates "
                                   "(which runs stage high first)")
        high = split_langs(getattr(args, "high_resource_langs", None))
        keep = set(high) | set(split_langs(args.pivot_langs))
        pairs = [p for p in self.lang_pairs if set(p.split("-")) <= keep]
        if high and not pairs and self.stage_schedule_uses_high():
            raise HltmtConfigError(
                f"stage high has no direction to train: no pair of --lang-pairs has only high-resource "
                f"({','.join(high)}) or pivot ({args.pivot_langs}) languages")
        return pairs

    def stage_schedule_uses_high(self) -> bool:
        return self.args.high_stage_updates > 0 or self.args.hlt_stage in (None, HIGH)

    def updates_done(self) -> int:
        return self._slp().num_updates if self.model is not None else 0

    def current_stage(self) -> str:
        if self.args.high_stage_updates > 0:
            return HIGH if self.updates_done() < self.args.high_stage_updates else ALL
        return self.args.hlt_stage or HIGH

    def _slp(self) -> SelectiveLanguagePool:
        for module in self.model.modules():
            if isinstance(module, SelectiveLanguagePool):
                return module
        raise HltmtConfigError("--task hltmt_translation trains --arch hltmt_transformer* models")

    def build_model(self, args, from_checkpoint=False):
        if self.training:
            self._check_distributed(args)
        model = super().build_model(args, from_checkpoint)
        if not from_checkpoint and getattr(args, "pretrained_xlmr_checkpoint", None):
            load_pretrained(model, args.pretrained_xlmr_checkpoint, self.source_dictionary,
                            getattr(args, "pretrained_xlmr_decoder", False))
        self.model = model
        return model

    def begin_epoch(self, epoch, model):
        super().begin_epoch(epoch, model)
        if not self.training:
            return
        slp = self._slp()
        stage = self.current_stage()
        if stage == ALL:
            if not slp.map_is_fixed and int(slp.gate_steps) == 0:
                raise HltmtConfigError(
                    "stage all needs the routing map learned in stage high, and this model's gate was never "
                    "trained: start from the stage-1 checkpoint (--restore-file STAGE1/checkpoint_last.pt "
                    "--reset-optimizer --reset-dataloader --reset-meters) or run both stages in one job with "
                    "--high-stage-updates N")
            newly = not slp.map_is_fixed
            mapping = self.model.fix_routing_map()
            logger.info(f"HLT-MT stage all (epoch {epoch}, update {self.updates_done()}): routing map "
                        f"{'fixed from the final stage-high gate' if newly else '(fixed)'}: "
                        + ", ".join(f"{lang}->m{k}" for lang, k in mapping.items()))
        else:
            if slp.map_is_fixed:
                raise HltmtConfigError("stage high on a model whose routing map is already fixed (a stage-all "
                                       "checkpoint): the gate can no longer learn; use --hlt-stage all")
            logger.info(f"HLT-MT stage high (epoch {epoch}, update {self.updates_done()}): training "
                        f"{','.join(self.high_pairs)}; the gate learns (current map: "
                        + ", ".join(f"{lang}->m{k}" for lang, k in self.model.routing_map().items()) + ")")

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        result = super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)
        self._note_gradients()
        return result

    def _trained_parameters(self):
        return [p for p in self.model.parameters() if p.requires_grad]

    def _note_gradients(self):
        """Which parameters this worker gave a gradient since the last optimizer step."""
        had = torch.tensor([p.grad is not None for p in self._trained_parameters()])
        self._had_gradient = had if getattr(self, "_had_gradient", None) is None else self._had_gradient | had

    def optimizer_step(self, optimizer, model, update_num):
        self._drop_idle_gradients()
        super().optimizer_step(optimizer, model, update_num)
        self._slp().num_updates = update_num + 1  # the count after this update, for stage decisions
        interval = getattr(self.args, "hlt_param_digest_interval", 0)
        if interval and (update_num + 1) % interval == 0:
            print(f"HLT-MT parameter digest: rank {rank()} update {update_num + 1} {parameter_digest(self.model)}",
                  file=sys.stderr, flush=True)

    def _drop_idle_gradients(self):
        """Parameters that no worker gave a gradient in this update (pool modules a hard step
        did not choose, the gate on hard steps, adapters and skills of languages absent from
        every worker's batch) keep none, so the optimizer skips them as in single-process
        training. legacy_ddp all-reduces a zero gradient for them, and Adam's momentum would
        move them."""
        had, self._had_gradient = getattr(self, "_had_gradient", None), None
        if had is None:
            return
        params = self._trained_parameters()
        if len(params) != had.numel():  # the trainable set changed (a skipped update before a stage switch)
            return
        had = had.to(params[0].device, torch.float)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(had)
        for param, used in zip(params, had.tolist()):
            if used == 0:
                param.grad = None

    def _check_distributed(self, args):
        if getattr(args, "distributed_world_size", 1) <= 1:
            return
        backend = getattr(args, "ddp_backend", "pytorch_ddp")
        if backend in ("c10d", "pytorch_ddp"):
            if getattr(args, "cpu", False):
                raise HltmtConfigError(
                    f"--ddp-backend {backend} does not work on CPU in fairseq 0.12 (it passes device_ids): use "
                    "--ddp-backend legacy_ddp (scripts/launch.py sets it)")
            if not getattr(args, "find_unused_parameters", False):
                raise HltmtConfigError(
                    f"--ddp-backend {backend}: hard routing leaves pool modules, the universal layer or the gate "
                    "without gradient in an update, which PyTorch DDP reports as an error mid-training; add "
                    "--find-unused-parameters, or use --ddp-backend legacy_ddp")
        elif backend == "fully_sharded":
            raise HltmtConfigError("--ddp-backend fully_sharded is not supported with per-sentence routing; use "
                                   "legacy_ddp, or pytorch_ddp with --find-unused-parameters")

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None,
                        prefix_allowed_tokens_fn=None):
        """The parent's generator; also takes ``prefix_allowed_tokens_fn``, which fairseq's hub
        interface (``from_pretrained(...).translate()``) passes and fairseq 0.12's
        multilingual task does not accept (a constrained prefix is not supported here)."""
        if prefix_allowed_tokens_fn is not None:
            raise HltmtConfigError("prefix_allowed_tokens_fn is not supported by --task hltmt_translation")
        return super().build_generator(models, args, seq_gen_cls=seq_gen_cls,
                                       extra_gen_cls_kwargs=extra_gen_cls_kwargs)

    # ---- data ------------------------------------------------------------------------
    def has_sharded_data(self, split):
        stage_changed = (split == getattr(self.args, "train_subset", "train") and self.train_stage is not None
                         and self.train_stage != self.current_stage())
        return stage_changed or super().has_sharded_data(split)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        if not (self.training and split == getattr(self.args, "train_subset", "train")):
            check_split(self.args, split, self.lang_pairs)
            return super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        stage = self.current_stage()
        check_split(self.args, split, self.high_pairs if stage == HIGH else self.lang_pairs)
        if self.train_stage is not None and self.train_stage != stage:
            del self.datasets[split]  # a new stage: new data, not fairseq's next shard
        self.data_manager.pair_filter = self.high_pairs if stage == HIGH else None
        try:
            super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        finally:
            self.data_manager.pair_filter = None
        self.train_stage = stage
        logger.info(f"HLT-MT stage {stage}: training data holds "
                    f"{','.join(self.high_pairs if stage == HIGH else self.lang_pairs)}")

    def get_batch_iterator(self, dataset, **kwargs):
        train = dataset is self.datasets.get(getattr(self.args, "train_subset", "train"))
        if not train:
            # fairseq 0.12's batch_by_size silently drops a last batch whose size is not a
            # multiple of --required-batch-size-multiple (fairseq issue 5036): fairseq-generate
            # would score a test set minus up to 7 sentences. Outside training, batch every
            # sentence.
            kwargs["required_batch_size_multiple"] = 1
        if not (train and self.training and self.args.high_stage_updates > 0
                and self.args.sampling_method != "RoundRobin"):
            return super().get_batch_iterator(dataset, **kwargs)
        sampler = self.create_batch_sampler_func(
            kwargs.get("max_positions"), kwargs.get("ignore_invalid_inputs", False), kwargs.get("max_tokens"),
            kwargs.get("max_sentences"), required_batch_size_multiple=kwargs.get("required_batch_size_multiple", 1),
            seed=kwargs.get("seed", 1))
        epoch = kwargs.get("epoch", 1)
        update_freq = self.args.update_freq
        per_update = update_freq[min(epoch, len(update_freq)) - 1] * kwargs.get("num_shards", 1)
        return StageEpochBatchIterator(
            dataset=dataset, collate_fn=dataset.collater, batch_sampler=sampler, seed=kwargs.get("seed", 1),
            num_shards=kwargs.get("num_shards", 1), shard_id=kwargs.get("shard_id", 0),
            num_workers=kwargs.get("num_workers", 0), epoch=epoch,
            switch_update=self.args.high_stage_updates, batches_per_update=per_update,
            count_updates=self.updates_done)


def rank() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return 0


def parameter_digest(model) -> str:
    """A SHA-1 over every parameter's bytes, in name order."""
    digest = hashlib.sha1()
    for name, param in sorted(model.named_parameters()):
        digest.update(name.encode())
        digest.update(param.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def check_data(args) -> None:
    """The data folder, languages, dictionaries and split files the options name, checked
    before fairseq reads them, so a mistake is one clear line instead of a traceback."""
    from fairseq import utils

    paths = utils.split_paths(args.data) if getattr(args, "data", None) else []
    if not paths or not os.path.isdir(paths[0]):
        raise HltmtConfigError(f"data folder {paths[0] if paths else args.data!r} does not exist (the folder "
                               "that fairseq-preprocess / scripts/prepare_data.py wrote)")
    pairs = args.lang_pairs.split(",") if isinstance(args.lang_pairs, str) else list(args.lang_pairs or [])
    if not pairs:
        raise HltmtConfigError("--lang-pairs is required: the directions in training order, e.g. en-de,de-en")
    malformed = [p for p in pairs if len(p.split("-")) != 2 or not all(p.split("-"))]
    if malformed:
        raise HltmtConfigError(f"--lang-pairs: {','.join(malformed)} is not SRC-TGT")
    inference = args.source_lang is not None or args.target_lang is not None
    if inference:
        if not (args.source_lang and args.target_lang):
            raise HltmtConfigError("give both -s/--source-lang and -t/--target-lang")
        pairs = [f"{args.source_lang}-{args.target_lang}"]
    langs = args.langs
    if isinstance(langs, str):
        langs = langs.split(",")
    if langs is None and getattr(args, "lang_dict", None):
        if not os.path.isfile(args.lang_dict):
            raise HltmtConfigError(f"--lang-dict {args.lang_dict} does not exist")
        langs = [x.strip() for x in open(args.lang_dict, encoding="utf-8") if x.strip()]
    used = sorted({x for p in pairs for x in p.split("-")})
    if langs is not None:
        unknown = [x for x in used if x not in langs]
        if unknown:
            raise HltmtConfigError(f"language(s) {','.join(unknown)} of {'-s/-t' if inference else '--lang-pairs'} "
                                   f"not in --langs / --lang-dict ({','.join(langs)})")
    if not (getattr(args, "source_dict", None) or getattr(args, "fixed_dictionary", None)):
        missing = [x for x in used if not os.path.isfile(os.path.join(paths[0], f"dict.{x}.txt"))]
        if missing:
            raise HltmtConfigError(f"{paths[0]} has no dictionary for {','.join(missing)} (dict.XX.txt): is "
                                   f"that language in the data?")
    if inference:
        for path in filter(None, str(getattr(args, "path", "") or "").split(":")):
            if "://" not in path and not os.path.isfile(path):
                raise HltmtConfigError(f"--path {path}: checkpoint does not exist")


def check_split(args, split: str, pairs: List[str]) -> None:
    """Every pair has binarized data for the split (in either orientation) before fairseq opens it."""
    from fairseq import utils

    folder = utils.split_paths(args.data)[0]
    for pair in pairs:
        src, tgt = pair.split("-")
        names = [f"{split}.{a}-{b}.{src}.idx" for a, b in ((src, tgt), (tgt, src))]
        if not any(os.path.isfile(os.path.join(folder, n)) or
                   os.path.isfile(os.path.join(folder, n[: -len(".idx")] + "0.idx")) for n in names):
            raise HltmtConfigError(f"{folder} has no {split} data for {pair} (looked for {names[0]} and {names[1]})")
