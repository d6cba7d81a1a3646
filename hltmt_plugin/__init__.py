"""hltmt_plugin: language-specific capacity for multilingual NMT, as a fairseq user-dir.

``--user-dir hltmt_plugin`` (or ``import hltmt_plugin``) registers the task
``hltmt_translation``, the model ``hltmt_transformer`` and its architectures, and the
criterion ``hltmt_cross_entropy``; :func:`hltmt_plugin.compat.install` applies the
version-gated workarounds of fairseq / torch behaviour (safe checkpoint loading, atomic
checkpoint copies, one-line errors), listed in :mod:`hltmt_plugin.compat`.

The plugin's installed commands (``hltmt-translate``, ...) import the package without torch
and fairseq, read their arguments (``--help``, ``--version`` and argument errors answer at
once) and then call :func:`register`; so does the Python API (:mod:`hltmt_plugin.hub`) when it
loads a checkpoint (an exported model needs neither). Where fairseq is not installed (the serving
install, ``serving/``), ``import hltmt_plugin`` registers nothing.
"""

import importlib.util
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
        try:
            from hltmt_plugin import compat

            compat.install()
            from hltmt_plugin import criterions, models, tasks  # noqa: F401  (register with fairseq)
        except ImportError as error:
            if (error.name or "").split(".")[0] == "hltmt_plugin":  # the plugin's own fault: Python's report
                raise
            raise training_stack_missing(error) from error
    except BaseException:
        _registered = False
        raise


def training_stack_missing(error: ImportError):
    """One line for a failed import of torch or fairseq (or of what they need): which module, and
    how to install the training stack."""
    from hltmt_plugin.errors import HltmtConfigError

    name = getattr(error, "name", None) or str(error)
    return HltmtConfigError(
        f"this needs torch and fairseq, and importing them failed ({type(error).__name__}: "
        f"{str(error).splitlines()[0] if str(error) else name}): install the plugin with its training stack "
        '(pip install -e . in the repository, or pip install "hltmt_plugin" with torch and fairseq-fixed)'
    )


def installed_command() -> bool:
    """Whether this process is one of the plugin's installed commands (``hltmt-translate``,
    ...), started by its console script: those register after reading their arguments."""
    argv = getattr(sys, "argv", None) or [""]
    return os.path.basename(str(argv[0])).startswith("hltmt-")


def fairseq_installed() -> bool:
    """Whether fairseq can be imported here (found, not imported): a serving install
    (``serving/``: an exported model, CTranslate2 and sentencepiece) has neither it nor torch."""
    return importlib.util.find_spec("fairseq") is not None


install_excepthook()  # an HltmtError ends in one line, also before registration
if not installed_command() and fairseq_installed():
    register()
