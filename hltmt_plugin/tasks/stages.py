"""HLT-MT's two training stages: high-resource directions first, then all.

- ``high``: the training data holds only the directions whose languages are all
  high-resource (``--high-resource-langs``) or pivots (``--pivot-langs``, default ``en``), so
  no batch is spent on a low-resource direction; the gate learns with alternating hard/soft
  updates (the draw lives in the model's ``set_num_updates``).
- ``all``: every direction; at the start of the stage the routing map ``g(l) = argmax p_l``
  is computed from the final gate, printed, stored in the model (and so in every
  checkpoint), and the gate stops training.

Two ways to run it: two fairseq-train runs (``--hlt-stage high``, then ``--hlt-stage all``
from the first's checkpoint), or one run with ``--high-stage-updates N``, whose training
epochs are cut so that the epoch in which update N falls ends exactly at N
(:class:`StageEpochBatchIterator`; the cut is part of the iterator's state, so a resume on
either side of N switches at N too).

Before each training epoch the run's stages are checked against ``--train-only``
(:func:`check_trains_in_run`): a parameter group that no direction of the run's stages reaches
would train nothing.
"""

import logging
import os
from typing import List, Optional, Tuple

from fairseq.data import iterators
from fairseq.data.multilingual.multilingual_data_manager import MultilingualDatasetManager

from hltmt_plugin.compatibility import warn
from hltmt_plugin.errors import HltmtConfigError
from hltmt_plugin.languages import split_list
from hltmt_plugin.peft import (
    ADAPTERS,
    GATE,
    INVERTIBLE_ADAPTERS,
    LANG_TOKEN_ROWS,
    LANGUAGE_ADAPTERS,
    SLP,
    UNIVERSAL,
)
from hltmt_plugin.pool.config import SlpConfig
from hltmt_plugin.pool.modules import module_label
from hltmt_plugin.pool.router import map_text
from hltmt_plugin.tasks import temperature
from hltmt_plugin.tasks.collation import with_row_ids

logger = logging.getLogger(__name__)

HIGH, ALL = "high", "all"


class StageDataManager(MultilingualDatasetManager):
    """fairseq's multilingual data manager, restricted to ``pair_filter`` when it is set; its
    datasets carry each row's language ids (:mod:`hltmt_plugin.tasks.collation`); its sampling
    temperature follows the epoch when scheduled (:mod:`hltmt_plugin.tasks.temperature`)."""

    pair_filter: Optional[List[str]] = None

    def get_split_data_param_list(self, split, epoch, shard_epoch=None):
        params = super().get_split_data_param_list(split, epoch, shard_epoch=shard_epoch)
        if self.pair_filter is not None:
            keep = set(self.pair_filter)
            params = [p for p in params if f"{p['src']}-{p['tgt']}" in keep]
        return params

    def load_langpair_dataset(self, *args, **kwargs):
        return with_row_ids(super().load_langpair_dataset(*args, **kwargs))

    def get_train_sampling_ratios(self, data_param_list, datasets, epoch=1, shard_epoch=None):
        if not temperature.scheduled(self.args):
            return super().get_train_sampling_ratios(data_param_list, datasets, epoch, shard_epoch)
        sizes = self.get_train_dataset_sizes(data_param_list, datasets, epoch, shard_epoch)
        return temperature.sampling_ratios(self.args, sizes, epoch)


class StageSchedule:
    """Which stage a training run is in, and the directions of stage high."""

    def __init__(self, args, lang_pairs: List[str]):
        self.args = args
        if args.high_stage_updates < 0:
            raise HltmtConfigError(f"--high-stage-updates must be >= 0, got {args.high_stage_updates}")
        if args.high_stage_updates > 0 and args.hlt_stage == ALL:
            raise HltmtConfigError(
                "--hlt-stage all cannot be combined with --high-stage-updates (which runs stage high first)"
            )
        if args.high_stage_updates > 0 and args.sampling_method == "RoundRobin":
            raise HltmtConfigError(
                "--high-stage-updates cuts the training epoch at the stage switch, which "
                "--sampling-method RoundRobin does not allow: use temperature or uniform "
                "sampling, or two runs (--hlt-stage high, then --hlt-stage all)"
            )
        self.high_langs = SlpConfig.from_namespace(args).high_langs
        keep = set(self.high_langs) | set(split_list(args.pivot_langs))
        self.high_pairs = [p for p in lang_pairs if set(p.split("-")) <= keep]
        self.all_pairs = list(lang_pairs)
        if not self.high_pairs and self.uses_high():
            raise HltmtConfigError(
                f"stage high has no direction to train: no pair of --lang-pairs has only high-resource "
                f"({','.join(self.high_langs)}) or pivot ({args.pivot_langs}) languages"
            )
        self.dropped_warned = False

        # fairseq's trainer restarts its update count at 0 when it loads a checkpoint with
        # --reset-optimizer (or --finetune-from-model's first launch), but it still hands the
        # checkpoint's count to the model (Trainer.load_checkpoint -> model.set_num_updates).
        self.count_restarts = restarts_update_count(args)
        self.count_checked = False

    def warn_dropped_pairs(self) -> None:
        """Say once, when training data is first loaded (not when a model is only loaded to
        translate), which pairs of --lang-pairs stage high leaves out, and when they train."""
        dropped = [p for p in self.all_pairs if p not in self.high_pairs]
        if self.dropped_warned or not dropped or not self.uses_high():
            return
        self.dropped_warned = True
        switch, end = self.args.high_stage_updates, getattr(self.args, "max_update", 0) or 0
        if switch > 0 and 0 < end <= switch:
            when = (
                f"are NOT trained in this run: --max-update {end} ends it in stage high, which runs to update "
                f"{switch}; resume with --max-update above {switch} for stage all"
            )
        elif switch > 0:
            when = f"wait for stage all (after update {switch})"
        else:
            when = (
                "are NOT trained in this run: train them with a second run --hlt-stage all from this run's "
                "checkpoint, or run both stages in one with --high-stage-updates N"
            )
        logger.warning(
            f"HLT-MT stage high trains {','.join(self.high_pairs)} only; {','.join(dropped)} of --lang-pairs {when}"
        )

    def follow_restarted_count(self, model) -> None:
        """Once, before the run's first stage decision (the task calls it as the training data
        is first loaded: after the checkpoint load, before the first update): where fairseq's
        trainer restarts its update count at 0, set the model's count to 0 too, so that stage
        decisions, the stage line and the epoch cut count as fairseq counts:
        ``--high-stage-updates`` and ``--max-update`` alike. The model's count is what fairseq's
        trainer gave it: the checkpoint's count on load, then the trainer's count at every step.
        Data loaded before any model is built (``model`` None) waits for the model's first load."""
        if self.count_checked or model is None:
            return
        self.count_checked = True
        router = model.slp_router
        if self.count_restarts and router.num_updates:
            logger.info(
                f"HLT-MT: the checkpoint was saved after {router.num_updates} updates; fairseq's update "
                f"count restarts at 0 ({self.count_restarts}), and so do the stages' "
                f"(--high-stage-updates counts from here)"
            )
            model.set_num_updates(0)  # the router's count, through fairseq's own hand-off

    def uses_high(self) -> bool:
        return self.args.high_stage_updates > 0 or self.args.hlt_stage in (None, HIGH)

    def stage(self, updates_done: int) -> str:
        if self.args.high_stage_updates > 0:
            return HIGH if updates_done < self.args.high_stage_updates else ALL
        return self.args.hlt_stage or HIGH

    def stages_ahead(self, updates_done: int) -> List[str]:
        """The stages this run goes through from ``updates_done`` to ``--max-update``."""
        now = self.stage(updates_done)
        switch, end = self.args.high_stage_updates, getattr(self.args, "max_update", 0) or 0
        if now == HIGH and switch > 0 and not 0 < end <= switch:
            return [HIGH, ALL]
        return [now]

    def pairs(self, stage: str) -> List[str]:
        return self.high_pairs if stage == HIGH else self.all_pairs

    def begin_epoch(self, model, epoch: int, updates_done: int) -> None:
        """Fix the routing map at the start of stage all; refuse a model that cannot run the stage."""
        router = model.slp_router
        check_trains_in_run(
            model,
            [(stage, self.pairs(stage)) for stage in self.stages_ahead(updates_done)],
            self.high_langs,
            self.args,
            self.args.high_stage_updates,
        )
        if self.stage(updates_done) == ALL:
            if not router.map_is_fixed and 0 < self.args.high_stage_updates < updates_done:
                raise stage_high_passed(updates_done, self.args.high_stage_updates)
            if not router.map_is_fixed and int(router.gate_steps) == 0:
                raise HltmtConfigError(
                    "stage all needs the routing map learned in stage high, and this model's gate was never "
                    "trained: start from the stage-1 checkpoint (--restore-file STAGE1/checkpoint_last.pt "
                    "--reset-optimizer --reset-dataloader --reset-meters) or run both stages in one job with "
                    "--high-stage-updates N"
                )
            newly = not router.map_is_fixed
            mapping = model.fix_map()
            logger.info(
                f"HLT-MT stage all (epoch {epoch}, update {updates_done}): routing map "
                f"{'fixed from the final stage-high gate' if newly else '(fixed)'}: {map_text(mapping)}"
            )
        else:
            switch = self.args.high_stage_updates
            if router.map_is_fixed and switch > 0:
                raise HltmtConfigError(
                    f"the checkpoint is past the stage switch (its routing map is fixed; this run goes on from update "
                    f"{updates_done}), and --high-stage-updates {switch} asks for stage high until update {switch}: "
                    f"resume with the --high-stage-updates of the run that wrote it (or any value up to "
                    f"{updates_done}: the switch is behind)"
                )
            if router.map_is_fixed:
                raise HltmtConfigError(
                    "stage high on a model whose routing map is already fixed (a stage-all "
                    "checkpoint): the gate can no longer learn; use --hlt-stage all"
                )
            logger.info(
                f"HLT-MT stage high (epoch {epoch}, update {updates_done}): training "
                f"{','.join(self.high_pairs)}; the gate learns (current map: {map_text(model.map_by_language())})"
            )


# ---- what a --train-only group needs from the run: checked before the first update
# the adapter kind each adapter group of --train-only holds (None: every per-language kind)
ADAPTER_KINDS = {ADAPTERS: None, LANGUAGE_ADAPTERS: "language", INVERTIBLE_ADAPTERS: "invertible"}


def _unused_reason(
    group: str, langs: Optional[List[str]], stage: str, pairs: List[str], high: List[str], args, model
) -> Optional[str]:
    """Why no direction of ``pairs`` reaches ``group`` in ``stage``, or None when one does: the
    modules a direction reaches are the model's one rule (its pool's routing, its adapter
    layout's :meth:`~hltmt_plugin.adapters.config.AdapterLayout.adapters_of`)."""
    targets = [p.split("-")[1] for p in pairs]
    where = f"the directions of stage {stage} ({','.join(pairs)})"
    hint = (
        " (stage high trains only directions between high-resource and pivot languages: add --hlt-stage all)"
        if stage == "high"
        else ""
    )
    if group == GATE:
        if SlpConfig.from_namespace(args).slp_language_specific:
            return "--slp-language-specific fixes the routing map when the model is built, so the gate never learns"
        if model.slp is not None and model.slp.pool_size < 2:
            return "a pool of one module (--slp-pool-size 1) leaves the gate nothing to choose"
        if stage == "all":
            return (
                "the gate learns only in stage high; in stage all the routing map is fixed and the gate frozen "
                "(train the gate with --hlt-stage high)"
            )
        return None
    routes = {model.slp_route(tgt) for tgt in targets} if model.slp is not None else set()
    universal = module_label(model.slp.pool_size, model.slp.pool_size) if model.slp is not None else None
    if group == SLP and routes <= {universal}:
        return f"the pool modules serve high-resource targets ({','.join(high)}), and no target of {where} is one"
    if group == UNIVERSAL and universal not in routes:
        return f"the universal layer serves the other targets, and every target of {where} is high-resource"
    if group == LANG_TOKEN_ROWS and langs and not set(targets) & set(langs):
        return f"the row of __xx__ is read for target language xx, and no target of {where} is {'+'.join(langs)}{hint}"
    layout = model.encoder.adapter_layout
    if group in ADAPTER_KINDS and langs and layout is not None:
        kind = ADAPTER_KINDS[group]
        served = [
            (side, lang) for p in pairs for side, k, lang in layout.adapters_of(*p.split("-")) if kind in (None, k)
        ]
        if not {lang for _, lang in served} & set(langs):
            chosen = {
                "encoder": "the encoder's are chosen by the source language",
                "decoder": "the decoder's by the target",
            }
            how = (
                "; ".join(chosen[side] for side in sorted({side for side, _ in served})) or "no adapter is per language"
            )
            return f"none of {where} goes through the adapters of {'+'.join(langs)} ({how}){hint}"
    return None


def check_capacity_used(high: List[str], pairs: List[str]) -> None:
    """Refuse a high-resource language that no direction translates into, of the run's or of those
    the model it starts from was trained on (``pairs``): the pool would reserve a module's share
    for it that nothing ever trains, while a language with data goes to the universal layer (the
    rule ``--train-only`` follows: capacity named for nothing)."""
    targets = {pair.split("-")[1] for pair in pairs}
    unused = [lang for lang in high if lang not in targets]
    if unused:
        raise HltmtConfigError(
            f"--high-resource-langs names {','.join(unused)}, which no direction of --lang-pairs translates into: "
            "a pool module would be kept for it that nothing trains; name target languages of the run's "
            f"directions ({','.join(sorted(targets))})"
        )


def check_trains_in_run(model, run: List[Tuple[str, List[str]]], high: List[str], args, switch: int = 0) -> None:
    """Refuse a ``--train-only`` that trains nothing: a group that no direction of the run
    reaches (``gate`` in stage all, ``adapters:hi`` in stage high), or a stage of the run in
    which no chosen group trains (``gate`` with ``--high-stage-updates``). ``run``: (stage, its
    directions) for each stage the run goes through from here; :meth:`StageSchedule.begin_epoch`
    calls this at the start of each training epoch, before its first update."""
    items = getattr(model, "train_only_items", None)
    if not items or not run:
        return
    spec = lambda group, langs: group + (":" + "+".join(langs) if langs else "")  # noqa: E731
    reasons = {
        (group, tuple(langs or ())): [
            _unused_reason(group, langs, stage, pairs, high, args, model) for stage, pairs in run
        ]
        for group, langs in items
    }
    for (group, langs), why in reasons.items():
        if all(why):
            raise HltmtConfigError(f"--train-only {spec(group, langs)} trains nothing in this run: {why[-1]}")
    for i, (stage, _) in enumerate(run):
        if all(why[i] for why in reasons.values()):
            first = next(iter(reasons.values()))[i]
            raise HltmtConfigError(
                f"--train-only {getattr(args, 'train_only', '')} trains nothing in stage {stage}, which this run "
                f"enters at update {switch} (--high-stage-updates): {first}; end the run at the switch "
                f"(--max-update {switch}) or add a group that trains in stage {stage}"
            )


def stage_high_passed(updates_done: int, switch: int) -> HltmtConfigError:
    """A checkpoint of stage high resumed with a --high-stage-updates it has passed already."""
    return HltmtConfigError(
        f"the checkpoint was saved at update {updates_done}, in stage high (its routing map is not fixed yet), and "
        f"--high-stage-updates {switch} would have ended stage high before that: resume with the "
        "--high-stage-updates of the run that wrote it, or a larger one"
    )


def restarts_update_count(args) -> Optional[str]:
    """The option under which fairseq's trainer starts counting updates at 0 although it loads
    a checkpoint (fairseq's checkpoint_utils.load_checkpoint), or None."""
    if getattr(args, "reset_optimizer", False):
        return "--reset-optimizer"
    finetune = getattr(args, "finetune_from_model", None)
    if (
        finetune
        and getattr(args, "restore_file", "checkpoint_last.pt") == "checkpoint_last.pt"
        and not os.path.exists(os.path.join(getattr(args, "save_dir", ""), "checkpoint_last.pt"))
    ):
        return "--finetune-from-model"
    return None


class StageEpochBatchIterator(iterators.EpochBatchIterator):
    """Ends the training epoch in which update ``switch_update`` falls exactly there.

    ``start_update`` (the update count when the epoch began) is part of the iterator's
    state, so a resumed run rebuilds the same cut epoch. Only an epoch of stage high is cut
    (``map_fixed()`` false): a run resumed after the switch with another
    ``--high-stage-updates`` goes on as the run that switched.
    """

    def __init__(
        self,
        *args,
        switch_update: int,
        batches_per_update: int,
        count_updates,
        map_fixed,
        max_epoch: int = 0,
        max_update: int = 0,
        **kwargs,
    ):
        self.switch_update, self.batches_per_update, self.count_updates = (
            switch_update,
            batches_per_update,
            count_updates,
        )
        self.map_fixed = map_fixed
        self.max_epoch, self.max_update = max_epoch or 0, max_update or 0
        self.start_update = None
        super().__init__(*args, **kwargs)

    @property
    def frozen_batches(self):
        if self._frozen_batches is None:
            if self.start_update is None:
                self.start_update = self.count_updates()
            batches = tuple(self.batch_sampler(self.dataset, self.epoch))
            left = self.switch_update - self.start_update
            if 0 < left and left * self.batches_per_update < len(batches) and not self.map_fixed():
                self.check_stage_all_runs()
                batches = batches[: left * self.batches_per_update]
                logger.info(
                    f"HLT-MT: epoch {self.epoch} ends at update {self.switch_update} "
                    f"(end of stage high) after {len(batches)} batches"
                )
            self._frozen_batches = batches
        return self._frozen_batches

    def check_stage_all_runs(self) -> None:
        """Say, when the epoch begins, that ``--max-epoch`` makes this epoch cut at the switch the
        run's last (fairseq counts the cut epoch as one) while ``--max-update`` goes beyond it:
        stage all does not run in this run, only in one that resumes from its checkpoint (as a
        schedule of runs does, examples/wmt10's temperature epochs)."""
        wants_all = self.max_update == 0 or self.max_update > self.switch_update
        if self.max_epoch and self.epoch >= self.max_epoch and wants_all:
            warn(
                f"--max-epoch {self.max_epoch} ends this run with epoch {self.epoch}, which --high-stage-updates "
                f"{self.switch_update} ends at the stage switch (a cut epoch counts as one): stage all does not run "
                f"in this run; it begins when a run resumes from its checkpoint_last.pt (or give --max-epoch "
                f"{self.epoch + 1} or more)"
            )

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
        self.epoch, done = state_dict["epoch"], state_dict.get("iterations_in_epoch", 0)
        if done > 0 and done >= len(self.frozen_batches):  # fairseq: "dataloader mismatch"
            raise stage_high_passed(self.count_updates(), self.switch_update)
        super().load_state_dict(state_dict)
