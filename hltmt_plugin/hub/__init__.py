"""One loaded model, any direction (see :mod:`hltmt_plugin.hub.translator`)::

from hltmt_plugin.hub import HltmtTranslator
mt = HltmtTranslator.load("ckpt/checkpoint_best.pt", spm="runs/data/spm/spm.model")
mt.translate_batch([("en", "de", "The file is open."), ("gu", "en", "...")], beam=5)

Importing the hub imports neither torch nor fairseq: loading a checkpoint registers the plugin
with fairseq first; loading an export folder (``hltmt-export``) needs neither
(:mod:`hltmt_plugin.hub.ct2_engine`).
"""

from hltmt_plugin.hub.results import Translation, TranslationErrors  # noqa: F401
from hltmt_plugin.hub.translator import HltmtTranslator, load  # noqa: F401
