"""HLT-MT, LS-MNMT, adapters and skills started from a plain fairseq ``transformer`` checkpoint
trained with ``translation_multi_simple_epoch``: fairseq-train's own --finetune-from-model,
every dense tensor copied bit for bit, and the converted model's loss before its first
update against the dense model's on the same batch."""

import pytest
import torch

from hltmt_plugin.compat.safe_loading import load_checkpoint
from hltmt_plugin.hub.loading import load_model
from tests.conftest import LANGS, MADX, PAIRS, PLUGIN, build, cli, make_sample, run, with_lang_ids

DIRECTIONS = ["en-de", "en-fr", "en-gu", "en-hi", "de-en", "gu-en"] * 4
OPTIM = [
    "--criterion",
    "label_smoothed_cross_entropy",
    "--label-smoothing",
    "0.1",
    "--optimizer",
    "adam",
    "--lr",
    "2e-3",
    "--lr-scheduler",
    "inverse_sqrt",
    "--warmup-updates",
    "10",
    "--max-tokens",
    "1500",
    "--no-epoch-checkpoints",
    "--log-interval",
    "1",
    "--seed",
    "3",
    "--cpu",
]
DENSE = [
    "--user-dir",
    PLUGIN,
    "--task",
    "translation_multi_simple_epoch",
    "--arch",
    "transformer_hltmt_tiny",
    "--langs",
    LANGS,
    "--lang-pairs",
    PAIRS,
    "--encoder-langtok",
    "tgt",
]


@pytest.fixture(scope="module")
def dense(data_bin, tmp_path_factory):
    save = tmp_path_factory.mktemp("dense")
    done = run([cli("fairseq-train"), data_bin, *DENSE, *OPTIM, "--max-update", "30", "--save-dir", str(save)])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return str(save / "checkpoint_last.pt")


def converted(data_bin, dense_path, *options):
    """The hltmt_transformer that these options build, loaded from the dense checkpoint the way
    fairseq-train's --finetune-from-model loads it (model.load_state_dict, strict)."""
    args, task, model = build(data_bin, *options)
    state = load_checkpoint(dense_path)
    model.load_state_dict(state["model"], strict=True, model_cfg=args)  # (upgrades state["model"] in place)
    return task, model, load_checkpoint(dense_path)["model"]


def nll(model, sample) -> float:
    model.eval()
    with torch.no_grad():
        out = model(**sample["net_input"])
        lprobs = model.get_normalized_probs(out, log_probs=True)
    target = sample["target"]
    mask = target.ne(1)
    return float(-lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)[mask].mean())


CASES = {
    "hlt-mt": [],
    "ls-mnmt": ["--slp-language-specific"],
    "hlt-mt+adapters": MADX,
    "hlt-mt+skills": ["--skill-ffn", "--skill-attention", "--enable-lang-ids"],
}


@pytest.mark.parametrize("case", list(CASES))
def test_dense_weights_copied_and_loss_close(data_bin, dense, case):
    options = CASES[case]
    task, model, dense_state = converted(data_bin, dense, *options)
    ours = model.state_dict()
    for key, value in dense_state.items():
        if key.endswith("_float_tensor") or key.endswith(".version"):
            continue
        # the same name, or (skills) one copy per skill / language: <layer>.<...>.fc1.weight
        parent, tail = key.rsplit(".", 2)[0], ".".join(key.rsplit(".", 2)[1:])
        copies = [key] if key in ours else [k for k in ours if k.startswith(parent + ".") and k.endswith("." + tail)]
        assert copies, key
        for name in copies:
            assert torch.equal(ours[name], value), name  # bit for bit
    plain = [load_model(dense)[0]]
    sample = make_sample(task, DIRECTIONS, max_len=9)
    dense_loss = nll(plain[0], sample)  # (fairseq's transformer takes no src_lang_id)
    converted_loss = nll(model, with_lang_ids(task, sample, DIRECTIONS))
    print(f"{case}: dense {dense_loss:.4f} converted {converted_loss:.4f}")
    assert abs(converted_loss - dense_loss) < 0.05 * dense_loss


def test_stated_initialisation_is_the_closest(data_bin, dense):
    """The pool's stated start (fc2 at zero, the top layer's final layer norm) against the
    alternatives: the modules fully fresh, or fc2 at zero with a fresh layer norm."""
    task, model, dense_state = converted(data_bin, dense)
    plain = [load_model(dense)[0]]
    sample = make_sample(task, DIRECTIONS, max_len=9)
    dense_loss, stated = nll(plain[0], sample), nll(model, sample)
    modules = list(model.slp.pool) + [model.slp.universal]
    for module in modules:
        module.layer_norm.reset_parameters()
    zero_fc2_fresh_norm = nll(model, sample)
    torch.manual_seed(0)
    for module in modules:
        module.fc2.reset_parameters()
    fresh = nll(model, sample)
    print(
        f"dense {dense_loss:.4f}; stated start {stated:.4f}; fc2 at zero, fresh layer norm "
        f"{zero_fc2_fresh_norm:.4f}; fresh modules {fresh:.4f}"
    )
    assert abs(stated - dense_loss) < abs(zero_fc2_fresh_norm - dense_loss)
    assert abs(stated - dense_loss) < abs(fresh - dense_loss)


RESTORE = ["--reset-optimizer", "--reset-dataloader", "--reset-meters", "--reset-lr-scheduler"]


@pytest.mark.parametrize("how", ["--finetune-from-model", "--restore-file"])
def test_finetune_from_model_runs_the_stages(data_bin, dense, tmp_path, how):
    """fairseq-train --finetune-from-model (or --restore-file with every --reset-*) from the dense
    checkpoint into hltmt_transformer_tiny: stage high learns the gate on the converted model,
    then stage all."""
    save = tmp_path / "hltmt"
    start = [how, dense] + (RESTORE if how == "--restore-file" else [])
    done = run(
        [
            cli("fairseq-train"),
            data_bin,
            "--user-dir",
            PLUGIN,
            "--task",
            "hltmt_translation",
            "--arch",
            "hltmt_transformer_tiny",
            "--langs",
            LANGS,
            "--lang-pairs",
            PAIRS,
            "--encoder-langtok",
            "tgt",
            "--high-resource-langs",
            "de,fr",
            "--slp-pool-size",
            "2",
            *OPTIM,
            *start,
            "--high-stage-updates",
            "3",
            "--max-update",
            "6",
            "--save-dir",
            str(save),
        ]
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    assert "the checkpoint has no pool (a plain transformer)" in log
    assert "stage high" in log and "stage all" in log, log[-3000:]
    state = load_checkpoint(str(save / "checkpoint_last.pt"))
    assert state["optimizer_history"][-1]["num_updates"] == 6
    assert int(state["model"]["decoder.slp_router.gate_steps"]) > 0  # the gate learned in stage high
    assert state["model"]["decoder.slp_router.routing_map"][:, -1].sum() == 0  # and the map is fixed


@pytest.mark.parametrize(
    "extra", [MADX, ["--skill-ffn", "--skill-attention", "--enable-lang-ids"]], ids=["adapters alone", "skills alone"]
)
def test_capacity_alone_from_dense_is_the_dense_model(data_bin, dense, extra):
    """Without a pool, adapters (at identity) and skills (copies of the dense FFN) added to the
    dense checkpoint give exactly its loss before the first update."""
    from fairseq import options, tasks

    args = options.parse_args_and_arch(
        options.get_training_parser(),
        [
            data_bin,
            "--user-dir",
            PLUGIN,
            "--task",
            "hltmt_translation",
            "--arch",
            "hltmt_transformer_tiny",
            "--langs",
            LANGS,
            "--lang-pairs",
            PAIRS,
            "--encoder-langtok",
            "tgt",
            "--cpu",
            "--dropout",
            "0",
            *extra,
        ],
    )
    task = tasks.setup_task(args)
    model = task.build_model(args)
    model.load_state_dict(load_checkpoint(dense)["model"], strict=True, model_cfg=args)
    plain = [load_model(dense)[0]]
    sample = make_sample(task, DIRECTIONS, max_len=9)
    dense_loss = nll(plain[0], sample)
    assert nll(model, with_lang_ids(task, sample, DIRECTIONS)) == pytest.approx(dense_loss, abs=1e-5)


def test_pre_norm_pool_from_dense_is_exact(data_bin, tmp_path):
    """Pre-norm, the pool and the universal layer start as the exact identity and the decoder's
    final layer norm moves above them: the converted model's loss is the dense model's."""
    prenorm = ["--encoder-normalize-before", "--decoder-normalize-before"]
    done = run(
        [cli("fairseq-train"), data_bin, *DENSE, *prenorm, *OPTIM, "--max-update", "10", "--save-dir", str(tmp_path)]
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    path = str(tmp_path / "checkpoint_last.pt")
    task, model, dense_state = converted(data_bin, path, *prenorm)
    ours = model.state_dict()
    for key in ("weight", "bias"):
        assert torch.equal(ours["decoder.slp_output_norm." + key], dense_state["decoder.layer_norm." + key])
    plain = [load_model(path)[0]]
    sample = make_sample(task, DIRECTIONS, max_len=9)
    assert nll(model, sample) == pytest.approx(nll(plain[0], sample), abs=1e-5)
