"""Training with several workers (hltmt_plugin/tasks/distributed.py): two training processes on
CPU (gloo) through hltmt-launch, the same routing draws and the same parameters on both ranks,
the stage switch, the idle-gradient rule, and the choices that cannot work."""

import re

import pytest
import torch

from conftest import build, cli, make_sample, run, train_args
from hltmt_plugin.pool.router import HARD

LAUNCH = cli("hltmt-launch")
COMMON = [
    "--criterion",
    "hltmt_cross_entropy",
    "--label-smoothing",
    "0.1",
    "--optimizer",
    "adam",
    "--lr",
    "2e-3",
    "--max-tokens",
    "1000",
    "--log-interval",
    "1",
    "--no-epoch-checkpoints",
    "--seed",
    "3",
]


def launch(data_bin, save, *extra, nproc=2):
    args = [a for a in train_args(data_bin, *COMMON, "--save-dir", str(save), *extra) if a != "--cpu"]
    return run([LAUNCH, "--nproc", str(nproc), "--", *args], env_extra={"OMP_NUM_THREADS": "1"})


def digests(save):
    found = {}
    for r in (0, 1):
        for m in re.finditer(r"parameter digest: rank (\d) update (\d+) (\w+)", open(save / f"rank{r}.log").read()):
            found[(int(m.group(1)), int(m.group(2)))] = m.group(3)
    return found


def test_two_ranks_stay_identical_through_hard_soft_and_the_stage_switch(data_bin, tmp_path):
    save = tmp_path / "dist"
    done = launch(data_bin, save, "--high-stage-updates", "4", "--max-update", "8", "--hlt-param-digest-interval", "2")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = digests(save)
    for update in (2, 4, 6, 8):
        assert found[(0, update)] == found[(1, update)], update
    assert len({found[(0, u)] for u in (2, 4, 6, 8)}) == 4  # the parameters do move
    log = open(save / "rank0.log").read()
    assert "distributed init (rank 1)" in log or "world size 2" in done.stdout
    assert "HLT-MT stage all (epoch 2, update 4): routing map fixed" in log
    assert (save / "checkpoint_last.pt").exists()


def test_two_ranks_with_language_ids_adapters_and_skills_and_an_empty_batch(data_bin, tmp_path):
    """The pages' two-process run with --enable-lang-ids: 360 validation sentences in batches of
    8 make 45 batches, so rank 1's last one is the empty batch fairseq pads a shorter shard with
    (before the collater's fix, rank 1 died there with KeyError: 'net_input')."""
    save = tmp_path / "dist"
    done = launch(
        data_bin,
        save,
        "--high-stage-updates",
        "3",
        "--max-update",
        "6",
        "--hlt-param-digest-interval",
        "3",
        "--batch-size-valid",
        "8",
        "--max-tokens-valid",
        "4000",
        "--enable-lang-ids",
        "--language-adapters",
        "--shared-adapters",
        "--invertible-adapters",
        "--skill-ffn",
        "--skill-attention",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = digests(save)
    assert found[(0, 3)] == found[(1, 3)] and found[(0, 6)] == found[(1, 6)]
    log = open(save / "rank0.log").read()
    assert "HLT-MT stage all (epoch 2, update 3)" in log
    assert len(re.findall(r"valid on 'valid' subset", log)) >= 2  # validated after each epoch, both ranks in step


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--ddp-backend", "pytorch_ddp"], "does not work on CPU in fairseq 0.12"),
        (["--distributed-world-size", "2"], "is set by the launcher"),
    ],
)
def test_wrong_distributed_choices_fail_with_advice(data_bin, tmp_path, extra, message):
    done = launch(data_bin, tmp_path / "x", "--max-update", "2", *extra)
    assert done.returncode != 0
    assert message in done.stderr, done.stderr[-2000:]


def test_modules_no_worker_used_keep_no_gradient(data_bin):
    """legacy_ddp zero-fills the gradients of unused parameters; the task drops them again so
    Adam (with momentum from earlier updates) leaves idle modules where they are."""
    _, task, model = build(data_bin)
    model.train()
    model.slp_router.mode = HARD
    sample = make_sample(task, ["en-de", "de-en"])  # de -> one pool module; en -> universal
    model(**sample["net_input"])[0].sum().backward()
    task.idle_gradients.note(model)  # what task.train_step does after the backward
    for param in model.parameters():  # what legacy_ddp's all-reduce leaves behind
        if param.grad is None:
            param.grad = torch.zeros_like(param)
    task.idle_gradients.drop(model)
    chosen = model.map_by_language()["de"]
    for t, module in enumerate(model.slp.pool):
        assert all((p.grad is None) == (t != chosen) for p in module.parameters())
    assert all(p.grad is not None for p in model.slp.universal.parameters())
    assert all(p.grad is None for p in model.slp_router.gate.parameters())


@pytest.mark.parametrize("precision", [["--fp16", "--fp16-no-flatten-grads"], ["--memory-efficient-fp16"]])
def test_the_idle_gradient_rule_holds_under_fairseqs_fp16_optimizers(data_bin, precision):
    """fairseq's FP16Optimizer fills a missing gradient with zeros when it copies the gradients
    to its float32 weights; the task drops them there too, so a hard step leaves the pool
    modules it did not use (and their Adam state) untouched. fairseq's fp16 optimizers run
    on CPU with the model in float32, which is enough for the logic."""
    from fairseq import optim, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser, train_args(data_bin, "--optimizer", "adam", "--lr", "0.1", "--hlt-stage", "all", *precision)
    )
    cfg = convert_namespace_to_omegaconf(args)
    from fairseq import tasks

    task = tasks.setup_task(args)
    torch.manual_seed(0)
    model = task.build_model(args)
    model.slp_router.fix_map(torch.tensor([0, 1]))
    params = [p for p in model.parameters() if p.requires_grad]
    wrapper = optim.MemoryEfficientFP16Optimizer if "--memory-efficient-fp16" in precision else optim.FP16Optimizer
    optimizer = wrapper.build_optimizer(cfg, params)
    model.train()
    criterion = task.build_criterion(cfg.criterion)
    # update 0 uses module 1 (fr), so Adam holds momentum for it; updates 1-2 leave it idle
    batches = [make_sample(task, ["en-fr", "en-de"])] + [make_sample(task, ["en-de", "de-en"])] * 2
    for update, sample in enumerate(batches):
        if update == 1:
            before = {n: p.detach().clone() for n, p in model.named_parameters()}
        optimizer.zero_grad()
        task.train_step(sample, model, criterion, optimizer, update)
        for p in params:  # what legacy_ddp leaves behind for unused parameters
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        optimizer.clip_grad_norm(0.0)  # the trainer's call, which copies the fp16 gradients over
        task.optimizer_step(optimizer, model, update)
    after = dict(model.named_parameters())
    moved = {n for n in before if not torch.equal(before[n], after[n].detach())}
    assert not any(n.startswith("decoder.slp.pool.1.") for n in moved), sorted(moved)[:5]
    assert any(n.startswith("decoder.slp.pool.0.") for n in moved)
    assert not any(n.startswith("decoder.slp_router.gate.") for n in moved)


def test_fp16_with_flat_weights_and_bf16_without_a_tpu_are_refused(data_bin):
    from hltmt_plugin.errors import HltmtConfigError

    with pytest.raises(HltmtConfigError, match="add --fp16-no-flatten-grads"):
        build(data_bin, "--fp16")
    with pytest.raises(HltmtConfigError, match="--bf16 in fairseq 0.12 is the TPU path"):
        build(data_bin, "--bf16")
