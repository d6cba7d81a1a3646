#!/usr/bin/env python3
"""Multi-process fairseq-train: one process per rank, as fairseq 0.12 needs on CPU.

    USER_DIR=$(python -c 'import hltmt_plugin, os; print(os.path.dirname(hltmt_plugin.__file__))')
    hltmt-launch --nproc 2 -- DATA --user-dir "$USER_DIR" --task hltmt_translation ...
    # several machines of 4 GPUs: the same command on each, with --nnodes, --node-rank, --master-*
    hltmt-launch --gpu --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500 --nproc 4 -- DATA ...

fairseq 0.12 starts its workers one per GPU, so on a CPU its own ways fail (``--cpu
--distributed-world-size 2`` stops on an assertion, exit 1, and with an init method added
starts no worker and exits 0; ``torchrun`` without ``--distributed-world-size`` trains
independent copies that overwrite each other's checkpoints). What works is one process per
rank with an explicit TCP rendezvous; this launcher starts them with
``--distributed-init-method tcp://ADDR:PORT --distributed-world-size N --distributed-rank R
--distributed-no-spawn`` and the gloo backend (NCCL and ``--device-id`` per local rank with
``--gpu``, refused before any rank starts unless torch sees a GPU for each), streams rank 0's
output, writes every rank's output to ``LOG_DIR/rank{R}.log``, and when a rank fails stops the
others and exits non-zero with the failed rank's log tail. It refuses the distributed options
it sets itself. ``--ddp-backend`` defaults to ``legacy_ddp`` on CPU (fairseq's ``pytorch_ddp``
passes ``device_ids`` and fails there); hltmt_translation keeps modules that no worker used in
an update out of the optimizer step, so legacy_ddp's zero-filled gradients do not move them.
fairseq's start-up warnings (hydra, pin_memory, tensorboardX) are kept out of the ranks' output
unless PYTHONWARNINGS is set.
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from hltmt_plugin.cli import add_version

# fairseq 0.12's own noise on every start (hydra's deprecation notices, pin_memory without a GPU,
# torch.cuda.amp FutureWarnings, tensorboardX missing): kept out of the ranks' output unless the
# user set PYTHONWARNINGS; the plugin itself emits no Python warnings
QUIET_WARNINGS = "ignore::UserWarning,ignore::FutureWarning,ignore::DeprecationWarning"
NOISE = ("Please install tensorboardX",)

OWN = (
    "--distributed-init-method",
    "--distributed-world-size",
    "--distributed-rank",
    "--distributed-no-spawn",
    "--distributed-port",
    "--device-id",
    "--distributed-backend",
)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as written, and every option's default in --help."""


def build_parser():
    from hltmt_plugin.hub.arguments import count_option
    from hltmt_plugin.paths import WORK_FOLDER, ArgumentParser, path_option

    p = ArgumentParser(
        description=__doc__, formatter_class=HelpFormatter, usage="%(prog)s [options] -- FAIRSEQ_TRAIN_ARGUMENTS"
    )
    p.add_argument("--nproc", type=count_option, default=2, help="processes (ranks) on this machine")
    p.add_argument("--nnodes", type=int, default=1, help="machines")
    p.add_argument("--node-rank", type=int, default=0, help="this machine's index among --nnodes")
    p.add_argument("--master-addr", default="127.0.0.1", help="address of the machine with node rank 0")
    p.add_argument("--master-port", type=int, default=0, help="default: a free port (single machine only)")
    p.add_argument("--gpu", action="store_true", help="NCCL, one GPU per local rank")
    path_option(
        p, "--log-dir", kind=WORK_FOLDER, default=None, help="where rank{R}.log go (default: the --save-dir, or .)"
    )
    return add_version(p)


def refuse(message):
    """One error line on stderr; the exit code 2."""
    print(f"hltmt-launch: error: {message}", file=sys.stderr)
    return 2


def check_options(args, train):
    """What is wrong with the launcher's options or the fairseq-train arguments, in one line;
    None when nothing is."""
    clash = [o for o in OWN if any(a == o or a.startswith(o + "=") for a in train)]
    if clash:
        return f"{', '.join(clash)} is set by the launcher; remove it from the fairseq-train arguments"
    if args.nproc < 1 or args.nnodes < 1 or not 0 <= args.node_rank < args.nnodes:
        return "need --nproc >= 1, --nnodes >= 1 and 0 <= --node-rank < --nnodes"
    if args.nnodes > 1 and args.master_port == 0:
        return "with several machines give the same --master-port on each"
    if args.gpu and "--cpu" in train:
        return "--gpu trains on GPUs and --cpu on the CPU: give one of them"
    return None


def check_gpus(args):
    """What keeps ``--gpu`` from starting its ranks on this machine (a GPU per local rank, NCCL),
    in one line; None when nothing does, or without ``--gpu``."""
    if not args.gpu:
        return None
    import torch

    found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if found < args.nproc:
        cpu = "; without --gpu the ranks train on the CPU (gloo)" if found == 0 else ""
        return f"--gpu needs a GPU for each of the {args.nproc} ranks (--nproc) and torch sees {found} here{cpu}"
    if not torch.distributed.is_nccl_available():
        return "--gpu uses NCCL, which this torch build does not have"
    return None


def device_defaults(train, gpu):
    """The fairseq-train arguments with the CPU's defaults added: ``--ddp-backend legacy_ddp``
    unless one is given, and ``--cpu``."""
    train = list(train)
    if "--ddp-backend" not in train and not gpu:
        train += ["--ddp-backend", "legacy_ddp"]
    if not gpu and "--cpu" not in train:
        train += ["--cpu"]
    return train


def rank_command(args, train, rendezvous, world, local):
    """The fairseq-train command line of local rank ``local`` on this machine."""
    rank = args.node_rank * args.nproc + local
    cmd = [
        os.path.join(os.path.dirname(sys.executable), "fairseq-train"),
        *train,
        "--distributed-init-method",
        rendezvous,
        "--distributed-world-size",
        str(world),
        "--distributed-rank",
        str(rank),
        "--distributed-no-spawn",
        "--distributed-backend",
        "nccl" if args.gpu else "gloo",
    ]
    if args.gpu:
        cmd += ["--device-id", str(local)]
    return cmd


def rank_env():
    """The ranks' environment: this one, with fairseq's start-up warnings off unless
    PYTHONWARNINGS is set."""
    env = dict(os.environ)
    if not env.get("PYTHONWARNINGS"):
        env["PYTHONWARNINGS"] = QUIET_WARNINGS
    return env


def pump(proc, log, echo):
    """Copies a rank's output into its log, and to the console when ``echo`` (fairseq's noise left out)."""
    for line in proc.stdout:
        log.write(line)
        log.flush()
        if echo and not any(n in line for n in NOISE):
            print(line, end="", flush=True)


def wait_for_ranks(procs):
    """Waits until every rank has finished or one has failed: the index of the first failed
    rank, -1 on Ctrl-C, None when all succeeded."""
    failed = None
    try:
        while failed is None and any(proc.poll() is None for proc in procs):
            failed = next((i for i, proc in enumerate(procs) if proc.poll() not in (None, 0)), None)
            time.sleep(0.2)
        if failed is None:
            failed = next((i for i, proc in enumerate(procs) if proc.returncode != 0), None)
    except KeyboardInterrupt:
        failed = -1
    return failed


def stop_ranks(procs):
    """SIGTERM to every rank still running, SIGKILL to those not gone after 20 s."""
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def report_failure(log_path, rank, code):
    """The failed rank's log tail, then one error line, on stderr."""
    tail = open(log_path, encoding="utf-8").read().splitlines()[-20:]
    print("\n".join(line[:300] for line in tail), file=sys.stderr)
    print(f"hltmt-launch: error: rank {rank} failed (exit {code}); the other ranks were stopped", file=sys.stderr)


def launch(args, train):
    """Starts this machine's ranks, streams rank 0's output, waits for them, and stops them all
    when one fails; the exit code."""
    world = args.nproc * args.nnodes
    rendezvous = f"tcp://{args.master_addr}:{args.master_port or free_port()}"
    train = device_defaults(train, args.gpu)
    save_dir = train[train.index("--save-dir") + 1] if "--save-dir" in train else "."
    log_dir = args.log_dir or save_dir
    os.makedirs(log_dir, exist_ok=True)
    ranks = [args.node_rank * args.nproc + local for local in range(args.nproc)]
    procs, logs = [], []
    for local, rank in enumerate(ranks):
        logs.append(open(os.path.join(log_dir, f"rank{rank}.log"), "w", encoding="utf-8"))
        procs.append(
            subprocess.Popen(
                rank_command(args, train, rendezvous, world, local),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
                env=rank_env(),
            )
        )
    print(
        f"hltmt-launch: {args.nproc} ranks on this machine, world size {world}, rendezvous "
        f"{rendezvous}, logs in {log_dir}/rank*.log",
        flush=True,
    )
    threads = [
        threading.Thread(target=pump, args=(proc, log, i == 0 and args.node_rank == 0), daemon=True)
        for i, (proc, log) in enumerate(zip(procs, logs))
    ]
    for t in threads:
        t.start()
    failed = wait_for_ranks(procs)
    if failed is not None:
        stop_ranks(procs)
    for t in threads:
        t.join(timeout=5)
    for log in logs:
        log.close()
    if failed is None:
        return 0
    if failed >= 0:
        report_failure(os.path.join(log_dir, f"rank{ranks[failed]}.log"), ranks[failed], procs[failed].returncode)
    return 1


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = build_parser()
    if "--" not in argv:
        if any(a in ("-h", "--help") for a in argv):
            p.print_help()
            return 0
        if "--version" in argv:
            p.parse_args(["--version"])  # prints it and exits 0
        return refuse(
            "put the fairseq-train arguments after --, e.g. hltmt-launch --nproc 2 -- DATA "
            '--user-dir "$USER_DIR" --task hltmt_translation ... (see --help)'
        )
    split = argv.index("--")
    args = p.parse_args(argv[:split])
    problem = check_options(args, argv[split + 1 :]) or check_gpus(args)
    if problem:
        return refuse(problem)
    return launch(args, argv[split + 1 :])


if __name__ == "__main__":
    sys.exit(main())
