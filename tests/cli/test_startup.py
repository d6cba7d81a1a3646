"""The installed commands answer --help, --version and argument errors before torch or fairseq
is imported (read from sys.modules of the command's process, not timed); the package still
registers with fairseq wherever fairseq needs it: fairseq's --user-dir, ``import hltmt_plugin`` in
Python, the Python API, and a command once its arguments are read."""

import os
import re
import subprocess
import sys

import pytest

from conftest import BIN, PLUGIN, ROOT

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

HEAVY = ("torch", "fairseq")


def installed_commands():
    """(command, module) of every console script setup.py installs."""
    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as f:
        return re.findall(r'"(hltmt-[a-z-]+) = (hltmt_plugin\.(?:cli|experiments)\.\w+):main"', f.read())


# run a console script as its own process would, then print which heavy modules it imported
PROBE = """
import runpy, sys
script, args = sys.argv[1], sys.argv[2:]
sys.argv = [script, *args]
code = 0
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit as done:
    code = done.code
sys.stdout.flush()
print("EXIT", code if isinstance(code, int) else 1, "HEAVY", ",".join(m for m in {heavy} if m in sys.modules))
"""


def probe(command, *args):
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), os.path.join(BIN, command), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    found = re.fullmatch(r"EXIT (\d+) HEAVY ?(.*)", last)
    assert found, (command, args, done.stdout[-2000:], done.stderr[-2000:])
    return int(found.group(1)), [m for m in found.group(2).split(",") if m], done


def test_every_installed_command_is_probed():
    assert len(installed_commands()) >= 10


@pytest.mark.parametrize("command, module", installed_commands())
def test_help_version_and_a_wrong_option_import_neither_torch_nor_fairseq(command, module):
    code, heavy, done = probe(command, "--help")
    assert code == 0 and f"usage: {command}" in done.stdout and heavy == [], (heavy, done.stderr[-2000:])
    code, heavy, done = probe(command, "--version")
    from hltmt_plugin import __version__

    assert code == 0 and f"{command} {__version__}" in done.stdout and heavy == [], (heavy, done.stderr[-2000:])
    code, heavy, done = probe(command, "--no-such-option")
    assert code != 0 and "error" in done.stderr and heavy == [], (heavy, done.stderr[-2000:])
    assert "Traceback" not in done.stderr


def run_python(code, command=None, folder=None):
    """``code`` in a new Python process, as a program (``python -c``) or, with ``command``, as that
    command of the plugin's console script runs it (a script in ``folder`` that imports the
    command's ``main`` first, as pip writes it); its stdout."""
    if command:
        script = os.path.join(folder, "console-script")
        with open(script, "w", encoding="utf-8") as f:
            f.write(f"import sys\nfrom hltmt_plugin.cli.{command} import main\n" + code)
    done = subprocess.run(
        [sys.executable, *([script] if command else ["-c", code])],
        capture_output=True,
        text=True,
        cwd="/",
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()


REGISTERED = (
    "from fairseq.tasks import TASK_REGISTRY; from fairseq.criterions import CRITERION_REGISTRY; "
    "from fairseq.models import ARCH_MODEL_REGISTRY; import torch; "
    "print('hltmt_translation' in TASK_REGISTRY, 'hltmt_cross_entropy' in CRITERION_REGISTRY, "
    "'hltmt_transformer_tiny' in ARCH_MODEL_REGISTRY, "
    "not any('Namespace' in str(g) for g in torch.serialization.get_safe_globals()))"  # the loader's, per load
)


def test_import_in_python_registers_at_once():
    assert run_python("import hltmt_plugin\n" + REGISTERED) == ["True"] * 4


def test_fairseqs_user_dir_registers():
    code = (
        f"import argparse; from fairseq import utils; utils.import_user_module(argparse.Namespace(user_dir="
        f"{PLUGIN!r}))\n" + REGISTERED
    )
    assert run_python(code) == ["True"] * 4


def test_a_command_imports_the_package_light_and_registers_once_its_arguments_are_read(tmp_path):
    light = run_python(
        "print(sorted(m for m in ('torch', 'fairseq') if m in sys.modules))", command="translate", folder=tmp_path
    )
    assert light == ["[]"]
    later = run_python("import hltmt_plugin.cli\nhltmt_plugin.cli.register()\n" + REGISTERED, "translate", tmp_path)
    assert later == ["True"] * 4
    # the Python API in a command: light to import (an export folder needs neither), registered to load a checkpoint
    api = run_python(
        "from hltmt_plugin.hub import HltmtTranslator\nimport sys; print(sorted(m for m in ('torch', 'fairseq') "
        "if m in sys.modules))\nimport hltmt_plugin.hub.loading\n" + REGISTERED,
        "export",
        tmp_path,
    )
    assert api == ["[]"] + ["True"] * 4
