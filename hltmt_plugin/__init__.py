"""hltmt_plugin: language-specific capacity for multilingual NMT, as a fairseq user-dir.

``--user-dir hltmt_plugin`` (or ``import hltmt_plugin``) registers the task
``hltmt_translation``, the model ``hltmt_transformer`` and its architectures, and the
criterion ``hltmt_cross_entropy``, and changes nothing else in the importing program.

A process that is a command, fairseq's (``fairseq-train``, ``fairseq-generate``, ... with
``--user-dir``) or the plugin's (``hltmt-translate``, ...), also gets the one-line report of an
error (:mod:`hltmt_plugin.errors`) and the version-gated workarounds of fairseq / torch behaviour
(:mod:`hltmt_plugin.compat`); what the process is is decided once, by
:func:`hltmt_plugin.process.command_process`.

The plugin's commands import the package without torch and fairseq, read their arguments
(``--help``, ``--version`` and argument errors answer at once) and then call :func:`register`;
so does the Python API (:mod:`hltmt_plugin.hub`) when it loads a checkpoint (an exported model
needs neither), through the plugin's own loader (:mod:`hltmt_plugin.compat.safe_loading`). Where
fairseq is not installed (the serving install, ``serving/``), ``import hltmt_plugin`` registers
nothing.
"""

import importlib.util

from hltmt_plugin.process import (  # noqa: F401  (the package's names of them)
    COMMAND_PACKAGES,
    FAIRSEQ_COMMANDS,
    SCRIPT_BYTES,
    _console_script_module,
    _main_module,
    command_process,
)

__version__ = "0.2.0"

_registered = False


def register() -> None:
    """Register the task, model, architectures and criterion with fairseq (imports torch and
    fairseq; once per process); in a command's process (:func:`command_process`) first apply the
    workarounds of :mod:`hltmt_plugin.compat`."""
    global _registered
    if _registered:
        return
    _registered = True
    try:
        try:
            if command_process():
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


def fairseq_installed() -> bool:
    """Whether fairseq can be imported here (found, not imported): a serving install
    (``serving/``: an exported model, CTranslate2 and sentencepiece) has neither it nor torch."""
    return importlib.util.find_spec("fairseq") is not None


if command_process() == "plugin":  # a plugin's command: one line for an error, also before registration
    from hltmt_plugin.cli import command_name
    from hltmt_plugin.errors import install_excepthook

    install_excepthook(command_name(_main_module()))
elif fairseq_installed():
    register()
