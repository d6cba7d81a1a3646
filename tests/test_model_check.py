"""hltmt_plugin.model_check: the one check of a model. Its rules read from the options' names
(every probability, every head count, every size, the activation); finite weights at any depth;
and every file the plugin reads with torch passes it (compat/safe_loading's one torch.load), so
that a checkpoint holding NaN is refused on each route that loads one: translating, exporting,
averaging, fine-tuning."""

import argparse
import os

import pytest
import torch

from hltmt_plugin import model_check
from hltmt_plugin.errors import HltmtError

fast = pytest.mark.fast  # the fast tier (tests/tiers.py): every test here but the commands' one

GOOD = dict(
    encoder_embed_dim=32,
    decoder_embed_dim=32,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_embed_dim=64,
    decoder_ffn_embed_dim=64,
    dropout=0.1,
    attention_dropout=0.0,
    activation_dropout=0.0,
    encoder_layerdrop=0.0,
    activation_fn="relu",
)

BAD = {  # option -> (value, what the line says)
    "encoder_attention_heads": (3, "--encoder-attention-heads 3 does not divide --encoder-embed-dim 32"),
    "decoder_attention_heads": (5, "--decoder-attention-heads 5 does not divide --decoder-embed-dim 32"),
    "dropout": (5.0, "--dropout 5.0 is not a probability"),
    "attention_dropout": (-0.1, "--attention-dropout -0.1 is not a probability"),
    "encoder_layerdrop": (1.5, "--encoder-layerdrop 1.5 is not a probability"),
    "activation_fn": ("swish", "--activation-fn 'swish' is not one fairseq's transformer computes"),
    "encoder_ffn_embed_dim": (0, "--encoder-ffn-embed-dim 0 is not a size of at least 1"),
}


@fast
def test_options_fairseq_accepts_pass_as_a_namespace_a_map_and_fairseqs_config():
    from omegaconf import OmegaConf

    for form in (argparse.Namespace(**GOOD), dict(GOOD), OmegaConf.create(GOOD)):
        model_check.check_options(form, "x")
    assert model_check.problems(None) == []


@fast
@pytest.mark.parametrize("option", sorted(BAD))
def test_each_option_fairseq_refuses_is_one_line_naming_it(option):
    value, message = BAD[option]
    with pytest.raises(HltmtError) as caught:
        model_check.check_options(argparse.Namespace(**{**GOOD, option: value}), "the model")
    assert str(caught.value) == f"the model: {message}" or str(caught.value).startswith(f"the model: {message}")


@fast
def test_the_activations_are_fairseqs_own_choices():
    from fairseq.utils import get_available_activation_fns

    assert model_check.activations() == list(get_available_activation_fns())


@fast
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_weight_is_found_at_any_depth(bad):
    weights = {"a": torch.zeros(3), "b": {"c": [torch.ones(2), torch.tensor([1.0, bad])]}}
    with pytest.raises(HltmtError, match=r"the weight b\.c\[1\] holds"):
        model_check.check_finite(weights, "f")
    model_check.check_finite(
        {"ids": torch.arange(4), "empty": torch.zeros(0)}, "f"
    )  # integers, empty: nothing to check


def _checkpoint(path, model=None, **options):
    state = {"model": model or {"w": torch.zeros(2, 2)}, "args": None, "cfg": {"model": {**GOOD, **options}}}
    history = {"criterion_name": "x", "optimizer_name": "none", "lr_scheduler_state": {}, "num_updates": 0}
    state.update(optimizer_history=[history], extra_state={"train_iterator": {"epoch": 1}})
    torch.save(state, path)
    return str(path)


LOADERS = {  # every entry of the one torch loader
    "load_state": lambda p: __import__("hltmt_plugin.compat.safe_loading", fromlist=["x"]).load_state(p),
    "load_checkpoint": lambda p: __import__("hltmt_plugin.compat.safe_loading", fromlist=["x"]).load_checkpoint(p),
    "fairseq_checkpoint_load": lambda p: __import__(
        "hltmt_plugin.compat.safe_loading", fromlist=["x"]
    ).fairseq_checkpoint_load(p, map_location="cpu"),
    "load_plugin_file": lambda p: __import__("hltmt_plugin.compat.safe_loading", fromlist=["x"]).load_plugin_file(p),
}


@fast
def test_every_public_loader_is_listed():
    """A new entry of the one loader is tested here by construction: it is in LOADERS."""
    from hltmt_plugin.compat import safe_loading

    found = {name for name in dir(safe_loading) if name.startswith("load") and callable(getattr(safe_loading, name))}
    assert found | {"fairseq_checkpoint_load"} == set(LOADERS)


@fast
@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_every_loader_refuses_a_checkpoint_the_model_check_refuses(loader, tmp_path):
    nan = _checkpoint(tmp_path / "nan.pt", model={"w": torch.tensor([[0.0, float("nan")]])})
    with pytest.raises(HltmtError, match=r"nan\.pt: the weight w holds NaN"):
        LOADERS[loader](nan)
    heads = _checkpoint(tmp_path / "heads.pt", encoder_attention_heads=3)
    with pytest.raises(HltmtError, match="heads.pt: --encoder-attention-heads 3 does not divide"):
        LOADERS[loader](heads)
    LOADERS[loader](_checkpoint(tmp_path / "good.pt"))  # and a good one loads


def test_a_checkpoint_holding_nan_is_refused_by_the_commands_that_read_it(tmp_path):
    """hltmt-translate, hltmt-export and hltmt-average-checkpoints on the study's MNMT model with
    one weight NaN: one line naming it, exit non-zero, nothing written."""
    import subprocess
    import sys

    from conftest import ROOT

    source = os.path.join(ROOT, "docs", "results", "cpu-study", "models", "mnmt.pt")
    state = torch.load(source, weights_only=False)
    name = "decoder.layers.0.fc1.weight"
    state["model"][name][0, 0] = float("nan")
    bad = str(tmp_path / "nan.pt")
    torch.save(state, bad)
    data = os.path.dirname(source)
    bindir = os.path.dirname(sys.executable)
    commands = {
        "hltmt-translate": [
            f"{bindir}/hltmt-translate",
            "--checkpoint",
            bad,
            "--data",
            data,
            "--src",
            "en",
            "--tgt",
            "de",
        ],
        "hltmt-export": [
            f"{bindir}/hltmt-export",
            "--checkpoint",
            bad,
            "--data",
            data,
            "--out",
            str(tmp_path / "export"),
        ],
        "hltmt-average-checkpoints": [
            f"{bindir}/hltmt-average-checkpoints",
            "--inputs",
            bad,
            source,
            "--output",
            str(tmp_path / "avg.pt"),
        ],
    }
    for command, line in commands.items():
        done = subprocess.run(line, input="Hello.\n", capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert done.returncode != 0, command
        assert f"the weight {name} holds NaN" in done.stderr, (command, done.stderr[-500:])
        assert "Traceback" not in done.stderr, command
    assert not os.path.exists(tmp_path / "export") and not os.path.exists(tmp_path / "avg.pt")
