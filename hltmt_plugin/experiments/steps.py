"""What the experiment drivers (``hltmt-main-job``, ``hltmt-study``) and the experiment scripts
beside the package (scripts/gpu_run.py, examples/wmt10/xlmr_recipe.py) share: steps that run in
order and are marked done (a rerun resumes after the last completed one), a command run with its
output streamed to the console and a log, the training precision and GPU flags of fairseq-train,
and the errors that end a run in one line."""

import os
import platform
import shlex
import subprocess
import sys
import time
from typing import List

from hltmt_plugin.atomic_files import write_text
from hltmt_plugin.cli import CHECKOUT
from hltmt_plugin.cli.launch import NOISE, QUIET_WARNINGS  # fairseq's own start-up noise, as hltmt-launch keeps it out
from hltmt_plugin.errors import HltmtConfigError, HltmtError


def nproc():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class OptionError(HltmtConfigError):
    """Options of a driver that cannot work together (exit status 2)."""


# Training precision on a GPU -> fairseq-train's flags. The idle-gradient rule (a module that no
# worker used in an update stays out of the optimizer step) holds for all three: --amp keeps
# float32 weights and autocasts to float16; --fp16-no-flatten-grads gives fairseq's fp16
# optimizer one float32 copy per parameter, whose gradient the task can drop (a bare --fp16
# keeps one flat copy of all weights and steps it whole).
PRECISION_FLAGS = {"fp32": [], "amp": ["--amp"], "fp16": ["--fp16", "--fp16-no-flatten-grads"]}
PRECISION_HELP = (
    "training precision (default: amp on a GPU, fp32 on the CPU): amp is --amp (float16 "
    "autocast, float32 weights); fp16 is --fp16 --fp16-no-flatten-grads (fairseq's fp16 optimizer "
    "with one float32 copy per parameter, so modules an update did not use stay still; a bare "
    "--fp16 would step them)"
)
NGPU_HELP = (
    "GPUs each fairseq-train run uses (--distributed-world-size; with more than one also --ddp-backend "
    "legacy_ddp, which all-reduces every gradient so the task can leave modules that no worker used "
    "out of the update)"
)
BF16_REFUSED = (
    "--bf16 is not offered: fairseq 0.12's --bf16 is its TPU path and stops on a GPU or CPU; use "
    "--precision amp (float16 autocast over float32 weights) or --precision fp16"
)


def gpu_flags(precision: str, ngpu: int) -> List[str]:
    """fairseq-train's flags for ``ngpu`` GPUs at ``precision``: always the world size (fairseq
    would otherwise use every GPU it sees), and with several GPUs the DDP backend that keeps
    idle modules still."""
    flags = [*PRECISION_FLAGS[precision], "--distributed-world-size", str(ngpu)]
    return flags + (["--ddp-backend", "legacy_ddp"] if ngpu > 1 else [])


def resolve_device(args, dry_run=False):
    """'cuda' or 'cpu' from --gpu / --cpu (default: the GPU when torch sees one), the training
    precision, and fairseq-train's device flags. With ``dry_run``, --gpu is taken as given
    (no device is looked for)."""
    if args.bf16:
        raise OptionError(BF16_REFUSED)
    if args.gpu and args.cpu:
        raise OptionError("--gpu and --cpu exclude each other")
    if args.ngpu < 1:
        raise OptionError(f"--ngpu must be at least 1, got {args.ngpu}")
    if args.gpu and dry_run:
        cuda = True
    elif args.cpu:
        cuda = False
    else:
        import torch

        cuda = torch.cuda.is_available()
        if args.gpu and not cuda:
            raise OptionError("--gpu: torch sees no CUDA device (torch.cuda.is_available() is False)")
    device = "cuda" if cuda else "cpu"
    precision = args.precision
    if precision == "auto":
        precision = "amp" if device == "cuda" else "fp32"
    if device == "cpu" and precision == "fp16":
        raise OptionError("--precision fp16 needs a GPU; on the CPU use fp32 (or amp, which is then fp32)")
    if device == "cpu" and args.ngpu > 1:
        raise OptionError(f"--ngpu {args.ngpu} needs a GPU (--gpu); for several processes on the CPU see hltmt-launch")
    flags = gpu_flags(precision, args.ngpu) if device == "cuda" else PRECISION_FLAGS[precision]
    return device, precision, flags


def print_command(cmd) -> None:
    """One command line, quoted as a shell would need it (``--dry-run``)."""
    print(shlex.join(cmd), flush=True)


def reader_gone() -> int:
    """stdout closed by its reader (``--dry-run | head``): stop quietly, without a traceback."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 1


def say(msg, who="main_job", since=None):
    """A progress line of a driver: ``==> [who HH:MM:SS] msg``, or the seconds ``since`` a start."""
    clock = f"{time.time() - since:6.1f}s" if since is not None else time.strftime("%H:%M:%S")
    print(f"==> [{who} {clock}] {msg}", flush=True)


class StepFailed(HltmtError):
    """A step of a run that failed: the command and the tail of its log (exit status 1)."""


def is_done(run_dir, name):
    return os.path.exists(os.path.join(run_dir, f".done-{name}"))


def mark_done(run_dir, name, seconds):
    write_text(os.path.join(run_dir, f".done-{name}"), f"{seconds:.0f}s\n")


def run_steps(steps, run_dir, dry_run=False):
    """Run ``steps`` ((name, fn, args) each) in order, each marked done in ``run_dir`` when it
    ends, so that a rerun resumes after the last completed step. ``dry_run``: each step that
    is not done prints its commands instead of running them."""
    if dry_run:
        for n, (name, fn, fn_args) in enumerate(steps, 1):
            done = is_done(run_dir, name)
            print(f"# step {n}/{len(steps)} {name}" + (": already done, a run skips it" if done else ""))
            if not done:
                fn(*fn_args)
        return
    os.makedirs(run_dir, exist_ok=True)
    t_start = time.time()
    for n, (name, fn, fn_args) in enumerate(steps, 1):
        if is_done(run_dir, name):
            say(f"step {n}/{len(steps)} {name}: already done, skipped")
            continue
        say(f"step {n}/{len(steps)} {name} (run time so far {time.time() - t_start:.0f}s)")
        t0 = time.time()
        fn(*fn_args)
        mark_done(run_dir, name, time.time() - t0)
        say(f"step {n}/{len(steps)} {name} done in {time.time() - t0:.0f}s")
    say(f"finished in {time.time() - t_start:.0f}s: {os.path.join(run_dir, 'report', 'results.md')}")


def run_logged(cmd, log_path, prefix="", env=None):
    """Run cmd, streaming its output to the console (each line after ``prefix``) and to
    ``log_path``; ``env``: its environment (default: this one's)."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    env = dict(env or os.environ)
    if not env.get("PYTHONWARNINGS"):  # fairseq's hydra / pin_memory / torch.cuda.amp warnings, not ours
        env["PYTHONWARNINGS"] = QUIET_WARNINGS
    with open(log_path, "w", encoding="utf-8") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=CHECKOUT, env=env)
        for line in proc.stdout:
            if any(noise in line for noise in NOISE):
                continue
            log.write(line)
            sys.stdout.write(prefix + line)
            sys.stdout.flush()
        code = proc.wait()
    if code != 0:
        tail = [line[:300] for line in open(log_path, encoding="utf-8").read().splitlines()[-25:]]
        raise StepFailed(f"command failed (exit {code}); last lines of {log_path}:\n" + "\n".join(tail))


def experiment_cli(command: str) -> List[str]:
    """The experiment driver ``command`` (a module of this folder, e.g. ``report``) run by this
    Python, as :func:`hltmt_plugin.cli.plugin_cli` runs a user's command."""
    return [sys.executable, "-m", f"hltmt_plugin.experiments.{command}"]


def detect_machine():
    """One line naming this machine: CPU model and cores, and the GPU torch sees (if any)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    text = f"{cpu}, {cores} cores usable, Python {platform.python_version()}"
    try:
        import torch

        text += f", torch {torch.__version__}"
        if torch.cuda.is_available():
            text += f", GPU {torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda})"
        else:
            text += ", no GPU"
    except ImportError:
        pass
    return text
