"""serving/setup.py, the serving install: a new environment with only what serving an export
folder needs (the package's torch-free modules, CTranslate2, sentencepiece) translates the
committed study model's export as the checkpoint does, with torch and fairseq neither
installed nor imported. Builds the environment with pip (a package index must be reachable)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

pytest.importorskip("ctranslate2")

MODEL = os.path.join(ROOT, "docs", "results", "cpu-study", "models", "hltmt.pt")
ITEMS = [("en", "de", "The file is open."), ("en", "gu", "Open the file."), ("en", "fr", "Where is the station?")]

API = """
import json, sys
from hltmt_plugin.hub import HltmtTranslator
mt = HltmtTranslator.load(sys.argv[1], threads=1)
print(json.dumps([type(mt).__name__, mt.translate_batch(json.loads(sys.argv[2]), beam=5),
                  sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "fairseq"))]))
"""


@pytest.fixture(scope="module")
def servenv(tmp_path_factory):
    """A venv with the serving install, built from a copy of the checkout's files (pip writes its
    build folders beside setup.py)."""
    work = tmp_path_factory.mktemp("serving")
    shutil.copytree(os.path.join(ROOT, "serving"), work / "serving")
    shutil.copytree(
        os.path.join(ROOT, "hltmt_plugin"), work / "hltmt_plugin", ignore=shutil.ignore_patterns("__pycache__")
    )
    venv = work / "venv"
    subprocess.run([shutil.which("python3") or sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    done = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", str(work / "serving")],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return venv


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from hltmt_plugin.export.ctranslate2 import export

    folder = str(tmp_path_factory.mktemp("export") / "hltmt")
    export(MODEL, folder)
    return folder


def run(venv, *args, **kwargs):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env, timeout=600, **kwargs)


def test_the_serving_environment_has_neither_torch_nor_fairseq(servenv):
    done = run(
        servenv,
        servenv / "bin" / "python",
        "-c",
        "import importlib.util as u; print(u.find_spec('torch'), u.find_spec('fairseq'))",
    )
    assert done.stdout.split() == ["None", "None"], done.stderr[-2000:]
    listed = run(servenv, servenv / "bin" / "pip", "list", "--format", "json")
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert {"ctranslate2", "sentencepiece", "hltmt_plugin_serving"} <= {
        n.replace("-", "_") for n in names
    } and not names & {"torch", "fairseq"}


def test_it_serves_the_studys_export_as_the_checkpoint_translates(servenv, exported, tmp_path):
    from hltmt_plugin.hub import HltmtTranslator

    want = HltmtTranslator.load(MODEL, device="cpu").translate_batch(ITEMS, beam=5)
    done = run(servenv, servenv / "bin" / "python", "-c", API, exported, json.dumps(ITEMS), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == ["Ct2Translator", want, []]
    source = tmp_path / "in.tsv"
    source.write_text("".join(f"{s}\t{t}\t{x}\n" for s, t, x in ITEMS) + "en\txx\tbad\n", encoding="utf-8")
    done = run(servenv, servenv / "bin" / "hltmt-translate", "--checkpoint", exported, "--input", source, "--json")
    assert done.returncode == 1, done.stderr[-3000:]  # the last line fails alone
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["translation"] for line in lines[:3]] == want and "unknown language 'xx'" in lines[3]["error"]
    assert "line 4: unknown language" in done.stderr and "Traceback" not in done.stderr
    refused = run(
        servenv, servenv / "bin" / "hltmt-translate", "--checkpoint", exported, "--device", "cuda:3", input=""
    )
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "hltmt-translate: error: device cuda:3 is not available here" in refused.stderr


def simulated_install(root):
    """The serving install without pip: the package's serving modules (serving/setup.py's
    MODULES) and this environment's site-packages without torch, fairseq or the full package."""
    import re
    import site

    with open(os.path.join(ROOT, "serving", "setup.py"), encoding="utf-8") as f:
        modules = re.findall(r'"(hltmt_plugin[a-z_.]*)"', f.read().split("MODULES = [")[1].split("]")[0])
    for module in modules:
        parts = module.split(".")
        for depth in range(1, len(parts) + 1):
            name = os.path.join(*parts[:depth], "__init__.py") if depth < len(parts) else os.path.join(*parts) + ".py"
            os.makedirs(os.path.dirname(root / name), exist_ok=True)
            shutil.copyfile(os.path.join(ROOT, name), root / name)
    packages = root / "site"
    packages.mkdir()
    for folder in site.getsitepackages():
        for name in os.listdir(folder):
            if not name.startswith(("torch", "fairseq", "hltmt", "__editable__")) and not name.endswith(".pth"):
                if not (packages / name).exists():
                    os.symlink(os.path.join(folder, name), packages / name)
    return [str(root), str(packages)]


SIMULATED = """
import sys
sys.path[:0] = sys.argv[1:3]
import importlib.util as u
assert u.find_spec("torch") is None and u.find_spec("fairseq") is None
sys.argv = ["hltmt-translate", "--checkpoint", sys.argv[3]]
from hltmt_plugin.cli.translate import main
sys.exit(main())
"""


def test_a_checkpoint_given_to_the_serving_install_is_one_line_saying_what_it_serves(tmp_path):
    path = simulated_install(tmp_path)
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", SIMULATED, *path, MODEL],
        capture_output=True,
        text=True,
        input="",
        timeout=300,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr[-3000:]
    assert done.stderr.startswith(
        f"hltmt-translate: error: {MODEL} is not an export folder, and this install serves export folders only "
        "(hltmt-export makes one from a checkpoint): to load a checkpoint, install the plugin with its training stack"
    ), done.stderr
