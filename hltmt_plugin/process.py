"""What this process is, decided in one place for every check it gates.

- :func:`command_process`: ``"fairseq"`` (one of fairseq's commands: the plugin came through
  ``--user-dir``, :data:`FAIRSEQ_COMMANDS` imported), ``"plugin"`` (one of the plugin's commands:
  the process runs a module of :data:`COMMAND_PACKAGES`), or ``""`` (a program that imports the
  plugin: nothing in it is changed but fairseq's registries). It decides who gets the one-line
  errors and the workarounds of ``compat/``.
- :func:`running_fairseq`: whether the call runs inside fairseq's ``COMMAND`` (``train``,
  ``interactive``...), read from the calling stack, not from the program's name: fairseq's
  console command, ``python -m fairseq_cli.COMMAND``, ``fairseq-hydra-train`` (which runs
  ``fairseq_cli.train.main``), fairseq's own ``train.py`` and any script calling
  ``fairseq_cli.train.cli_main`` alike. It gates the checks that belong to one command (the
  save folder's lock and the record check on resume: train; an untrained direction asked of
  fairseq-interactive).
"""

import ast
import os
import sys

# the packages whose modules are the plugin's commands (setup.py's console_scripts, python -m)
COMMAND_PACKAGES = ("hltmt_plugin.cli.", "hltmt_plugin.experiments.")
FAIRSEQ_COMMANDS = "fairseq_cli"  # the package of fairseq's commands (fairseq-train, ..., python -m fairseq_cli.X)
SCRIPT_BYTES = 4096  # a console script is a few lines; a longer main program is not one
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


def running_fairseq(command: str) -> bool:
    """Whether this call runs inside fairseq's ``command`` (``train``, ``interactive``...): a
    frame of its module, ``fairseq_cli/COMMAND.py``, is on the calling thread's stack. So
    ``fairseq-train``, ``python -m fairseq_cli.train``, ``fairseq-hydra-train`` (which calls
    ``fairseq_cli.train.main``), fairseq's ``train.py`` and a script calling ``cli_main`` are
    training, each rank of a distributed run too, while a program that only imported the module
    (or ran a command earlier) is not; fairseq-interactive is not fairseq-generate, whose
    helpers it imports."""
    suffix = os.path.join(FAIRSEQ_COMMANDS, f"{command}.py")
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(suffix):
            return True
        frame = frame.f_back
    return False
