"""hltmt_plugin.process: one decision of what the process is, for every check it gates. Each
entry point in a Python process of its own, started the way a user starts it (fairseq's console
commands, fairseq-hydra-train, fairseq's own train.py, a script calling
``fairseq_cli.train.cli_main``, the plugin's commands, a plain program): which command runs, and
whether the plugin treats the process as a command."""

import os
import subprocess
import sys

import pytest

from conftest import BIN

PROBE = (
    "import sys, hltmt_plugin\n"
    "from hltmt_plugin.process import running_fairseq, command_process\n"
    "print(command_process(), *[c for c in ('train', 'generate', 'interactive', 'validate') if running_fairseq(c)])\n"
)

ENTRY_POINTS = {  # how the process is started (the imports its program makes first) -> what it is
    "fairseq-train": ("import fairseq_cli.train\n", "fairseq train"),
    "fairseq-hydra-train": ("import fairseq_cli.hydra_train\n", "fairseq train"),
    "fairseq's train.py": ("from fairseq_cli.train import cli_main\n", "fairseq train"),
    "a script calling cli_main": ("import fairseq_cli.train as t\nassert callable(t.cli_main)\n", "fairseq train"),
    "fairseq-generate": ("import fairseq_cli.generate\n", "fairseq generate"),
    "fairseq-interactive": ("import fairseq_cli.interactive\n", "fairseq interactive"),
    "fairseq-validate": ("import fairseq_cli.validate\n", "fairseq validate"),
    "a plain program": ("", ""),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_each_entry_point_is_the_command_it_runs(entry, tmp_path):
    first, expected = ENTRY_POINTS[entry]
    script = tmp_path / "program.py"
    script.write_text(first + PROBE)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-800:]
    assert (done.stdout.splitlines() or [""])[-1].strip() == expected


def test_a_plugin_command_is_the_plugins_and_runs_no_fairseq_command(tmp_path):
    """``python -m hltmt_plugin.cli.options`` (a plugin's command) decides "plugin" and runs none
    of fairseq's commands."""
    code = "import runpy, sys\nsys.argv = ['x']\n" + PROBE
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert (done.stdout.splitlines() or [""])[-1].strip() == ""  # -c: a plain program
    done = subprocess.run(
        [os.path.join(BIN, "python"), "-m", "hltmt_plugin.cli.options", "--help"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0 and "usage" in done.stdout


@pytest.mark.fast
def test_the_train_checks_are_gated_by_the_one_decision():
    """The save folder's lock, the record check on resume and the interactive direction check
    read :func:`running_fairseq`; no module of the package reads the program's name to decide."""
    import ast

    from conftest import ROOT

    readers = []
    for folder, _, files in os.walk(os.path.join(ROOT, "hltmt_plugin")):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            tree = ast.parse(open(path, encoding="utf-8").read())
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and node.attr == "argv" and getattr(node.value, "id", "") == "sys":
                    readers.append(os.path.relpath(path, ROOT))
    # the plugin's own commands read their arguments; nothing decides a fairseq command from them
    assert not [p for p in readers if p.startswith(os.path.join("hltmt_plugin", "tasks"))], readers
    for module in ("save_dir", "checkpoint_checks", "hltmt_translation"):
        text = open(os.path.join(ROOT, "hltmt_plugin", "tasks", f"{module}.py"), encoding="utf-8").read()
        assert "from hltmt_plugin.process import running_fairseq" in text, module
