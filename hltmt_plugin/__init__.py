"""hltmt_plugin: language-specific capacity for multilingual NMT, as a fairseq user-dir.

``--user-dir hltmt_plugin`` (or ``import hltmt_plugin``) registers the task
``hltmt_translation``, the model ``hltmt_transformer`` and its architectures, makes
checkpoints load safely under torch >= 2.6, gives ``--enable-lang-ids`` one language id per
sentence in mixed batches, and turns the plugin's own errors into one clear line on the
command line.
"""
from hltmt_plugin.checkpoints import install_safe_loading
from hltmt_plugin.errors import install_excepthook
from hltmt_plugin.lang_ids import install_per_row_lang_ids

install_safe_loading()
install_excepthook()
install_per_row_lang_ids()

from hltmt_plugin import criterions, models, tasks  # noqa: E402,F401  (register with fairseq)

__version__ = "0.1.0"
