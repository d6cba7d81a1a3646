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
