"""The user's commands, installed with the package (``hltmt-translate``, ``hltmt-prepare-data``,
...; see ``setup.py``'s ``console_scripts``). Each module is one command: a ``main(argv)`` over
functions a test can call; ``decode.py`` (many directions decoded by worker processes) and
``output.py`` (a command's output written whole) are helpers the commands and the experiment
drivers (:mod:`hltmt_plugin.experiments`) share. Each command's module imports neither torch nor fairseq at its top:
``--help``, ``--version`` and argument errors answer at once, and ``main`` calls :func:`register`
once its arguments are read. Shared here: where the plugin and its example data are, and how one
command runs another or one of fairseq's (by this Python, ``python -m``), so that the commands
work from a virtual environment, ``pip install --target`` and an editable checkout alike."""

import os
import sys

PLUGIN = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the folder --user-dir names
CHECKOUT = os.path.dirname(PLUGIN)  # a source checkout's root (editable install)
DEBMT10 = os.path.join(CHECKOUT, "data", "debmt10")  # the example data a source checkout holds


def command_name(module: str) -> str:
    """The name of the plugin's command whose module is ``module``, the first word of its error
    lines: the console script's own (``hltmt-translate``, as argparse names it), or under
    ``python -m`` the module's (``hltmt_plugin.cli.prepare_data`` is ``hltmt-prepare-data``)."""
    script = os.path.basename(sys.argv[0]) if sys.argv else ""
    return script if script.startswith("hltmt-") else "hltmt-" + module.rsplit(".", 1)[-1].replace("_", "-")


def fairseq_cli(tool):
    """fairseq's command-line tool ``tool`` (train, generate, preprocess) run by this Python as a
    module: works wherever ``import fairseq`` does (a venv, ``pip install --target`` +
    PYTHONPATH), unlike looking for a ``fairseq-train`` script next to the interpreter."""
    return [sys.executable, "-m", f"fairseq_cli.{tool}"]


def add_version(parser):
    """``--version``: the command's name and the package's version (answered before torch and
    fairseq are imported)."""
    from hltmt_plugin import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def register():
    """What a command does once its arguments are read: register the plugin with fairseq and
    apply its workarounds (imports torch and fairseq; ``hltmt_plugin.register``)."""
    import hltmt_plugin

    hltmt_plugin.register()


def plugin_cli(command):
    """The plugin's own command ``command`` (a module of this folder) run by this Python."""
    return [sys.executable, "-m", f"hltmt_plugin.cli.{command}"]
