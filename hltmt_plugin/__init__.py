"""hltmt_plugin: language-specific capacity for multilingual NMT, as a fairseq user-dir.

``--user-dir hltmt_plugin`` (or ``import hltmt_plugin``) registers the task
``hltmt_translation``, the model ``hltmt_transformer`` and its architectures, and the
criterion ``hltmt_cross_entropy``; :func:`hltmt_plugin.compat.install` applies the
version-gated workarounds of fairseq / torch behaviour (safe checkpoint loading, atomic
checkpoint copies, one-line errors), listed in :mod:`hltmt_plugin.compat`.
"""
from hltmt_plugin import compat

compat.install()

from hltmt_plugin import criterions, models, tasks  # noqa: E402,F401  (register with fairseq)

__version__ = "0.1.0"
