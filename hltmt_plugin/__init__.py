"""hltmt_plugin: language-specific capacity for multilingual NMT, as a fairseq user-dir.

``--user-dir hltmt_plugin`` (or ``import hltmt_plugin``) registers the task
``hltmt_translation``, the model ``hltmt_transformer`` and its architectures, and the
criterion ``hltmt_cross_entropy``, and changes nothing else in the importing program.

A process that is a command, fairseq's (``fairseq-train``, ``fairseq-generate``, ... with
``--user-dir``) or the plugin's (``hltmt-translate``, ...), also gets the one-line report of an
error (:mod:`hltmt_plugin.errors`) and the version-gated workarounds of fairseq / torch behaviour
(:mod:`hltmt_plugin.compat`); what the process is is decided once, here, by
:func:`command_process`.

The plugin's commands import the package without torch and fairseq, read their arguments
(``--help``, ``--version`` and argument errors answer at once) and then call :func:`register`;
so does the Python API (:mod:`hltmt_plugin.hub`) when it loads a checkpoint (an exported model
needs neither), through the plugin's own loader (:mod:`hltmt_plugin.compat.safe_loading`). Where
fairseq is not installed (the serving install, ``serving/``), ``import hltmt_plugin`` registers
nothing.
"""

import ast
import importlib.util
import sys

__version__ = "0.2.0"

# the packages whose modules are the plugin's commands (setup.py's console_scripts, python -m)
COMMAND_PACKAGES = ("hltmt_plugin.cli.", "hltmt_plugin.experiments.")
FAIRSEQ_COMMANDS = "fairseq_cli"  # the package of fairseq's commands (fairseq-train, ..., python -m fairseq_cli.X)
SCRIPT_BYTES = 4096  # a console script is a few lines; a longer main program is not one

_registered = False
_process = None


def _console_script_module(path) -> str:
    """The module whose ``main`` the program ``path`` imports, when it is a console script
    (``from hltmt_plugin.cli.translate import main``): read as text, never run; else ""."""
    try:
        with open(path, "rb") as f:
            text = f.read(SCRIPT_BYTES + 1)
        if len(text) > SCRIPT_BYTES:
            return ""
        tree = ast.parse(text)
    except (OSError, TypeError, ValueError, SyntaxError):
        return ""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any(alias.name == "main" for alias in node.names):
            return node.module or ""
    return ""


def _main_module() -> str:
    """The module this process was started to run: ``python -m NAME``'s NAME (from the
    interpreter's own command line while NAME's packages are imported, from ``__main__``'s spec
    after), or the module whose ``main`` a console script calls; "" for any other program."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None:
        return spec.name or ""
    if sys.argv[:1] == ["-m"] and len(getattr(sys, "orig_argv", [])) >= len(sys.argv):
        return sys.orig_argv[-len(sys.argv)].removeprefix("-m")  # python -m NAME ARGS...: NAME before ARGS
    return _console_script_module(getattr(main, "__file__", None))


def command_process() -> str:
    """What this process is, decided once: ``"fairseq"`` (one of fairseq's commands: the plugin
    came through ``--user-dir``, :data:`FAIRSEQ_COMMANDS` imported), ``"plugin"`` (one of the
    plugin's commands: the process runs a module of :data:`COMMAND_PACKAGES`), or ``""`` (a
    program that imports the plugin: nothing in it is changed but fairseq's registries)."""
    global _process
    if _process is None:
        if _main_module().startswith(COMMAND_PACKAGES):
            _process = "plugin"
        elif FAIRSEQ_COMMANDS in sys.modules:
            _process = "fairseq"
        else:
            _process = ""
    return _process


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
