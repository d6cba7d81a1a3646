"""Checkpoints load under torch >= 2.6 with weights-only protection on; anything else is refused."""
import fractions
import logging
import os
import pickle

import pytest
import torch

from fairseq import checkpoint_utils

import hltmt_plugin  # noqa: F401  (installs the allowlist and the loader wrapper)
from hltmt_plugin.checkpoints import TRUST_ENV
from hltmt_plugin.errors import HltmtInputError


def test_a_trained_checkpoint_loads_with_weights_only(trained):
    ckpt, _ = trained
    state = torch.load(ckpt, map_location="cpu", weights_only=True)
    assert "decoder.slp.fixed_map" in state["model"] and "decoder.slp.gate.weight" in state["model"]
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
