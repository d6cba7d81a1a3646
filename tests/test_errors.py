"""How an uncaught exception ends a process once the plugin's hook is installed
(hltmt_plugin/errors.py): an :class:`HltmtError`, also one fairseq re-raised as another exception,
is one line ``hltmt_plugin: error: <message>`` (a plugin's command: its own name, ``hltmt-options:
error: <message>``); Ctrl-C is ``hltmt_plugin: interrupted``; a write
to standard output that the system refuses is one line saying the output is incomplete; every
other exception keeps Python's report. Each case runs in a tiny Python process of its own."""

import os
import signal
import subprocess
import sys

import pytest

from conftest import PLUGIN, ROOT

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

# errors.py alone (it imports only the standard library; the package would import fairseq, seconds
# per process), its hook installed twice (the second install changes nothing)
HOOK = (
    "import importlib.util as u\n"
    f"spec = u.spec_from_file_location('errors', {PLUGIN + '/errors.py'!r})\n"
    "e = u.module_from_spec(spec)\nspec.loader.exec_module(e)\n"
    "e.install_excepthook()\ne.install_excepthook()\n"
)


def python(code, stdout=subprocess.PIPE):
    return subprocess.run(
        [sys.executable, "-c", HOOK + code], stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=60
    )


@pytest.mark.parametrize(
    "code, line",
    [
        (
            "raise e.HltmtConfigError('--slp-pool-size must lie in [1, 2], got 5')",
            "--slp-pool-size must lie in [1, 2], got 5",
        ),
        ("raise e.HltmtInputError('the batch has no language')", "the batch has no language"),
        (  # fairseq catches and re-raises some errors as a generic Exception: the cause is found
            "try:\n    raise e.HltmtInputError('inner cause')\nexcept ValueError as x:\n    raise Exception('wrapped') from x",
            "inner cause",
        ),
        (
            "try:\n    raise e.HltmtError('in context')\nexcept ValueError:\n    raise RuntimeError('while handling')",
            "in context",
        ),
    ],
)
def test_a_plugin_error_ends_the_process_in_one_line(code, line):
    done = python(code)
    assert done.returncode == 1
    assert done.stderr == f"hltmt_plugin: error: {line}\n"


def test_ctrl_c_is_one_line_and_ends_the_process_as_sigint_does():
    done = python("raise KeyboardInterrupt")
    assert done.stderr == "hltmt_plugin: interrupted\n"
    assert done.returncode == -signal.SIGINT


def test_a_full_standard_output_is_one_line_saying_the_output_is_incomplete():
    with open("/dev/full", "w") as full:
        done = python("import sys\nsys.stdout.write('x' * 100000)\nsys.stdout.flush()", stdout=full)
    assert done.returncode == 1
    assert done.stderr == (
        "hltmt_plugin: error: cannot write standard output (No space left on device): the output is incomplete\n"
    )


def test_a_closed_pipe_on_standard_output_is_one_line():
    done = python("import errno\nraise BrokenPipeError(errno.EPIPE, 'Broken pipe')")
    assert done.stderr == "hltmt_plugin: error: cannot write standard output (Broken pipe): the output is incomplete\n"


@pytest.mark.parametrize(
    "code, last",
    [
        ("raise RuntimeError('a bug')", "RuntimeError: a bug"),
        ("raise OSError('no file named')", "OSError: no file named"),  # names no file: not one of the file failures
    ],
)
def test_any_other_exception_keeps_pythons_report(code, last):
    done = python(code)
    assert done.returncode == 1
    assert done.stderr.startswith("Traceback (most recent call last):")
    assert done.stderr.rstrip().splitlines()[-1] == last
    assert "hltmt_plugin:" not in done.stderr


def console_script(folder, code):
    """A plugin command's console script (as pip writes it) running ``code`` first."""
    script = folder / "console-script"
    script.write_text(f"import sys\nfrom hltmt_plugin.cli.options import main\n{code}\n")
    return str(script)


def test_a_plugin_command_has_the_hook_from_its_start_and_a_program_keeps_pythons_report(tmp_path):
    code = "import hltmt_plugin.errors as e\nraise e.HltmtConfigError('one line')"
    done = subprocess.run([sys.executable, console_script(tmp_path, code)], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (1, "hltmt-options: error: one line\n")  # the command's own name
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "Traceback (most recent call last)" in done.stderr and done.stderr.endswith("HltmtConfigError: one line\n")


def test_the_plugins_errors_are_value_errors_in_python_code():
    from hltmt_plugin.errors import HltmtConfigError, HltmtError, HltmtInputError

    assert issubclass(HltmtConfigError, HltmtError) and issubclass(HltmtInputError, HltmtError)
    with pytest.raises(ValueError, match="x"):
        raise HltmtInputError("x")


def test_a_named_file_the_system_refuses_and_a_failed_fairseq_import_are_one_line(tmp_path):
    """An OSError naming its file, and an import of fairseq that fails, end in one line each."""
    missing = tmp_path / "missing.txt"
    done = python(f"open({str(missing)!r})")
    assert done.returncode == 1 and done.stderr == f"hltmt_plugin: error: {missing}: No such file or directory\n"
    done = python("import errno\nraise OSError(errno.ENOSPC, 'No space left on device', 'out.txt')")
    assert done.stderr == "hltmt_plugin: error: out.txt: No space left on device\n"
    blocker = tmp_path / "fairseq"  # a fairseq that cannot be imported, first on the path
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('broken build', name='fairseq.libbleu')\n")
    code = console_script(tmp_path, "import hltmt_plugin; hltmt_plugin.register()")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    done = subprocess.run([sys.executable, code], capture_output=True, text=True, env=env)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "this needs torch and fairseq, and importing them failed (ImportError: broken build)" in lines[0]
