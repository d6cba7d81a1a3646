"""``hltmt_translation``: fairseq's ``translation_multi_simple_epoch`` + HLT-MT's two stages.

Every option of the parent task keeps working (``--lang-pairs``, ``--langs`` /
``--lang-dict``, ``--encoder-langtok``, ``--decoder-langtok``, sampling options). With a
model that is not ``hltmt_transformer*`` (no ``--high-resource-langs``) the task trains,
validates and generates exactly as its parent; the stage options then do nothing.

What lives where: the stages in :mod:`~hltmt_plugin.tasks.stages`, the distributed rules in
:mod:`~hltmt_plugin.tasks.distributed`, the data checks in
:mod:`~hltmt_plugin.tasks.data_checks`, per-row language ids in
:mod:`~hltmt_plugin.tasks.collation`.
"""

import logging
import sys
from argparse import Namespace

from fairseq.tasks import register_task
from fairseq.tasks.translation_multi_simple_epoch import TranslationMultiSimpleEpochTask

from hltmt_plugin.compatibility import stored_options
from hltmt_plugin.config import check_finite
from hltmt_plugin.directions import TRAINED_KEY, ZERO_SHOT, TrainedDirections, extend_trained, trained_pairs
from hltmt_plugin.errors import HltmtConfigError
from hltmt_plugin.model_check import check_options
from hltmt_plugin.models.hltmt_transformer import plugin_model, pool_model
from hltmt_plugin.pool.config import SlpConfig
from hltmt_plugin.pretrained import PretrainedConfig, load_pretrained
from hltmt_plugin.process import running_fairseq
from hltmt_plugin.tasks import save_dir, temperature
from hltmt_plugin.tasks.checkpoint_checks import check_checkpoint_to_load, check_record, stamp_record
from hltmt_plugin.tasks.data_checks import (
    OverlongInputs,
    check_data,
    check_split,
    name_skipped_pairs,
    refuse_overlong_pairs,
)
from hltmt_plugin.tasks.distributed import IdleGradients, check_ddp_backend, check_precision, parameter_digest, rank
from hltmt_plugin.tasks.stages import (
    ALL,
    HIGH,
    StageDataManager,
    StageEpochBatchIterator,
    StageSchedule,
    check_capacity_used,
)

logger = logging.getLogger(__name__)


@register_task("hltmt_translation")
class HltmtTranslationTask(TranslationMultiSimpleEpochTask):
    """Multilingual translation with HLT-MT's language-specific decoder top and stages."""

    # a zero-shot direction is decoded, with a line on stderr (check_direction); fairseq's own task
    # refuses it (hltmt_plugin.compat.direction_rule)
    decodes_zero_shot = True

    @staticmethod
    def add_args(parser):
        TranslationMultiSimpleEpochTask.add_args(parser)
        parser.add_argument(
            "--hlt-stage",
            choices=[HIGH, ALL],
            default=None,
            help="HLT-MT training stage: 'high' trains the high-resource directions and "
            "learns the gate; 'all' trains every direction with the routing map fixed "
            "from the gate (default: high, or as --high-stage-updates says)",
        )
        parser.add_argument(
            "--high-stage-updates",
            type=int,
            default=0,
            metavar="N",
            help="one run for both stages: stage high for the first N updates, then stage all (0: off)",
        )
        parser.add_argument(
            "--hlt-param-digest-interval",
            type=int,
            default=0,
            metavar="N",
            help="every N updates, print each rank's parameter digest to stderr (check that "
            "distributed workers stay identical; 0: off)",
        )
        parser.add_argument(
            "--pivot-langs",
            default="en",
            metavar="LANGS",
            help="comma-separated languages that are neither high- nor low-resource (the "
            "hub of an English-centric corpus); stage high trains the directions whose "
            "languages are all high-resource or pivots",
        )
        temperature.add_args(parser)

    @classmethod
    def setup_task(cls, args, **kwargs):
        check_finite(args)  # nan / inf in any floating-point option
        temperature.check(args)
        check_data(args)
        save_dir.prepare(args)
        task = super().setup_task(args, **kwargs)
        loaded = check_checkpoint_to_load(args, task)  # resume, --restore-file, --finetune-from-model
        # the directions the model this run starts from was trained on: kept (extend_trained)
        task.trained_before = trained_pairs(stored_options(loaded)) if loaded is not None else []
        return task

    def __init__(self, args, langs, dicts, training):
        super().__init__(args, langs, dicts, training)
        self.data_manager = StageDataManager(args, self.lang_pairs, langs, dicts, self.sampling_method)
        self.model = None
        self.trained_before = []  # the trained directions of the checkpoint this run starts from (setup_task)
        self.train_stage = None  # the stage of the loaded training data
        self.idle_gradients = IdleGradients()
        self.stages = None  # HLT-MT's stage schedule; None: the parent task's training
        self.overlong_inputs = OverlongInputs()
        if training and SlpConfig.from_namespace(args).high_langs:
            self.stages = StageSchedule(args, self.lang_pairs)
        elif training and (args.hlt_stage is not None or args.high_stage_updates):
            logger.info(
                "hltmt_translation: --hlt-stage / --high-stage-updates do nothing for a model without "
                "--high-resource-langs: every direction of --lang-pairs trains"
            )

    def updates_done(self) -> int:
        """fairseq's own update count (the ``num_updates`` of its progress lines): the model's,
        which follows a trainer that restarted its count from the first training data on
        (:meth:`StageSchedule.follow_restarted_count`)."""
        model = pool_model(self.model)
        return 0 if model is None else model.slp_router.num_updates

    def current_stage(self) -> str:
        return self.stages.stage(self.updates_done()) if self.stages is not None else ALL

    def build_model(self, args, from_checkpoint=False):
        if from_checkpoint:
            check_record(args, self)  # a checkpoint's record against these options
            self.check_direction(args)
        check_options(args, "the model's options")  # before fairseq's modules assert on them
        model = super().build_model(args, from_checkpoint)
        if not from_checkpoint:
            stamp_record(args, self)  # saved in every checkpoint
            setattr(args, TRAINED_KEY, ",".join(extend_trained(self.trained_before, self.lang_pairs)))
        ours = plugin_model(model) is not None
        if self.training and ours:
            check_ddp_backend(args)
            check_precision(args)
        pretrained = PretrainedConfig.from_namespace(args)  # its declared path checked
        if not from_checkpoint and pretrained.pretrained_xlmr_checkpoint:
            load_pretrained(
                model,
                pretrained.pretrained_xlmr_checkpoint,
                self.source_dictionary,
                getattr(args, "pretrained_xlmr_decoder", False),
            )
        if self.stages is not None and pool_model(model) is None:
            raise HltmtConfigError("--high-resource-langs and the HLT-MT stages need --arch hltmt_transformer*")
        self.model = model
        return model

    def check_direction(self, trained_args) -> None:
        """Decoding one direction (``-s SRC -t TGT``) with a checkpoint whose stored options
        (``trained_args``) name its training directions (:mod:`hltmt_plugin.directions`): a
        target the model never produced, or a source it never read, is refused; a direction
        outside the trained ones is decoded with a line on stderr naming it."""
        src, tgt = getattr(self.args, "source_lang", None), getattr(self.args, "target_lang", None)
        directions = TrainedDirections.from_options(trained_args) if isinstance(trained_args, Namespace) else None
        if not (src and tgt) or directions is None:
            return
        if directions.check_command(src, tgt, zero_shot=True) == ZERO_SHOT:
            print(
                f"hltmt_translation: direction {src}-{tgt} is zero-shot: the checkpoint was {directions.describe()}; "
                "its output may not be in the target language",
                file=sys.stderr,
                flush=True,
            )

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, prefix_allowed_tokens_fn=None):
        """The parent's generator; also takes ``prefix_allowed_tokens_fn``, which fairseq's hub
        interface (``from_pretrained(...).translate()``) passes and fairseq 0.12's
        multilingual task does not accept (a constrained prefix is not supported here)."""
        if prefix_allowed_tokens_fn is not None:
            raise HltmtConfigError("prefix_allowed_tokens_fn is not supported by --task hltmt_translation")
        beam, size = getattr(args, "beam", None), len(self.target_dictionary)
        if isinstance(beam, int) and beam > size:
            raise HltmtConfigError(
                f"--beam {beam} is larger than the model's vocabulary ({size} symbols): a beam "
                f"keeps at most one hypothesis per symbol; give at most {size}"
            )
        return super().build_generator(models, args, seq_gen_cls=seq_gen_cls, extra_gen_cls_kwargs=extra_gen_cls_kwargs)

    # ---- training ----------------------------------------------------------------------
    def begin_epoch(self, epoch, model):
        super().begin_epoch(epoch, model)
        if self.training and self.stages is not None:
            # capacity for a language no direction reaches, of this run or of the model's earlier runs
            check_capacity_used(self.stages.high_langs, [*self.stages.all_pairs, *self.trained_before])
            self.stages.begin_epoch(self.model, epoch, self.updates_done())

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        result = super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)
        self.idle_gradients.note(self.model)
        return result

    def optimizer_step(self, optimizer, model, update_num):
        self.idle_gradients.drop(self.model, optimizer)
        super().optimizer_step(optimizer, model, update_num)
        if pool_model(self.model) is not None:  # the count after this update, for stage decisions
            self.model.set_num_updates(update_num + 1)
        interval = getattr(self.args, "hlt_param_digest_interval", 0)
        if interval and (update_num + 1) % interval == 0:
            print(
                f"HLT-MT parameter digest: rank {rank()} update {update_num + 1} {parameter_digest(self.model)}",
                file=sys.stderr,
                flush=True,
            )

    # ---- data ------------------------------------------------------------------------
    def _is_train(self, split) -> bool:
        return self.training and split == getattr(self.args, "train_subset", "train")

    def has_sharded_data(self, split):
        stage_changed = (
            self._is_train(split) and self.train_stage is not None and self.train_stage != self.current_stage()
        )
        new_temperature = self._is_train(split) and temperature.scheduled(self.args)  # reloaded every epoch
        return stage_changed or new_temperature or super().has_sharded_data(split)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        if self._is_train(split) and plugin_model(self.model) is not None:  # before the first update, every stage
            self.model.check_trainable(self.lang_pairs)
        if not self._is_train(split) or self.stages is None:
            check_split(self.args, split, self.lang_pairs)
            return super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        self.stages.warn_dropped_pairs()
        self.stages.follow_restarted_count(pool_model(self.model))  # before the run's first stage decision
        stage = self.current_stage()
        pairs = self.stages.pairs(stage)
        check_split(self.args, split, pairs)
        if self.train_stage is not None and self.train_stage != stage:
            del self.datasets[split]  # a new stage: new data, not fairseq's next shard
        self.data_manager.pair_filter = pairs if stage == HIGH else None
        try:
            super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        finally:
            self.data_manager.pair_filter = None
        self.train_stage = stage
        logger.info(f"HLT-MT stage {stage}: training data holds {','.join(pairs)}")

    def filter_indices_by_size(self, indices, dataset, max_positions=None, ignore_invalid_inputs=False):
        """fairseq-interactive's input (a dataset no split loaded): a line longer than the model
        takes is reported and skipped, the other lines translated (:class:`OverlongInputs`). A
        loaded split with such pairs, where fairseq would stop with a traceback: one line
        (:func:`refuse_overlong_pairs`)."""
        if (
            not self.training
            and max_positions is not None
            and running_fairseq("interactive")
            and all(dataset is not d for d in self.datasets.values())
        ):
            return self.overlong_inputs.filter(indices, dataset, max_positions)
        split = next((name for name, d in self.datasets.items() if d is dataset), "input")
        if max_positions is not None and not ignore_invalid_inputs:
            return refuse_overlong_pairs(indices, dataset, max_positions, split)
        if max_positions is not None and not self.training and running_fairseq("generate"):
            return name_skipped_pairs(indices, dataset, max_positions, split)
        return super().filter_indices_by_size(indices, dataset, max_positions, ignore_invalid_inputs)

    def get_batch_iterator(self, dataset, **kwargs):
        train = dataset is self.datasets.get(getattr(self.args, "train_subset", "train"))
        if not train:
            # fairseq 0.12's batch_by_size silently drops a last batch whose size is not a
            # multiple of --required-batch-size-multiple (fairseq issue 5036): fairseq-generate
            # would score a test set minus up to 7 sentences. Outside training, batch every
            # sentence.
            kwargs["required_batch_size_multiple"] = 1
        if not (train and self.training and self.stages is not None and self.args.high_stage_updates > 0):
            return super().get_batch_iterator(dataset, **kwargs)
        return self._stage_iterator(dataset, **kwargs)

    def _stage_iterator(self, dataset, **kwargs):
        """The training iterator of a one-run schedule: its epochs end at the stage switch."""
        sampler = self.create_batch_sampler_func(
            kwargs.get("max_positions"),
            kwargs.get("ignore_invalid_inputs", False),
            kwargs.get("max_tokens"),
            kwargs.get("max_sentences"),
            required_batch_size_multiple=kwargs.get("required_batch_size_multiple", 1),
            seed=kwargs.get("seed", 1),
        )
        epoch = kwargs.get("epoch", 1)
        update_freq = self.args.update_freq
        per_update = update_freq[min(epoch, len(update_freq)) - 1] * kwargs.get("num_shards", 1)
        return StageEpochBatchIterator(
            dataset=dataset,
            collate_fn=dataset.collater,
            batch_sampler=sampler,
            seed=kwargs.get("seed", 1),
            num_shards=kwargs.get("num_shards", 1),
            shard_id=kwargs.get("shard_id", 0),
            num_workers=kwargs.get("num_workers", 0),
            epoch=epoch,
            switch_update=self.args.high_stage_updates,
            batches_per_update=per_update,
            count_updates=self.updates_done,
            map_fixed=lambda: self.model.slp_router.map_is_fixed,
            max_epoch=getattr(self.args, "max_epoch", 0),
            max_update=getattr(self.args, "max_update", 0),
        )
