"""Every script and installed command answers ``--help``, and refuses an unknown option in one
line, before it looks for anything, fetches or writes: each runs in a copy of the checkout (the
files git knows), and neither the copy's file list nor the real checkout's ``git status`` changes.

The shell scripts answer ``--help`` with no Python at all (``PY`` and ``PYTHON`` name none); the
Python scripts and modules of scripts/ and examples/ run with this environment's interpreter,
the installed commands from this environment. A file of scripts/ or examples/ without a
``__main__`` block is a module the scripts import: run as a script it must do nothing."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import BIN, ROOT
from test_docs import console_scripts

TIMEOUT = 120  # seconds for one --help: the slowest imports torch and fairseq (a few seconds)
NO_PYTHON = "/nonexistent/python3"


def tracked(*patterns):
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *patterns],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    ).stdout
    return sorted(set(out.split("\n")) - {""})


# docs/results/*/run.sh are records of runs made once, with their paths, not scripts to run
SHELL = [p for p in tracked("*.sh") if not p.startswith("docs/results/")]
PYTHON = tracked("scripts/*.py", "examples/*.py")


def is_script(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return '__name__ == "__main__"' in f.read()


def listing(folder):
    """Every file under ``folder`` (relative), Python's byte-code caches left out."""
    found = set()
    for top, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        found.update(os.path.relpath(os.path.join(top, f), folder) for f in files)
    return found


def git_status():
    """The real checkout's untracked and ignored entries (byte-code caches left out): what a
    command writing there would add."""
    out = subprocess.run(
        ["git", "status", "--porcelain", "--ignored"], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout
    return {line for line in out.splitlines() if line[:2] in ("??", "!!") and "__pycache__" not in line}


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    folder = tmp_path_factory.mktemp("checkout")
    for path in tracked():
        if os.path.isfile(os.path.join(ROOT, path)):
            os.makedirs(os.path.join(folder, os.path.dirname(path)), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, path), os.path.join(folder, path))
    return str(folder)


def run_in(copy, argv, python=NO_PYTHON):
    """Run ``argv`` in the copy; the completed process, after checking that it wrote nothing."""
    before, status = listing(copy), git_status()
    env = {**os.environ, "PY": python, "PYTHON": python, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(argv, capture_output=True, text=True, cwd=copy, env=env, timeout=TIMEOUT)
    assert listing(copy) == before, f"{argv} wrote {sorted(listing(copy) ^ before)}"
    assert git_status() <= status, f"{argv} wrote into the checkout: {sorted(git_status() - status)}"
    return done


def refuses_in_one_line(done, argv):
    assert done.returncode != 0, (argv, done.stdout[-500:])
    assert "Traceback" not in done.stderr, (argv, done.stderr[-2000:])
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    assert "error" in last, (argv, last)


@pytest.mark.fast
@pytest.mark.parametrize("script", SHELL)
def test_a_shell_script_answers_help_before_looking_for_python(copy, script):
    done = run_in(copy, ["bash", script, "--help"])
    assert done.returncode == 0 and done.stdout.strip(), (script, done.stderr[-1000:])
    assert done.stderr == "", (script, done.stderr[-1000:])


@pytest.mark.parametrize("script", SHELL)
def test_a_shell_script_refuses_an_unknown_option_before_any_work(copy, script):
    argv = ["bash", script, "--no-such-option"]
    refuses_in_one_line(run_in(copy, argv, python=sys.executable), argv)


@pytest.mark.parametrize("path", PYTHON)
def test_a_python_script_answers_help_and_refuses_an_unknown_option(copy, path):
    done = run_in(copy, [sys.executable, path, "--help"])
    if not is_script(path):  # a module of the scripts: run directly it does nothing
        assert done.returncode == 0 and done.stdout == "", (path, done.stdout[-500:], done.stderr[-1000:])
        return
    assert done.returncode == 0 and "usage:" in done.stdout, (path, done.stderr[-1000:])
    argv = [sys.executable, path, "--no-such-option"]
    refuses_in_one_line(run_in(copy, argv), argv)


@pytest.mark.parametrize("name", console_scripts())
def test_an_installed_command_answers_help_and_version_and_refuses_an_unknown_option(copy, name):
    from hltmt_plugin import __version__

    done = run_in(copy, [os.path.join(BIN, name), "--help"])
    assert done.returncode == 0 and f"usage: {name}" in done.stdout, (name, done.stderr[-1000:])
    done = run_in(copy, [os.path.join(BIN, name), "--version"])
    assert done.returncode == 0 and done.stdout.strip() == f"{name} {__version__}", (name, done.stdout)
    argv = [os.path.join(BIN, name), "--no-such-option"]
    refuses_in_one_line(run_in(copy, argv), argv)


@pytest.mark.fast
def test_every_script_is_checked():
    assert {"examples/wmt10/run.sh", "examples/wmt10/run_xlmr.sh", "scripts/gpu_run.sh"} <= set(SHELL)
    assert "scripts/bench.py" in PYTHON and "examples/wmt10/download.py" in PYTHON
    assert len(console_scripts()) >= 11
