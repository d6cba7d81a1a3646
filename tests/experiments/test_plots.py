"""matplotlib is the plots extra: every module of the package (the plugin core, the commands,
the hub, the exports, the experiments) imports without it, a chart drawn without it is one line
naming the extra, and setup.py and scripts/setup.sh declare and install it."""

import ast
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from hltmt_plugin.errors import HltmtConfigError
from hltmt_plugin.experiments import plots

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

# every module of the package imported in a Python where importing matplotlib fails
IMPORT_ALL = """
import importlib, pkgutil, sys
sys.modules["matplotlib"] = None  # any import of it raises ImportError
import hltmt_plugin
failed = []
for module in pkgutil.walk_packages(hltmt_plugin.__path__, "hltmt_plugin."):
    try:
        importlib.import_module(module.name)
    except Exception as error:
        failed.append(f"{module.name}: {type(error).__name__}: {error}")
print("MODULES", sum(1 for _ in pkgutil.walk_packages(hltmt_plugin.__path__, "hltmt_plugin.")))
print("FAILED", failed)
"""


def test_every_module_of_the_package_imports_without_matplotlib():
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", IMPORT_ALL], capture_output=True, text=True, cwd=ROOT, env=env)
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("MODULES", "FAILED")))
    assert done.returncode == 0 and int(lines["MODULES"]) > 50, done.stderr[-2000:]
    assert lines["FAILED"] == "[]", lines["FAILED"]


def test_a_chart_without_matplotlib_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(HltmtConfigError) as error:
        plots.pyplot()
    assert str(error.value) == plots.INSTALL_HINT and "pip install 'hltmt_plugin[plots]'" in str(error.value)


def test_a_chart_is_drawn_to_a_file_without_a_display(tmp_path):
    plt = plots.pyplot()
    fig, axis = plt.subplots()
    axis.plot([0, 1], [1, 0])
    fig.savefig(tmp_path / "chart.png")
    plt.close(fig)
    assert (tmp_path / "chart.png").read_bytes()[:4] == b"\x89PNG"


def setup_keywords():
    """setup()'s install_requires and extras_require in setup.py, read as literals."""
    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    found = {k.arg: k.value for k in call.keywords if k.arg in ("install_requires", "extras_require")}
    requires = [ast.literal_eval(e) for e in found["install_requires"].elts if isinstance(e, ast.Constant)]
    return requires, ast.literal_eval(found["extras_require"])


def test_matplotlib_is_an_extra_the_set_up_and_the_tests_install():
    requires, extras = setup_keywords()
    assert not any(r.startswith("matplotlib") for r in requires)
    assert "matplotlib" in extras["plots"] and "matplotlib" in extras["test"]
    with open(os.path.join(ROOT, "scripts", "setup.sh"), encoding="utf-8") as f:
        assert '-e ".[test,plots,' in f.read()


def test_matplotlibs_start_up_log_is_kept_out_where_the_root_logger_shows_debug_lines():
    """A chart drawn where the root logger shows DEBUG records (fairseq's imports leave it so):
    matplotlib's import logs nothing."""
    code = (
        "import logging\nlogging.basicConfig(level=logging.DEBUG)\n"
        "from hltmt_plugin.experiments.plots import pyplot\npyplot()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "matplotlib" not in done.stderr, done.stderr[-2000:]
