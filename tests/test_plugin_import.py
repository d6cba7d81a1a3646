"""``import hltmt_plugin`` (hltmt_plugin/__init__.py) registers with fairseq and changes nothing else
in the importing program: its ``sys.excepthook``, fairseq's functions, torch's allowlist, its
warnings and fairseq's loggers are as they were, and an uncaught error keeps Python's report.
The one-line errors and the workarounds of hltmt_plugin/compat are a command's: fairseq's (the
plugin through ``--user-dir``) or the plugin's own (its console scripts, ``python -m``), decided
once by ``hltmt_plugin.command_process``. Each case runs in a Python process of its own."""

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

import hltmt_plugin
from conftest import ROOT

# every function of these fairseq modules and classes (the ones the workarounds patch) must be
# fairseq's own code: no wrapper (functools.wraps sets __wrapped__), nothing from another file
CHECK = """
import builtins, importlib, inspect, logging, os, sys, warnings
import fairseq
from fairseq import checkpoint_utils
from fairseq.file_io import PathManager
from fairseq.hub_utils import GeneratorHubInterface
from fairseq.tasks.translation_multi_simple_epoch import TranslationMultiSimpleEpochTask
from hltmt_plugin.compat.safe_eval import EVALUATING_MODULES

FAIRSEQ = os.path.dirname(fairseq.__file__)
changed = []
for owner in (checkpoint_utils, PathManager, GeneratorHubInterface, TranslationMultiSimpleEpochTask):
    for name, value in vars(owner).items():
        function = getattr(value, "__func__", value)
        if not inspect.isfunction(function) or not function.__module__.startswith("fairseq"):
            continue  # (omegaconf's open_dict, ... imported into checkpoint_utils)
        if hasattr(function, "__wrapped__") or not function.__code__.co_filename.startswith(FAIRSEQ):
            changed.append(f"{owner.__name__.rsplit('.', 1)[-1]}.{name}")
if checkpoint_utils.torch is not torch:
    changed.append("checkpoint_utils.torch")
changed += [f"{m}.eval" for m in EVALUATING_MODULES if "eval" in vars(importlib.import_module(m))]
if sys.excepthook is not sys.__excepthook__:
    changed.append("sys.excepthook")
if set(torch.serialization.get_safe_globals()) != set(safe_globals):  # (torch keeps no order)
    changed.append("torch's safe globals")
if filters is not None and warnings.filters != filters:  # (fairseq's own import adds some)
    changed.append("warnings.filters")
if any(logging.getLogger(name).filters for name in logging.root.manager.loggerDict if name.startswith("fairseq")):
    changed.append("fairseq's loggers")
from fairseq.tasks import TASK_REGISTRY
print("REGISTERED", "hltmt_translation" in TASK_REGISTRY, "CHANGED", ",".join(changed))
"""

PLAIN = """
import sys, warnings, torch
safe_globals = list(torch.serialization.get_safe_globals())
{before}
filters = list(warnings.filters) if "fairseq" in sys.modules else None
import hltmt_plugin
"""


def python(code=None, script=None):
    """``python -c code`` (or ``python script``) in a new process, from another folder."""
    return subprocess.run(
        [sys.executable, *(["-c", code] if script is None else [str(script)])],
        capture_output=True,
        text=True,
        cwd="/",
        env={**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"},
        timeout=300,
    )


@pytest.mark.parametrize("before", ["", "import fairseq.checkpoint_utils, fairseq.tasks"])
def test_importing_the_plugin_in_a_program_registers_and_changes_nothing_else(before):
    """Whether the program imported fairseq first or not."""
    done = python(PLAIN.format(before=before) + CHECK)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1].split() == ["REGISTERED", "True", "CHANGED"], done.stdout


def test_the_check_sees_every_workaround_of_a_command():
    """The same check in one of fairseq's commands (fairseq_cli imported first): it names them."""
    done = python(PLAIN.format(before="import fairseq_cli.generate") + CHECK)
    assert done.returncode == 0, done.stderr[-3000:]
    changed = set(done.stdout.splitlines()[-1].split()[-1].split(","))
    expected = {
        "checkpoint_utils.load_checkpoint_to_cpu",
        "checkpoint_utils.torch",
        "checkpoint_utils.torch_persistent_save",
    }
    expected |= {"PathManager.copy", "GeneratorHubInterface.string", "TranslationMultiSimpleEpochTask.build_generator"}
    expected |= {"fairseq.utils.eval", "sys.excepthook"}
    assert expected <= changed, changed
    assert "torch's safe globals" not in changed  # the allowlist is per load, in commands too


@pytest.mark.parametrize(
    "error, last",
    [
        (
            "open('/nonexistent/file.txt')",
            "FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/file.txt'",
        ),
        (
            "raise hltmt_plugin.errors.HltmtConfigError('a plugin error')",
            "hltmt_plugin.errors.HltmtConfigError: a plugin error",
        ),
        ("raise KeyboardInterrupt", "KeyboardInterrupt"),
    ],
)
def test_an_uncaught_error_in_a_program_that_imports_the_plugin_keeps_pythons_report(error, last):
    done = python(f"import hltmt_plugin, hltmt_plugin.errors\n{error}")
    assert "Traceback (most recent call last):" in done.stderr, done.stderr[-2000:]  # (after fairseq's notice)
    assert done.stderr.rstrip().splitlines()[-1] == last
    assert "hltmt_plugin: error" not in done.stderr and "interrupted" not in done.stderr


def test_a_program_named_like_a_command_is_a_program(tmp_path):
    """What the process is, not its name: ``hltmt-mine`` importing the plugin is registered at
    once and keeps Python's report."""
    script = tmp_path / "hltmt-mine"
    script.write_text(
        "import sys, hltmt_plugin\nfrom fairseq.tasks import TASK_REGISTRY\n"
        "print(hltmt_plugin.command_process() == '', 'hltmt_translation' in TASK_REGISTRY)\nopen('/nonexistent')\n"
    )
    done = python(script=script)
    assert done.stdout.split() == ["True", "True"], done.stderr[-2000:]
    assert "Traceback (most recent call last):" in done.stderr and "hltmt_plugin: error" not in done.stderr


CONSOLE_SCRIPT = """import sys
from hltmt_plugin.cli.{module} import main
if __name__ == '__main__':
    import hltmt_plugin
    light = sorted(m for m in ('torch', 'fairseq') if m in sys.modules)
    print(hltmt_plugin.command_process(), sys.excepthook.__name__, light)
    hltmt_plugin.register()
    from fairseq import checkpoint_utils
    print(getattr(checkpoint_utils.load_checkpoint_to_cpu, "hltmt_guarded", False))
    open('/nonexistent/file.txt')
"""


def test_a_plugin_command_is_a_command_light_until_it_registers(tmp_path):
    """A console script of the plugin (as pip writes it): the one-line errors from its start,
    torch and fairseq not imported, the workarounds once it registers."""
    script = tmp_path / "any-name"
    script.write_text(CONSOLE_SCRIPT.format(module="options"))
    done = python(script=script)
    assert done.stdout.split("\n")[:2] == ["plugin _excepthook []", "True"], done.stderr[-2000:]
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == "hltmt-options: error: /nonexistent/file.txt: No such file or directory"


def test_fairseqs_command_with_the_plugin_is_a_command():
    done = python(
        "import fairseq_cli.train\nimport hltmt_plugin\nprint(hltmt_plugin.command_process())\n"
        "raise hltmt_plugin.errors.HltmtInputError('one line')"
    )
    assert done.stdout.splitlines()[-1] == "fairseq" and done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.splitlines()[-1] == "hltmt_plugin: error: one line"


@pytest.mark.parametrize(
    "orig_argv, argv, module",
    [
        (
            ["python", "-m", "hltmt_plugin.cli.translate", "--src", "en"],
            ["-m", "--src", "en"],
            "hltmt_plugin.cli.translate",
        ),
        (["python", "-W", "ignore", "-mhltmt_plugin.cli.translate", "x"], ["-m", "x"], "hltmt_plugin.cli.translate"),
        (["python", "-m", "mine", "hltmt_plugin.cli.translate"], ["-m", "hltmt_plugin.cli.translate"], "mine"),
    ],
)
def test_python_m_is_read_from_the_interpreters_command_line_while_its_package_is_imported(
    monkeypatch, orig_argv, argv, module
):
    """While ``python -m NAME`` imports NAME's packages, ``sys.argv[0]`` is ``-m`` and
    ``__main__`` has no spec yet: NAME is the argument before the program's own."""
    monkeypatch.setitem(sys.modules, "__main__", SimpleNamespace(__spec__=None))
    monkeypatch.setattr(sys, "orig_argv", orig_argv)
    monkeypatch.setattr(sys, "argv", argv)
    assert hltmt_plugin._main_module() == module


def test_a_console_script_is_read_as_text_and_a_long_program_is_not_one(tmp_path):
    script = tmp_path / "hltmt-translate"
    script.write_text(CONSOLE_SCRIPT.format(module="translate"))
    assert hltmt_plugin._console_script_module(str(script)) == "hltmt_plugin.cli.translate"
    script.write_text("# " + "x" * hltmt_plugin.SCRIPT_BYTES + "\n" + CONSOLE_SCRIPT.format(module="translate"))
    assert hltmt_plugin._console_script_module(str(script)) == ""
    script.write_text("import hltmt_plugin\nprint(1)\n")
    assert hltmt_plugin._console_script_module(str(script)) == ""
    assert hltmt_plugin._console_script_module(None) == "" and hltmt_plugin._console_script_module("/nowhere") == ""


def test_the_models_hub_in_a_program_loads_and_leaves_fairseq_as_it_was():
    """``HltmtTransformerModel.from_pretrained`` (fairseq's hub, as translating.md shows it) loads a
    checkpoint in a plain program through the plugin's loader for that call only: afterwards
    fairseq's loader and torch's allowlist are fairseq's and torch's again, and it translates."""
    models = os.path.join(ROOT, "docs", "results", "cpu-study", "models")
    load = f"""
from hltmt_plugin.models.hltmt_transformer import HltmtTransformerModel
hub = HltmtTransformerModel.from_pretrained({models!r}, "hltmt.pt", {models!r}, bpe="sentencepiece",
    sentencepiece_model={os.path.join(models, "spm.model")!r}, source_lang="en", target_lang="de")
print("TEXT", hub.translate("The file is open.", beam=2, max_len_b=20))
"""
    done = python(PLAIN.format(before="") + load + CHECK)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    text = [line for line in lines if line.startswith("TEXT ")]
    assert text and text[0].split(" ", 1)[1].strip() and "__de__" not in text[0], lines
    assert lines[-1].split() == ["REGISTERED", "True", "CHANGED"], lines[-1]
