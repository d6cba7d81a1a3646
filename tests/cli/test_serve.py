"""hltmt-serve as a user runs it (hltmt_plugin/cli/serve.py): options refused in one line, a port
taken, a checkpoint and a CTranslate2 export served, SIGTERM under load (no new connection, the
requests in flight answered, exit 0). Loopback only."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT, cli, run
from serve_common import MODEL, MODELS, SENTENCES, SPM, post

CHECKPOINT = ["--model", MODEL, "--spm", SPM, "--data", MODELS]


def start(*args):
    """hltmt-serve on a free loopback port: (process, port), once it says it is serving."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [cli("hltmt-serve"), *args, "--port", "0", "--beam", "4", "--max-len", "30"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    line = proc.stderr.readline()
    assert "serving" in line, line + proc.stderr.read()[-2000:]
    return proc, int(line.split("http://127.0.0.1:")[1].split("/")[0])


@pytest.mark.fast
@pytest.mark.parametrize(
    "args, words",
    [
        (["--max-items", "300", "--max-queue", "100"], "--max-items 300 is more than --max-queue 100"),
        (["--port", "70000"], "--port must be from 0 to 65535"),
        (["--beam", "0"], "--beam must be at least 1"),
        (["--timeout", "0"], "--timeout must be more than 0"),
        (["--no-repeat-ngram-size", "1"], "--no-repeat-ngram-size must be 0 (off) or at least 2"),
    ],
)
def test_options_that_cannot_work_are_one_line(args, words):
    done = run([cli("hltmt-serve"), *CHECKPOINT, *args])
    assert done.returncode == 2 and words in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.fast
def test_a_missing_model_and_a_taken_port_are_one_line(tmp_path):
    done = run([cli("hltmt-serve"), "--model", str(tmp_path / "none.pt")])
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "none.pt" in done.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        done = run([cli("hltmt-serve"), *CHECKPOINT, "--port", str(taken.getsockname()[1])])
    assert done.returncode == 2 and done.stderr.startswith("hltmt-serve: error: cannot listen on 127.0.0.1:"), (
        done.stderr
    )
    assert len(done.stderr.strip().splitlines()) == 1


def test_sigterm_under_load_answers_the_requests_in_flight_then_exits():
    proc, port = start(*CHECKPOINT)
    answers = []
    lock = threading.Lock()

    def client(k):
        texts = [text for _, _, text in SENTENCES] * 4
        got = post(port, "/translate", {"q": texts, "source": "en", "target": SENTENCES[k][1]})
        with lock:
            answers.append(got)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    time.sleep(0.5)  # every request sent, most still queued
    proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(60)
    assert proc.wait(timeout=60) == 0
    rest = proc.stderr.read()
    assert rest.strip().endswith("hltmt-serve: stopped"), rest[-2000:]
    assert len(answers) == 6 and all(status == 200 and len(a["translatedText"]) == 32 for status, a in answers)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5)


@pytest.mark.parametrize("engine", ["ctranslate2", "transformers"])
def test_an_export_folder_is_served_by_its_engine(tmp_path, engine):
    folder = tmp_path / engine
    done = run(
        [cli("hltmt-export"), "--checkpoint", MODEL, "--spm", SPM, "--data", MODELS, "--out", str(folder)]
        + ["--to", engine]
    )
    assert done.returncode == 0, done.stderr[-2000:]
    proc, port = start("--model", str(folder), "--threads", "1")
    try:
        status, answer = post(
            port, "/v1/translate", {"items": [{"source": s, "target": t, "text": x} for s, t, x in SENTENCES[:3]]}
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    expected = run(
        [cli("hltmt-translate"), "--checkpoint", str(folder), "--json", "--beam", "4", "--max-len", "30"],
        input="".join(f"{s}\t{t}\t{x}\n" for s, t, x in SENTENCES[:3]),
    )
    assert status == 200 and expected.returncode == 0, expected.stderr
    lines = [json.loads(line) for line in expected.stdout.splitlines()]
    assert [r["translation"] for r in answer["results"]] == [line["translation"] for line in lines]
    assert [r["routing"] for r in answer["results"]] == [{"slp": "m0"}, {"slp": "m2"}, {"slp": "universal"}]


@pytest.mark.fast
def test_help_imports_neither_torch_nor_the_web_stack():
    from test_startup import PROBE

    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    heavy = ("torch", "fairseq", "starlette", "uvicorn")
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=heavy), cli("hltmt-serve"), "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.stdout.strip().splitlines()[-1].strip() == "EXIT 0 HEAVY", done.stdout[-500:] + done.stderr[-2000:]
    assert "LibreTranslate's API" in done.stdout and "--max-queue" in done.stdout


SIMULATED = """
import sys
sys.path[:0] = sys.argv[1:3]
import importlib.util as u
assert u.find_spec("torch") is None and u.find_spec("fairseq") is None
sys.argv = ["hltmt-serve", "--model", sys.argv[3], "--port", "0", "--threads", "1", "--beam", "4", "--max-len", "30"]
from hltmt_plugin.cli.serve import main
sys.exit(main())
"""


def simulated_install(root):
    """The serving install without pip: serving/setup.py's MODULES (each package's __init__.py with
    them) and this environment's site-packages without torch, fairseq or the full package."""
    import ast
    import shutil
    import site

    tree = ast.parse(open(os.path.join(ROOT, "serving", "setup.py"), encoding="utf-8").read())
    listed = next(n.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "MODULES")
    for module in ast.literal_eval(listed):
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


def test_the_serving_install_without_torch_serves_an_export_folder(tmp_path):
    from hltmt_plugin.export.ctranslate2 import export

    folder = str(tmp_path / "ct2")
    export(MODEL, folder)
    path = simulated_install(tmp_path / "install")
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", SIMULATED, *path, folder], stderr=subprocess.PIPE, text=True, env=env
    )
    line = proc.stderr.readline()
    assert "serving" in line and "(ctranslate2, 10 directions)" in line, line + proc.stderr.read()[-3000:]
    port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
    try:
        status, answer = post(port, "/translate", {"q": SENTENCES[0][2], "source": "en", "target": "de"})
    finally:
        proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0 and status == 200 and answer["translatedText"], answer


@pytest.mark.fast
def test_without_the_serve_extra_it_says_what_to_install():
    code = (
        "import sys; sys.modules['uvicorn'] = None\n"
        "from hltmt_plugin.cli.serve import main\n"
        f"sys.exit(main(['--model', {MODEL!r}]))"
    )
    done = run([sys.executable, "-c", code])
    said = [line for line in done.stderr.splitlines() if not line.startswith("INFO:")]  # fairseq's, in python -c
    assert done.returncode == 2 and len(said) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert (
        said[0].startswith("hltmt-serve: error: the server needs the serve extra")
        and 'pip install -e ".[serve]"' in done.stderr
    )
