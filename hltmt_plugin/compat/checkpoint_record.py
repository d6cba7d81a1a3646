"""Every checkpoint fairseq writes while the plugin is loaded carries the compatibility record,
whatever the task (fairseq 0.12 ``checkpoint_utils.save_checkpoint``).

The plugin's task stores the record in its model's options when it builds a new model
(:mod:`hltmt_plugin.tasks.checkpoint_checks`); fairseq's own tasks store none, so a model trained
by ``--task translation_multi_simple_epoch --user-dir hltmt_plugin`` (the MNMT baseline) would be
served later without a record to compare. Here ``save_checkpoint`` (the one function fairseq-train
writes its checkpoints through: ``checkpoint_last.pt``, ``checkpoint_best.pt``, the epoch and update
ones) first hands the trainer to the stamp that the task's layer gives (:func:`stamp_with`:
the compat layer knows no record), which stores the same record in the trainer's model options
where none is there yet; ``fairseq.trainer.Trainer.state_dict`` then saves it with the options.
"""

import functools

_stamp = None  # the trainer's stamp (tasks.checkpoint_checks.stamp_checkpoint), given at registration


def stamp_with(stamp) -> None:
    """``stamp(trainer)`` runs before every checkpoint fairseq-train writes."""
    global _stamp
    _stamp = stamp


def install(checkpoint_utils) -> None:
    save = checkpoint_utils.save_checkpoint
    if getattr(save, "hltmt_record", False):
        return

    @functools.wraps(save)
    def save_checkpoint(cfg, trainer, epoch_itr, val_loss):
        if _stamp is not None:
            _stamp(trainer)
        return save(cfg, trainer, epoch_itr, val_loss)

    save_checkpoint.hltmt_record = True
    checkpoint_utils.save_checkpoint = save_checkpoint
