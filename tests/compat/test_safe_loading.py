"""Checkpoints load under torch >= 2.6 with weights-only protection on; anything else is refused,
through the plugin's loader (what the hub uses in a program), fairseq's loader in a command's
process, the real fairseq-generate and fairseq-train, and hltmt-adapters: truncated, missing and
crafted checkpoints are one line, and a checkpoint without --user-dir gets fairseq's own message,
as docs/bad-input.md says. Every torch.load of the package, the scripts and the examples is the
loader's own (an ast reading of every file)."""

import ast
import fractions
import logging
import os
import pickle
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest
import torch
from fairseq import checkpoint_utils

from conftest import DECODE_EN_DE, LIKE_TRAINED, PLUGIN, ROOT, assert_clear, cli, generate_args, run, train_args
from hltmt_plugin.compat import safe_loading
from hltmt_plugin.compat.safe_loading import TRUST_ENV, load_checkpoint, load_state
from hltmt_plugin.errors import HltmtInputError


@pytest.fixture
def fairseq_loader(monkeypatch):
    """fairseq's ``load_checkpoint_to_cpu`` as a command's process has it (safe_loading.install),
    put back as fairseq has it after the test (this process is a program, not a command)."""
    for name in ("torch", "load_checkpoint_to_cpu"):
        monkeypatch.setattr(checkpoint_utils, name, getattr(checkpoint_utils, name))
    safe_loading.install(checkpoint_utils)
    return checkpoint_utils.load_checkpoint_to_cpu


# the plugin's loader (the hub's, in any program) and fairseq's in a command's process
@pytest.fixture(params=["plugin", "fairseq"])
def loader(request):
    return load_checkpoint if request.param == "plugin" else request.getfixturevalue("fairseq_loader")


def test_a_trained_checkpoint_loads_with_weights_only_and_torch_is_left_as_it_was(trained, loader):
    ckpt, _ = trained
    allowed = torch.serialization.get_safe_globals()
    state = load_state(ckpt)
    assert "decoder.slp_router.routing_map" in state["model"] and "decoder.slp_router.gate.weight" in state["model"]
    loaded = loader(ckpt)
    assert loaded["cfg"]["model"].arch == "hltmt_transformer_tiny"
    assert torch.serialization.get_safe_globals() == allowed  # the allowlist was the load's only
    with pytest.raises(pickle.UnpicklingError, match="argparse.Namespace"):  # this program's torch: as it was
        torch.load(ckpt, map_location="cpu", weights_only=True)


@pytest.mark.fast
def test_overlapping_hub_loads_in_threads_share_the_loader_and_leave_fairseq_as_it_was():
    """``fairseq_loading`` (the hub's ``from_pretrained`` in a program): a second thread's load
    that starts during the first and ends after it reads through the plugin's loader to its
    end, and fairseq's module is as it was once both have ended."""
    fairseq_load = object()
    utils = SimpleNamespace(torch=torch, load_checkpoint_to_cpu=lambda path: fairseq_load)
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with safe_loading.fairseq_loading(utils):
            first_in.set()
            second_in.wait(10)
        first_out.set()

    def second():
        first_in.wait(10)
        with safe_loading.fairseq_loading(utils):
            second_in.set()
            first_out.wait(10)
            seen["torch"] = utils.torch
            seen["guarded"] = getattr(utils.load_checkpoint_to_cpu, "hltmt_guarded", False)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert isinstance(seen["torch"], safe_loading._WeightsOnlyTorch) and seen["guarded"], seen
    assert utils.torch is torch and utils.load_checkpoint_to_cpu("x") is fairseq_load


class Boom:
    def __reduce__(self):
        return (os.system, ("touch " + os.environ["BOOM_MARKER"],))


def test_a_pickle_that_runs_code_is_refused_and_runs_nothing(tmp_path, monkeypatch, loader):
    marker = tmp_path / "ran"
    monkeypatch.setenv("BOOM_MARKER", str(marker))
    path = tmp_path / "evil.pt"
    with open(path, "wb") as f:
        torch.save({"model": {}, "payload": Boom()}, f)
    with pytest.raises(HltmtInputError, match=r"refused to load checkpoint .*evil.pt: it holds (posix|os)\.system"):
        loader(str(path))
    assert not marker.exists()


def test_a_trusted_file_with_extra_types_loads_loudly(trained, tmp_path, monkeypatch, caplog, loader):
    ckpt, _ = trained
    state = load_state(ckpt)
    state["extra_state"]["ratio"] = fractions.Fraction(1, 3)
    path = tmp_path / "extra.pt"
    torch.save(state, path)
    with pytest.raises(HltmtInputError, match="fractions.Fraction"):
        loader(str(path))
    monkeypatch.setenv(TRUST_ENV, str(path))
    with caplog.at_level(logging.WARNING):
        loaded = loader(str(path))
    assert loaded["extra_state"]["ratio"] == fractions.Fraction(1, 3)
    assert "full pickle" in caplog.text
    assert torch.load.__name__ == "load"  # the full-pickle load was temporary


def test_truncated_and_missing_checkpoints_are_clear_errors(trained, tmp_path, loader):
    ckpt, _ = trained
    cut = tmp_path / "cut.pt"
    cut.write_bytes(open(ckpt, "rb").read()[: os.path.getsize(ckpt) // 2])
    with pytest.raises(HltmtInputError, match="truncated or not a checkpoint"):
        loader(str(cut))
    with pytest.raises(HltmtInputError, match="does not exist"):
        loader(str(tmp_path / "none.pt"))


NEWER_FAIRSEQ = '''
import os, sys, textwrap
import torch
from fairseq import checkpoint_utils

# fairseq's main branch (after fairseq issue 5610) loads with weights_only=False; stand that
# loader in, written in checkpoint_utils' own namespace as upstream has it, BEFORE the plugin loads;
# this process is one of fairseq's commands (fairseq_cli imported), where the workarounds apply
exec(textwrap.dedent("""
def load_checkpoint_to_cpu(path, arg_overrides=None, load_on_all_ranks=False):
    with open(path, "rb") as f:
        state = torch.load(f, map_location=torch.device("cpu"), weights_only=False)
    return state
"""), checkpoint_utils.__dict__)

import fairseq_cli.generate  # noqa: E402,F401
import hltmt_plugin  # noqa: E402
from hltmt_plugin.errors import HltmtInputError  # noqa: E402

try:
    checkpoint_utils.load_checkpoint_to_cpu(sys.argv[1])
except HltmtInputError as error:
    print("REFUSED", error)
else:
    print("LOADED")
'''


def test_a_loader_that_asks_for_full_pickle_still_loads_weights_only(tmp_path, monkeypatch):
    """Newer fairseq passes weights_only=False inside load_checkpoint_to_cpu: the plugin's
    protection holds whatever fairseq passes (a crafted pickle is refused and runs nothing)."""
    marker = tmp_path / "ran"
    path = tmp_path / "evil.pt"
    env = dict(os.environ, BOOM_MARKER=str(marker))
    monkeypatch.setenv("BOOM_MARKER", str(marker))  # read when Boom is pickled
    with open(path, "wb") as f:
        torch.save({"model": {}, "payload": Boom()}, f)
    script = tmp_path / "newer_fairseq.py"
    script.write_text(NEWER_FAIRSEQ)
    done = subprocess.run([sys.executable, str(script), str(path)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "REFUSED refused to load checkpoint" in done.stdout and "system" in done.stdout, done.stdout
    assert not marker.exists()


def test_a_plugin_file_that_runs_code_is_refused_and_runs_nothing(tmp_path, monkeypatch):
    """The plugin's own files (a language's adapter file) are read weights-only always: also
    when HLTMT_TRUSTED_CHECKPOINTS names them (it is for checkpoints)."""
    from hltmt_plugin.adapters.files import FILE_FORMAT, read_language_file
    from hltmt_plugin.compat.safe_loading import load_plugin_file

    marker = tmp_path / "ran"
    monkeypatch.setenv("BOOM_MARKER", str(marker))
    path = tmp_path / "hi.adapters.pt"
    torch.save({"format": FILE_FORMAT, "version": 1, "lang": "hi", "payload": Boom()}, path)
    line = rf"^refused to load adapter file {path}: it holds (posix|os)\.system, which is outside the allowlist"
    with pytest.raises(HltmtInputError, match=line):
        load_plugin_file(str(path))
    monkeypatch.setenv(TRUST_ENV, str(path))
    with pytest.raises(HltmtInputError, match=line):
        read_language_file(str(path))
    assert not marker.exists()


def test_hltmt_adapters_refuses_a_file_that_runs_code_in_the_one_line_before_the_model_loads(tmp_path):
    """The line every route gives: no torch advice to use weights_only=False, no fairseq log line."""
    from hltmt_plugin.adapters.files import FILE_FORMAT

    marker = tmp_path / "ran"
    path = tmp_path / "hi.adapters.pt"
    env = dict(os.environ, BOOM_MARKER=str(marker))
    os.environ["BOOM_MARKER"] = str(marker)
    try:
        torch.save({"format": FILE_FORMAT, "version": 1, "lang": "hi", "payload": Boom()}, path)
    finally:
        del os.environ["BOOM_MARKER"]
    checkpoint = tmp_path / "base.pt"
    checkpoint.write_bytes(b"never read")
    done = subprocess.run(
        [cli("hltmt-adapters"), "import", "--path", str(checkpoint), "--adapters", str(path)]
        + ["--out", str(tmp_path / "out.pt")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 1 and done.stdout == "", done.stderr[-2000:]
    [line] = done.stderr.splitlines()
    assert line.split(": error: ", 1)[0] in ("hltmt_plugin", "hltmt-adapters"), line
    assert line.split(": error: ", 1)[1] == (
        f"refused to load adapter file {path}: it holds posix.system, which is outside the allowlist of types "
        "that fairseq checkpoints hold, and unpickling it could run code (nothing was run)."
    )
    assert not marker.exists() and not (tmp_path / "out.pt").exists()


# ---------------------------------------------------------------------------------------
# one torch loader: every torch.load of the package, the scripts and the examples is the loader's


LOADER = os.path.join("hltmt_plugin", "compat", "safe_loading.py")
TREES = ("hltmt_plugin", "scripts", "examples")


def torch_loads(source: str):
    """The lines of ``source`` that reach ``torch.load`` (called or passed on, as
    ``torch.load`` or ``torch.serialization.load``, or imported from either module)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "load":
            owner = ast.unparse(node.value)
            if owner in ("torch", "torch.serialization"):
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module in ("torch", "torch.serialization"):
            if any(alias.name == "load" for alias in node.names):
                lines.append(node.lineno)
    return lines


def python_files():
    for tree in TREES:
        for folder, _, names in os.walk(os.path.join(ROOT, tree)):
            for name in sorted(names):
                if name.endswith(".py"):
                    yield os.path.relpath(os.path.join(folder, name), ROOT)


def test_every_torch_load_is_the_one_loaders():
    found = {}
    for path in python_files():
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            found[path] = torch_loads(f.read())
    assert len(found) > 100 and LOADER in found
    assert len(found.pop(LOADER)) == 1  # _unpickle: the one call, inside the allowlist of one load
    assert {path: lines for path, lines in found.items() if lines} == {}


@pytest.mark.parametrize(
    "planted",
    [
        "import torch\nstate = torch.load(path, weights_only=False)\n",
        "import torch\nread = torch.load\n",
        "import torch.serialization\nstate = torch.serialization.load(path)\n",
        "from torch import load\n",
        "from torch.serialization import load as read\n",
    ],
)
def test_the_one_loader_rule_finds_a_planted_load(planted):
    assert torch_loads(planted) != []
    assert torch_loads("import json\nrecord = json.load(f)\nstate = loader.load(path)\n") == []


# ---------------------------------------------------------------------------------------
# through fairseq-generate and fairseq-train


def test_truncated_and_missing_checkpoints(data_bin, trained, tmp_path):
    ckpt, _ = trained
    cut = tmp_path / "cut.pt"
    cut.write_bytes(open(ckpt, "rb").read()[:50000])
    assert_clear(
        run([cli("fairseq-generate"), *generate_args(data_bin, str(cut))]),
        "truncated or not a checkpoint",
        whole_output=False,
    )
    assert_clear(
        run([cli("fairseq-generate"), *generate_args(data_bin, str(tmp_path / "none.pt"))]),
        "checkpoint does not exist",
        whole_output=False,
    )


def craft(ckpt, folder, kind):
    """A copy of a real checkpoint with one of fairseq's records (or torch's) taken out."""
    import zipfile

    import torch

    out = str(folder / f"{kind}.pt")
    if kind == "no_version":  # the zip without torch's version records
        with zipfile.ZipFile(ckpt) as zin, zipfile.ZipFile(out, "w") as zout:
            for item in zin.infolist():
                if item.filename.rsplit("/", 1)[-1] not in ("version", ".format_version"):
                    zout.writestr(item, zin.read(item.filename))
        return out
    state = load_state(ckpt)
    if kind == "no_model":
        del state["model"]
    elif kind == "model_none":
        state["model"] = None
    elif kind == "no_cfg":
        state["cfg"] = state["args"] = None
        del state["cfg"]
    elif kind == "a_list":
        state = [1, 2]
    torch.save(state, out)
    return out


@pytest.mark.parametrize(
    "kind, message",
    [
        ("no_version", "is truncated or not a checkpoint (its zip has no 'version' record)"),
        ("no_model", "is not a fairseq checkpoint (no 'model' record)"),
        ("model_none", "is not a fairseq checkpoint (its 'model' record is a NoneType, not the model's weights)"),
        ("no_cfg", "is not a fairseq checkpoint (no 'cfg' or 'args' record: the options the model was trained with)"),
        ("a_list", "is not a fairseq checkpoint (it holds a list, not fairseq's dict of records)"),
    ],
)
def test_crafted_checkpoints_are_one_line(data_bin, trained, tmp_path, kind, message):
    path = craft(trained[0], tmp_path, kind)
    done = run([cli("fairseq-generate"), data_bin, *DECODE_EN_DE, "--path", path])
    assert_clear(done, f"checkpoint {path} {message}")


def test_a_crafted_checkpoint_to_restore_is_one_line(data_bin, trained, tmp_path):
    path = craft(trained[0], tmp_path, "no_cfg")
    done = run(
        [
            cli("fairseq-train"),
            *train_args(
                data_bin, *LIKE_TRAINED, "--save-dir", str(tmp_path / "s"), "--restore-file", path, "--max-update", "2"
            ),
        ]
    )
    assert_clear(done, f"checkpoint {path} is not a fairseq checkpoint (no 'cfg' or 'args' record")


# ---- a checkpoint without --user-dir: fairseq's message, documented with the workaround
def docs(name):
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        return f.read()


def test_a_checkpoint_without_user_dir_is_documented_as_fairseq_says_it(data_bin, trained):
    no_user_dir = [a for a in DECODE_EN_DE if a not in ("--user-dir", PLUGIN)]
    done = run([cli("fairseq-generate"), data_bin, *no_user_dir, "--path", trained[0]])
    assert done.returncode == 2
    said = "fairseq-generate: error: argument --task: invalid choice: 'hltmt_translation'"
    assert said in done.stderr
    parent = [a if a != "hltmt_translation" else "translation_multi_simple_epoch" for a in no_user_dir]
    done = run([cli("fairseq-generate"), data_bin, *parent, "--path", trained[0]])
    assert done.returncode == 1
    weights_only = "WeightsUnpickler error: Unsupported global: GLOBAL argparse.Namespace was not an allowed global"
    assert weights_only in done.stderr
    table = docs("docs/bad-input.md")  # the one page of every refusal and its message
    assert said in table and weights_only in table and "add `--user-dir" in table
