"""What the experiment drivers (``hltmt-main-job``, ``hltmt-study``) and the experiment scripts
beside the package (scripts/gpu_run.py, examples/wmt10/xlmr_recipe.py) share: steps that run in
order and are marked done (a rerun resumes after the last completed one), a command run with its
output streamed to the console and a log (or to the log alone), the training precision and GPU
flags of fairseq-train, the decoding of every direction of every system over worker processes,
the hltmt-report line, and the errors that end a run in one line."""

import os
import platform
import re
import shlex
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence

from hltmt_plugin.atomic_files import write_text
from hltmt_plugin.cli import CHECKOUT, fairseq_cli
from hltmt_plugin.cli.decode import DecodeFailed, decode_all
from hltmt_plugin.cli.launch import NOISE, QUIET_WARNINGS  # fairseq's own start-up noise, as hltmt-launch keeps it out
from hltmt_plugin.errors import HltmtConfigError, HltmtError


def nproc():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class OptionError(HltmtConfigError):
    """Options of a driver that cannot work together (exit status 2)."""


# A plugin command refusing its input says so in one line: "hltmt-prepare-data: error: ...".
OWN_ERROR = re.compile(r"hltmt-[a-z-]+: error: ")

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


def run_logged(cmd, log_path, prefix="", env=None, dry_run=False):
    """Run cmd, streaming its output to the console (each line after ``prefix``) and to
    ``log_path``; ``env``: its environment (default: this one's). ``dry_run``: the command is
    printed instead (:func:`print_command`)."""
    if dry_run:
        return print_command(cmd)
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
        raise command_failed(code, log_path, 25)


def run_quiet(cmd, log_path, env=None, tail=15):
    """Run ``cmd`` with its output appended to ``log_path`` only (``env``: its environment,
    default this one's); a failure raises StepFailed with the log's last ``tail`` lines."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "a", encoding="utf-8") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=CHECKOUT, env=env).returncode
    if code != 0:
        raise command_failed(code, log_path, tail)


def command_failed(code, log_path, tail) -> StepFailed:
    """A failed command's one StepFailed: the plugin command's own error line when it refused
    (``hltmt-...: error: ...``, the problem named once), else the last ``tail`` lines of its log."""
    lines = read_log(log_path)
    own = [line for line in (lines or [])[-tail:] if OWN_ERROR.match(line)]
    if own:
        return StepFailed(f"{own[-1]} (exit {code}; its log: {log_path})")
    return StepFailed(f"command failed (exit {code}); last lines of {log_path}:\n{log_tail(log_path, tail, lines)}")


def read_log(path) -> Optional[List[str]]:
    """The lines of the log ``path``, None when there is none."""
    try:
        return open(path, encoding="utf-8", errors="replace").read().splitlines()
    except OSError:
        return None


def log_tail(path, n=20, lines=None):
    """The last ``n`` lines of the log ``path`` (each cut at 300 characters; ``lines``: the log
    already read)."""
    lines = read_log(path) if lines is None else lines
    if lines is None:
        return f"(no log at {path})"
    return "\n".join(line[:300] for line in lines[-n:])


def decode_jobs(
    checkpoints: Dict[str, str],
    directions: Sequence[str],
    folder: Callable[[str], str],
    label: str = "{system} {direction}",
    redo: bool = False,
) -> list:
    """The decoding jobs (label, checkpoint, source, target, output) of every direction of
    every system (``checkpoints``: {system: its checkpoint}) into ``folder(system)``/SRC-TGT.gen,
    those whose output is there left out unless ``redo``; ``label`` is formatted with the
    system, the direction, ``n`` (the job's place) and ``total``."""
    every = [(system, ckpt, d) for system, ckpt in checkpoints.items() for d in directions]
    jobs = []
    for n, (system, ckpt, direction) in enumerate(every, 1):
        out = os.path.join(folder(system), f"{direction}.gen")
        if redo or not os.path.exists(out):
            text = label.format(system=system, direction=direction, n=n, total=len(every))
            jobs.append((text, ckpt, *direction.split("-", 1), out))
    return jobs


def decode_setup(comparison, jobs, *, cuda, precision, gen_len, workers=0, gpu_workers=8, gpu_tokens=20000):
    """How a run decodes ``jobs`` (:func:`decode_jobs`) with the recipe's ``comparison``:
    fairseq-generate's common options (on a GPU ``gpu_tokens`` tokens a batch, in fp16 unless
    ``precision`` is fp32; on the CPU 8,000 tokens in fp32), the number of worker processes
    (``workers``, else at most ``gpu_workers`` on a GPU and every core on the CPU; never more
    than the jobs) and each worker's OpenMP threads."""
    workers = max(1, min(workers or (min(gpu_workers, nproc()) if cuda else nproc()), len(jobs) or 1))
    common = comparison.generate_args(
        max_tokens=gpu_tokens if cuda else 8000, gen_len=gen_len, fp16=cuda and precision != "fp32"
    )
    return common, workers, "1" if cuda else str(max(1, nproc() // workers))


def decode(jobs, common, data, workers, log_dir, *, dry_run=False, plan=None, env=None, echo=sys.stdout):
    """Every decoding job (:func:`decode_jobs`) by fairseq-generate's own main with the options
    ``common``, over ``workers`` processes that each decode their directions in one Python
    (hltmt_plugin/cli/decode.py); a failure is one StepFailed. ``dry_run``: each job's
    fairseq-generate line is printed instead, after the note ``plan`` = (heading, where the
    outputs go) when given."""
    if dry_run:
        if plan:
            print(
                f"# {plan[0]}: {len(jobs)} directions over {workers} worker processes, each running these "
                f"fairseq-generate lines in one Python; output to {plan[1]}"
            )
        for _, ckpt, src, tgt, _ in jobs:
            print_command([*fairseq_cli("generate"), *common, "--path", ckpt, "-s", src, "-t", tgt])
        return
    for *_, out in jobs:
        os.makedirs(os.path.dirname(out), exist_ok=True)
    try:
        decode_all(jobs, common, data, workers, log_dir, env=env, echo=echo)
    except DecodeFailed as error:
        raise StepFailed(str(error)) from None


def run_report(cmd, log_path, dry_run=False):
    """Run the hltmt-report line ``cmd`` (:func:`report_command`) with its output logged, then
    print the results.md it wrote (``dry_run``: print the line instead)."""
    run_logged(cmd, log_path, dry_run=dry_run)
    if not dry_run:
        print(open(os.path.join(cmd[cmd.index("--out") + 1], "results.md"), encoding="utf-8").read())


def report_command(
    decode_dir: str,
    out: str,
    *,
    high: Sequence[str],
    title: str,
    baseline: str = "mnmt",
    gate_checkpoint: Optional[str] = None,
    valid_logs: Sequence[str] = (),
    note: Optional[str] = None,
    options: Sequence[str] = (),
) -> List[str]:
    """The hltmt-report line of a run: the decoded outputs of ``decode_dir`` (one folder per
    system) scored and drawn into ``out``, HLT-MT against ``baseline``; the gate of
    ``gate_checkpoint``, the validation curves of ``valid_logs`` (SYSTEM=LOG-PATTERN each), a
    ``note`` and the driver's own ``options``."""
    cmd = [
        *experiment_cli("report"),
        "--decode-dir",
        decode_dir,
        "--out",
        out,
        "--high",
        ",".join(high),
        "--baseline",
        baseline,
        "--system",
        "hltmt",
        "--title",
        title,
        *(["--gate-checkpoint", gate_checkpoint] if gate_checkpoint else []),
        *options,
    ]
    for valid_log in valid_logs:
        cmd += ["--valid-log", valid_log]
    return cmd + (["--note", note] if note else [])


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
