"""Checkpoints load under torch >= 2.6 with weights-only protection on; anything else is refused,
also through the real fairseq-generate and fairseq-train: truncated, missing and crafted
checkpoints are one line, and a checkpoint without --user-dir gets fairseq's own message, as
docs/bad-input.md says."""

import fractions
import logging
import os
import pickle

import pytest
import torch
from fairseq import checkpoint_utils

import hltmt_plugin  # noqa: F401  (installs the allowlist and the loader wrapper)
from conftest import DECODE_EN_DE, LIKE_TRAINED, PLUGIN, ROOT, assert_clear, cli, generate_args, run, train_args
from hltmt_plugin.compat.safe_loading import TRUST_ENV
from hltmt_plugin.errors import HltmtInputError


def test_a_trained_checkpoint_loads_with_weights_only(trained):
    ckpt, _ = trained
    state = torch.load(ckpt, map_location="cpu", weights_only=True)
    assert "decoder.slp_router.routing_map" in state["model"] and "decoder.slp_router.gate.weight" in state["model"]
    loaded = checkpoint_utils.load_checkpoint_to_cpu(ckpt)
    assert loaded["cfg"]["model"].arch == "hltmt_transformer_tiny"


class Boom:
    def __reduce__(self):
        return (os.system, ("touch " + os.environ["BOOM_MARKER"],))


def test_a_pickle_that_runs_code_is_refused_and_runs_nothing(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    monkeypatch.setenv("BOOM_MARKER", str(marker))
    path = tmp_path / "evil.pt"
    with open(path, "wb") as f:
        torch.save({"model": {}, "payload": Boom()}, f)
    with pytest.raises(HltmtInputError, match=r"refused to load checkpoint .*evil.pt: it holds (posix|os)\.system"):
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert not marker.exists()


def test_a_trusted_file_with_extra_types_loads_loudly(trained, tmp_path, monkeypatch, caplog):
    ckpt, _ = trained
    state = torch.load(ckpt, map_location="cpu", weights_only=True)
    state["extra_state"]["ratio"] = fractions.Fraction(1, 3)
    path = tmp_path / "extra.pt"
    torch.save(state, path)
    with pytest.raises(HltmtInputError, match="fractions.Fraction"):
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    monkeypatch.setenv(TRUST_ENV, str(path))
    with caplog.at_level(logging.WARNING):
        loaded = checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert loaded["extra_state"]["ratio"] == fractions.Fraction(1, 3)
    assert "full pickle" in caplog.text
    assert torch.load.__name__ == "load"  # the full-pickle load was temporary


def test_truncated_and_missing_checkpoints_are_clear_errors(trained, tmp_path):
    ckpt, _ = trained
    cut = tmp_path / "cut.pt"
    cut.write_bytes(open(ckpt, "rb").read()[: os.path.getsize(ckpt) // 2])
    with pytest.raises(HltmtInputError, match="truncated or not a checkpoint"):
        checkpoint_utils.load_checkpoint_to_cpu(str(cut))
    with pytest.raises(HltmtInputError, match="does not exist"):
        checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "none.pt"))


NEWER_FAIRSEQ = '''
import os, sys, textwrap
import torch
from fairseq import checkpoint_utils

# fairseq's main branch (after fairseq issue 5610) loads with weights_only=False; stand that
# loader in, written in checkpoint_utils' own namespace as upstream has it, BEFORE the plugin loads
exec(textwrap.dedent("""
def load_checkpoint_to_cpu(path, arg_overrides=None, load_on_all_ranks=False):
    with open(path, "rb") as f:
        state = torch.load(f, map_location=torch.device("cpu"), weights_only=False)
    return state
"""), checkpoint_utils.__dict__)

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
    import subprocess
    import sys

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
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        load_plugin_file(str(path))
    monkeypatch.setenv(TRUST_ENV, str(path))
    with pytest.raises(HltmtInputError, match=rf"^adapter file {path} is not readable \(Weights only load failed"):
        read_language_file(str(path))
    assert not marker.exists()


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
    state = torch.load(ckpt, map_location="cpu", weights_only=True)
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
