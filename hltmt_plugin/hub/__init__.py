"""One loaded model, any direction (see :mod:`hltmt_plugin.hub.translator`)::

from hltmt_plugin.hub import HltmtTranslator
mt = HltmtTranslator.load("ckpt/checkpoint_best.pt", spm="runs/data/spm/spm.model")
mt.translate_batch([("en", "de", "The file is open."), ("gu", "en", "...")], beam=5)
"""

import hltmt_plugin

hltmt_plugin.register()  # the task, model and safe loading, before any module of the hub imports fairseq

from hltmt_plugin.hub.results import Translation, TranslationErrors  # noqa: E402,F401
from hltmt_plugin.hub.translator import HltmtTranslator, load  # noqa: E402,F401
