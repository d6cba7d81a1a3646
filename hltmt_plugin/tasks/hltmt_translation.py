"""``hltmt_translation``: fairseq's ``translation_multi_simple_epoch`` for HLT-MT models.

Every option of the parent task keeps working (``--lang-pairs``, ``--langs`` /
``--lang-dict``, ``--encoder-langtok``, ``--decoder-langtok``, sampling options). The
per-update hard/soft routing draw lives in the model (``set_num_updates``), which fairseq
calls from ``train_step`` with the update number, so it agrees across workers and resumes.
"""
from fairseq.tasks import register_task
from fairseq.tasks.translation_multi_simple_epoch import TranslationMultiSimpleEpochTask


@register_task("hltmt_translation")
class HltmtTranslationTask(TranslationMultiSimpleEpochTask):
    """Multilingual translation with HLT-MT's language-specific decoder top."""

    def get_batch_iterator(self, dataset, **kwargs):
        # fairseq 0.12's batch_by_size silently drops a last batch whose size is not a
        # multiple of --required-batch-size-multiple (fairseq issue 5036): fairseq-generate
        # would score a test set minus up to 7 sentences. Outside training, batch every
        # sentence.
        if dataset is not self.datasets.get(getattr(self.args, "train_subset", "train")):
            kwargs["required_batch_size_multiple"] = 1
        return super().get_batch_iterator(dataset, **kwargs)
