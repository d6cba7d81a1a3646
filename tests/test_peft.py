"""Parameter-efficient training (hltmt_plugin/peft.py): ``--train-only`` trains the chosen
parameter groups and freezes everything else, in the model and through the real fairseq-train."""

import pytest

from adapters_common import BASE_PAIRS, train
from conftest import LIKE_TRAINED, MADX, build, cli, mixed_sample, run, train_args, updates
from hltmt_plugin.compat.safe_loading import load_state
from hltmt_plugin.errors import HltmtConfigError


def test_houlsby_shared_adapters_train_with_only_them_and_the_layer_norms(data_bin, tmp_path):
    done = train(
        data_bin,
        tmp_path,
        "--lang-pairs",
        BASE_PAIRS,
        "--shared-adapters",
        "--adapter-placement",
        "houlsby",
        "--decoder-adapters",
        "--train-only",
        "shared-adapters,layer-norms",
        "--max-update",
        "3",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    log = done.stdout + done.stderr
    assert "shared adapters (all languages): +" in log and "train only shared-adapters,layer-norms:" in log
    state = load_state(tmp_path / "checkpoint_last.pt")
    assert any(".adapters.self_attn.shared_adapter." in k for k in state["model"])


# ---------------------------------------------------------------------------------------
# --train-only in the model


@pytest.mark.parametrize(
    "spec, trains, frozen",
    [
        (
            "adapters:gu",
            [".language_adapters.gu.", "invertible_adapters.adapters.gu."],
            [".language_adapters.en.", "shared_adapter", "decoder.slp.", "encoder.layers.0.fc1"],
        ),
        (
            "shared-adapters,slp,gate",
            ["shared_adapter", "decoder.slp.pool.", "decoder.slp_router.gate."],
            ["language_adapters", "decoder.slp.universal.", "embed_tokens"],
        ),
        ("universal,layer-norms", ["decoder.slp.universal.", "layer_norm"], ["fc1.", "fc2.", "shared_adapter"]),
    ],
)
def test_train_only_freezes_everything_outside_the_groups(data_bin, spec, trains, frozen):
    _, _, model = build(data_bin, *MADX, "--train-only", spec)
    for name, p in model.named_parameters():
        if any(t in name for t in trains):
            assert p.requires_grad, name
        elif any(f in name for f in frozen):
            assert not p.requires_grad, name
    assert any(p.requires_grad for p in model.parameters())


def test_lang_token_rows_keep_the_gradient_of_their_rows_only(data_bin):
    _, task, model = build(data_bin, *MADX, "--train-only", "lang-token-rows:hi+gu")
    weight = model.encoder.embed_tokens.weight
    assert weight.requires_grad and not model.decoder.embed_tokens.weight.requires_grad
    sample = mixed_sample(task, ["en-hi", "en-gu", "en-de"])
    model.train()
    model(**sample["net_input"])[0].sum().backward()
    rows = {model.encoder.languages.token_index("hi"), model.encoder.languages.token_index("gu")}
    nonzero = set(weight.grad.abs().sum(1).nonzero().view(-1).tolist())
    assert nonzero == rows


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--train-only", "adapterz"], "unknown group 'adapterz'"),
        (["--train-only", "adapters:xx"], "names xx, not in the language list"),
        (["--train-only", "slp:de"], "group slp has no languages"),
        (
            ["--language-adapters", "--enable-lang-ids", "--train-only", "invertible-adapters"],
            "selects no parameter of this model \\(add --invertible-adapters\\)",
        ),
        (
            ["--language-adapters", "--enable-lang-ids", "--adapter-langs", "en,de", "--train-only", "adapters:hi"],
            "hi has no adapters \\(add it to --adapter-langs\\)",
        ),
        (
            ["--train-only", "lang-token-rows:hi", "--optimizer", "adam", "--weight-decay", "0.01"],
            "use --weight-decay 0",
        ),
    ],
)
def test_bad_train_only_options_are_refused(data_bin, extra, message):
    with pytest.raises(HltmtConfigError, match=message):
        build(data_bin, *extra)


def test_train_only_a_group_that_some_batches_do_not_reach_trains(data_bin, tmp_path):
    """The first batches of this run go to de and fr only (the pool): the universal layer is
    not in their graph, which was fairseq's `element 0 of tensors does not require grad`."""
    done = run(
        [
            cli("fairseq-train"),
            *train_args(
                data_bin,
                *LIKE_TRAINED,
                "--save-dir",
                str(tmp_path / "s"),
                "--hlt-stage",
                "high",
                "--train-only",
                "universal",
                "--max-update",
                "4",
            ),
        ]
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    assert updates(log) == [1, 2, 3, 4]
