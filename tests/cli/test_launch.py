"""hltmt-launch: its help, the fairseq-train arguments after ``--``, ``--gpu`` checked before any
rank starts, fairseq's start-up noise kept out of the ranks' output, and what fairseq 0.12 does
itself with two processes on a CPU (the two-rank runs are in tests/tasks/test_distributed.py)."""

import os
import subprocess

import pytest
import torch

from conftest import ONE_UPDATE, ROOT, assert_clear, cli, run, train_args


@pytest.mark.fast
def test_launch_help_is_help_and_a_missing_separator_is_one_line():
    launch = cli("hltmt-launch")
    done = run([launch, "--help"])
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert "usage: hltmt-launch [options] -- FAIRSEQ_TRAIN_ARGUMENTS" in done.stdout and "(default: 2)" in done.stdout
    done = run([launch, "--nproc", "2", "data-bin"])
    assert_clear(done, "put the fairseq-train arguments after --", prefix="hltmt-launch: error:", whole_output=False)


@pytest.mark.fast
def test_launch_keeps_fairseqs_start_up_noise_out_of_its_output(data_bin, tmp_path):
    launch = cli("hltmt-launch")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}  # not the suite's PYTHONWARNINGS=ignore
    done = subprocess.run(
        [
            launch,
            "--nproc",
            "1",
            "--",
            *train_args(data_bin, *ONE_UPDATE, "--save-dir", str(tmp_path / "s"), "--criterion", "hltmt_cross_entropy"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(env, OMP_NUM_THREADS="1"),
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "done training" in done.stdout
    for noise in ("UserWarning", "FutureWarning", "tensorboardX"):
        assert noise not in done.stdout + done.stderr, noise


def test_launch_builds_each_ranks_command_and_refuses_the_options_it_sets():
    from hltmt_plugin.cli.launch import build_parser, check_options, device_defaults, rank_command

    args = build_parser().parse_args(["--nproc", "2", "--nnodes", "2", "--node-rank", "1", "--master-port", "1234"])
    train = device_defaults(["data", "--save-dir", "s"], gpu=False)
    assert train == ["data", "--save-dir", "s", "--ddp-backend", "legacy_ddp", "--cpu"]
    cmd = rank_command(args, train, "tcp://127.0.0.1:1234", 4, 1)
    assert os.path.basename(cmd[0]) == "fairseq-train" and cmd[1 : len(train) + 1] == train
    opts = dict(zip(cmd, cmd[1:]))
    assert (opts["--distributed-rank"], opts["--distributed-world-size"], opts["--distributed-backend"]) == (
        "3",
        "4",
        "gloo",
    )
    assert "--device-id" not in cmd
    assert check_options(args, train) is None
    assert "is set by the launcher" in check_options(args, [*train, "--distributed-port=5"])
    assert "--master-port" in check_options(build_parser().parse_args(["--nnodes", "2"]), train)


@pytest.mark.fast
def test_gpu_without_a_gpu_for_each_rank_is_one_line_before_any_rank_starts(tmp_path):
    """--gpu asks for one GPU per local rank: one more rank than torch sees GPUs is refused
    before any rank starts (no raw NCCL error from inside the ranks), on any machine."""
    import torch

    found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    logs = tmp_path / "logs"
    done = run([cli("hltmt-launch"), "--gpu", "--nproc", str(found + 1), "--log-dir", str(logs), "--", "data"])
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert done.stderr == (
        f"hltmt-launch: error: --gpu needs a GPU for each of the {found + 1} ranks (--nproc) and torch sees {found} "
        f"here{'; without --gpu the ranks train on the CPU (gloo)' if found == 0 else ''}\n"
    )
    assert not logs.exists()
    done = run([cli("hltmt-launch"), "--gpu", "--nproc", "1", "--log-dir", str(logs), "--", "data", "--cpu"])
    assert_clear(done, "--gpu trains on GPUs and --cpu on the CPU", prefix="hltmt-launch: error:")


@pytest.mark.skipif(torch.cuda.device_count() > 0, reason="fairseq spawns a worker per GPU: the CPU-only case")
def test_fairseqs_own_two_processes_on_a_cpu_train_nothing_and_exit_0(data_bin, tmp_path):
    """What docs/distributed.md says fairseq 0.12 does, the reason for hltmt-launch: ``--cpu
    --distributed-world-size 2`` with an init method spawns one worker per GPU, none, trains
    nothing and exits 0 (without one it stops on ``AssertionError: world size is 2 but have 0
    available devices``, exit 1)."""
    save = tmp_path / "s"
    init = ["--distributed-world-size", "2", "--distributed-init-method", "tcp://127.0.0.1:1"]
    done = run([cli("fairseq-train"), *train_args(data_bin, *ONE_UPDATE, "--save-dir", str(save), *init)])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "done training" not in done.stdout + done.stderr and not save.exists()
