"""hltmt_plugin: language-specific capacity for multilingual NMT, as a fairseq user-dir.

``--user-dir hltmt_plugin`` (or ``import hltmt_plugin``) registers the task
``hltmt_translation``, the model ``hltmt_transformer`` and its architectures, and the
criterion ``hltmt_cross_entropy``; :func:`hltmt_plugin.compat.install` applies the
version-gated workarounds of fairseq / torch behaviour (safe checkpoint loading, atomic
checkpoint copies, one-line errors), listed in :mod:`hltmt_plugin.compat`.

The plugin's installed commands (``hltmt-translate``, ...) import the package without torch
and fairseq, read their arguments (``--help``, ``--version`` and argument errors answer at
once) and then call :func:`register`; so does the Python API (:mod:`hltmt_plugin.hub`).
"""

import os
import sys

from hltmt_plugin.errors import install_excepthook

__version__ = "0.2.0"

_registered = False


def register() -> None:
    """Register the task, model, architectures and criterion with fairseq and apply the
    workarounds of :mod:`hltmt_plugin.compat` (imports torch and fairseq; once per process)."""
    global _registered
    if _registered:
        return
    _registered = True
    try:
        from hltmt_plugin import compat

        compat.install()
        from hltmt_plugin import criterions, models, tasks  # noqa: F401  (register with fairseq)
    except BaseException:
        _registered = False
        raise


def installed_command() -> bool:
    """Whether this process is one of the plugin's installed commands (``hltmt-translate``,
    ...), started by its console script: those register after reading their arguments."""
    argv = getattr(sys, "argv", None) or [""]
    return os.path.basename(str(argv[0])).startswith("hltmt-")


install_excepthook()  # an HltmtError ends in one line, also before registration
if not installed_command():
    register()
