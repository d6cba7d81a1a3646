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

# what the plugin's checks see from inside a command: fairseq's setup_task replaced by a probe that
# prints the decision and stops the command there
PROBE = """import sys
import fairseq.tasks

def probe(*args, **kwargs):
    import hltmt_plugin  # as --user-dir imports it: once the command's module is loaded
    from hltmt_plugin.process import running_fairseq, command_process

    print(command_process(), *[c for c in ("train", "generate", "interactive", "validate") if running_fairseq(c)])
    sys.exit(0)

fairseq.tasks.setup_task = probe
"""
DATA = "--task translation --source-lang en --target-lang de --arch transformer --cpu --max-tokens 100"
DECODE = "--task translation --source-lang en --target-lang de --cpu --max-tokens 100"
ENTRY_POINTS = {  # how the command is started -> what the plugin's checks see inside it
    "python -m fairseq_cli.train": (
        f"import runpy\nsys.argv = ['train', 'data', *{DATA.split()!r}]\n"
        "runpy.run_module('fairseq_cli.train', run_name='__main__')\n",
        "fairseq train",
    ),
    "a script calling cli_main (fairseq's train.py)": (
        f"from fairseq_cli.train import cli_main\nsys.argv = ['train.py', 'data', *{DATA.split()!r}]\ncli_main()\n",
        "fairseq train",
    ),
    "fairseq-generate": (
        f"from fairseq_cli.generate import cli_main\nsys.argv = ['g', 'data', *{DECODE.split()!r}, '--path', 'x.pt']\n"
        "cli_main()\n",
        "fairseq generate",
    ),
    "fairseq-interactive": (
        f"from fairseq_cli.interactive import cli_main\nsys.argv = ['i', 'data', *{DECODE.split()!r}, '--path', 'x.pt']\n"
        "cli_main()\n",
        "fairseq interactive",
    ),
    "a program that imported fairseq's train and ran nothing": (
        "import fairseq_cli.train\nprobe()\n",
        "fairseq",
    ),
    "a plain program": ("probe()\n", ""),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_each_entry_point_is_the_command_it_runs(entry, tmp_path):
    first, expected = ENTRY_POINTS[entry]
    script = tmp_path / "program.py"
    script.write_text(PROBE + first)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-800:]
    assert (done.stdout.splitlines() or [""])[-1].strip() == expected, done.stdout[-500:] + done.stderr[-500:]


def test_a_plugin_command_is_the_plugins_and_runs_no_fairseq_command(tmp_path):
    """``python -m hltmt_plugin.cli.options`` (a plugin's command) runs as one."""
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
