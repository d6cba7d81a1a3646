#!/usr/bin/env python3
"""The GPU run: DebMT-10, the three systems, one GPU, report in under 8 minutes of wall time
(docs/gpu-run.md).

    bash scripts/gpu_run.sh                      # on the GPU machine (installs the wheel bundle first)
    bash scripts/gpu_run.sh --size tiny          # the smallest size: a few minutes on a CPU
    bash scripts/gpu_run.sh --gpu --dry-run      # print every command it would run, run nothing
    bash scripts/gpu_run.sh --gpu --ngpu 8 --size base --budget-s 3600

Steps, each timed against the budget (counted from the start of scripts/gpu_run.sh): 1. prepare
DebMT-10 with every core; 2. calibrate: the plain fairseq ``transformer`` MNMT, HLT-MT and
LS-MNMT start together on the one GPU, run until each has logged a few progress lines and are
stopped; the slowest one's updates/s and the start-up size the number of updates N that fits
the budget (``--updates N`` skips this); 3. train the three again from scratch, at the same
time, N updates each (HLT-MT's stage high for N/2 updates, then stage all, in one run;
validation every N/8 updates; ``--stop-time-hours`` guards the budget); 4. decode every
direction of every system with beam 5 over parallel workers; 5. score and report
(hltmt-report). At most 8 files go to ``--out``: results.md, results.csv, bleu.png,
valid_loss.png, gate_heatmap.png, run.json, gpu_run.log and logs.tar.gz.

On a GPU, training runs with ``--amp`` by default; ``--precision fp16`` is ``--fp16
--fp16-no-flatten-grads`` (one float32 copy per parameter: a flat copy would move the pool
modules and the gate that an update did not use). Each run gets ``--distributed-world-size
--ngpu`` and, with several GPUs, ``--ddp-backend legacy_ddp``. fairseq 0.12's ``--bf16`` is its
TPU path and is not offered. ``--dry-run`` prints every command, one per line as a shell would
run it, notes as ``#`` lines; the training lines show ``--updates`` when given, else the size's
minimum.

The script has three parts: :class:`RunPlan` (the size, the folders and every command line),
:class:`Runner` (starting, watching and timing the steps) and :class:`RunRecord` (run.json as
the run goes, and the output folder).
"""

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from typing import List

from hltmt_plugin.atomic_files import AtomicFile, FolderRefused, copy_file, fresh_folder, write_text
from hltmt_plugin.cli.launch import stop_ranks
from hltmt_plugin.corpora import DEBMT10_HIGH as HIGH, DEBMT10_LANGS as LANGS
from hltmt_plugin.errors import HltmtConfigError
from hltmt_plugin.experiments import steps
from hltmt_plugin.experiments.recipe import Comparison, Hyper, prepare_command, read_train_log
from hltmt_plugin.experiments.steps import (
    NGPU_HELP,
    PRECISION_FLAGS,
    PRECISION_HELP,
    StepFailed,
    decode,
    decode_jobs,
    decode_setup,
    detect_machine,
    gpu_flags,
    log_tail,
    nproc,
    print_command,
    read_log,
    reader_gone,
    report_command,
    resolve_device,
    run_quiet,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEBMT10 = os.path.join(ROOT, "data", "debmt10")
SYSTEMS = ["mnmt", "hltmt", "lsmnmt"]
MAX_OUT_FILES = 8


@dataclass
class RunSize(Hyper):
    """A size of the GPU run: the recipe's hyper-parameters (:class:`Hyper`; the warm-up is an
    eighth of the updates), its data, and how the budget sizes the number of updates (the
    defaults: all of DebMT-10, large batches, a 420-second budget)."""

    langs: List[str] = field(default_factory=lambda: list(LANGS))
    high: List[str] = field(default_factory=lambda: list(HIGH))
    max_train: int = 0  # lines per pair, 0: all
    max_valid: int = 0  # 0: all
    max_test: int = 0  # 0: all
    vocab: int = 16000
    max_tokens: int = 32768
    min_updates: int = 200
    max_updates: int = 200000
    log_interval: int = 20  # progress lines every this many updates
    calib_lines: int = 4  # progress lines of each system the calibration waits for
    validations: int = 8  # validations per run (the curve's points)
    budget_s: int = 420  # default --budget-s
    decode_reserve_s: int = 90  # kept free for decoding and the report when sizing N
    gen_len: tuple = (1.5, 10)  # generation length cap a * source length + b
    notes: str = ""


SIZES = {
    # the smallest: two languages, a few hundred lines, the tiny model, a dozen updates; a few
    # minutes on 2 CPU cores (the test suite runs it)
    "tiny": RunSize(
        langs=["de", "gu"],
        high=["de"],
        max_train=200,
        max_valid=30,
        max_test=8,
        vocab=600,
        max_tokens=2048,
        lr=3e-3,
        min_updates=6,
        max_updates=12,
        log_interval=1,
        calib_lines=2,
        validations=3,
        budget_s=900,
        decode_reserve_s=0,
        gen_len=(0, 16),
        notes="smallest size: shows that the run works end to end, nothing about quality (outputs capped at 16 tokens)",
    ),
    # the GPU run: all of DebMT-10, d 256 4+3 layers (hltmt_transformer_small and the plain
    # transformer of the same sizes), 16k vocabulary, large batches
    "small": RunSize(model="small", lr=2e-3),
    # transformer-base (d 512, 6+6 layers): fewer updates in the same time
    "base": RunSize(model="base", lr=1e-3, decode_reserve_s=110),
}


class Tee:
    """Console output also written (flushed line by line) to the output folder's gpu_run.log."""

    def __init__(self, path):
        self.file = open(path, "a", encoding="utf-8")
        self.console = sys.stdout

    def write(self, text):
        self.console.write(text)
        self.file.write(text)

    def flush(self):
        self.console.flush()
        self.file.flush()


class RunPlan:
    """The plan of the runs: the size, the folders, the data and every command line of the run
    (prepare, calibrate, train, decode, report) and how many updates the budget allows. It
    starts and writes nothing (``--dry-run`` prints it)."""

    def __init__(self, args):
        self.args, self.size = args, SIZES[args.size]
        self.work = work_dir(args)
        self.out = os.path.abspath(args.out)
        self.data = os.path.join(self.work, "data", "bin")
        self.logs = os.path.join(self.work, "logs")
        self.budget = args.budget_s or self.size.budget_s
        device, self.precision, _ = resolve_device(args, dry_run=args.dry_run)
        self.cuda = device == "cuda"
        self.comparison = Comparison.from_args(
            args, self.data, langs=self.size.langs, high=self.size.high, cpu=not self.cuda
        )
        self.langs, self.high, self.directions = self.comparison.langs, self.comparison.high, self.comparison.pairs
        self.train_window = 0.0  # seconds the training may take (--stop-time-hours): set by the sizing

    def prepare_cmd(self):
        """hltmt-prepare-data of the size's data with every core."""
        s, cores = self.size, ["--workers", str(nproc()), "--threads", str(nproc())]
        return prepare_command(
            self.args.raw,
            os.path.join(self.work, "data"),
            self.langs,
            vocab=s.vocab,
            options=cores,
            max_train=s.max_train,
            max_valid=s.max_valid,
            max_test=s.max_test,
        )

    def train_cmd(self, system, updates, save, calibrate):
        """One system's fairseq-train run (the recipe's), ``updates`` updates (HLT-MT switches
        to stage all at half of them), warm-up an eighth of them (4 to 4000)."""
        s = self.size
        hyper = dataclasses.replace(s, warmup=max(4, min(4000, updates // 8)))
        options = ["--no-save-optimizer-state", "--num-workers", "1", *self.precision_flags()]
        if calibrate:
            options += ["--disable-validation", "--no-save"]
        else:
            every, guard_h = max(1, updates // s.validations), (self.train_window + 60) / 3600
            options += ["--validate-interval-updates", str(every), "--validate-interval", "1000000"]
            options += ["--save-interval", "1000000", "--stop-time-hours", f"{guard_h:.4f}"]
        return self.comparison.train_command(
            system,
            hyper,
            seed=self.args.seed,
            updates=updates,
            save_dir=save,
            log_interval=s.log_interval,
            options=options,
            **({"high_updates": max(1, updates // 2)} if system == "hltmt" else {}),
            **({"ls_langs": ["en"] + self.langs} if system == "lsmnmt" else {}),
        )

    def precision_flags(self):
        return gpu_flags(self.precision, self.args.ngpu) if self.cuda else PRECISION_FLAGS[self.precision]

    def calibrate_dir(self, system):
        return os.path.join(self.work, "calibrate", system)

    def model_dir(self, system):
        return os.path.join(self.work, "models", system)

    def decode_dir(self, system):
        return os.path.join(self.work, "decode", system, f"seed{self.args.seed}")

    def decode_plan(self):
        """The decoding jobs (label, checkpoint, src, tgt, output), fairseq-generate's common
        options, the number of worker processes and each one's threads (steps.decode_setup)."""
        checkpoints = {system: os.path.join(self.model_dir(system), "checkpoint_last.pt") for system in SYSTEMS}
        jobs = decode_jobs(checkpoints, self.directions, self.decode_dir, "decode {system} {direction}", redo=True)
        setup = dict(cuda=self.cuda, precision=self.precision, gen_len=self.size.gen_len, gpu_workers=12)
        return jobs, *decode_setup(self.comparison, jobs, workers=self.args.decode_workers, gpu_tokens=24000, **setup)

    def report_cmd(self, machine):
        seed = self.args.seed
        return report_command(
            os.path.join(self.work, "decode"),
            os.path.join(self.work, "report"),
            high=self.high,
            title=f"DebMT-10 GPU run (`{self.args.size}`)",
            gate_checkpoint=os.path.join(self.model_dir("hltmt"), "checkpoint_last.pt"),
            options=["--machine", machine, "--run-info", os.path.join(self.work, "run.json")],
            valid_logs=[f"{system}={self.logs}/train_{system}.seed{seed}.log" for system in SYSTEMS],
            note=f"Size `{self.args.size}`: {self.size.notes}." if self.size.notes else None,
        )

    def fixed_updates(self, remaining):
        """--updates (made even), the training window of ``remaining`` seconds set; the reason."""
        self.train_window = max(30.0, remaining - self.size.decode_reserve_s - 20)
        return self.args.updates - self.args.updates % 2, "given by --updates"

    def size_updates(self, rate, startup, remaining):
        """The number of updates N that fits ``remaining`` seconds at ``rate`` updates/s after
        ``startup`` seconds (the training window set); (N, why, the unclamped figure)."""
        s = self.size
        reserve = max(s.decode_reserve_s, 0.2 * remaining) if s.decode_reserve_s else 0.0
        self.train_window = max(30.0, remaining - reserve - 20)
        usable = self.train_window - startup - 3.0 * s.validations  # about 3 s a validation
        sized = int(0.85 * rate * max(0.0, usable))
        n = max(s.min_updates, min(s.max_updates, sized))
        n -= n % 2
        why = (
            f"0.85 x {rate:.2f} updates/s (slowest system) x {usable:.0f}s usable of a {self.train_window:.0f}s "
            f"training window = {sized}" + (f", clamped to [{s.min_updates}, {s.max_updates}]" if sized != n else "")
        )
        return n, why, sized

    def facts(self):
        """The run's description: machine, size, data, languages, precision, batch, budget."""
        s = self.size
        return {
            "machine": detect_machine(),
            "size": f"{self.args.size}: {s.hltmt_arch} (HLT-MT, LS-MNMT) and {s.baseline_arch} (MNMT)",
            "data": f"DebMT-10 en<->{','.join(self.langs)} ({len(self.directions)} directions), training lines "
            f"per pair: {s.max_train or 'all'}, test lines per pair: {s.max_test or 'all'}, {s.vocab}-piece "
            "joint sentencepiece",
            "high-resource languages": ",".join(self.high),
            "precision": self.precision + (" (GPU)" if self.cuda else " (CPU)"),
            "batch": f"{s.max_tokens} tokens, lr {s.lr} inverse_sqrt, temperature-5 sampling, seed {self.args.seed}",
            "budget (s)": self.budget,
        }

    def print_plan(self):
        """--dry-run: every command of the run, one per line, in order; notes as # lines."""
        s = self.size
        gpus = f"{self.args.ngpu} GPU(s) shared by the three systems" if self.cuda else "CPU"
        print(
            f"# gpu run: size {self.args.size}, {len(self.directions)} directions, {gpus}, {self.precision}, "
            f"budget {self.budget}s, work {self.work}"
        )
        print("# 1. prepare")
        print_command(self.prepare_cmd())
        if self.args.updates:
            updates, _ = self.fixed_updates(self.budget)
        else:
            print(
                f"# 2. calibrate: the three start together, run until each has logged {s.calib_lines + 1} "
                "progress lines, and are stopped"
            )
            for system in SYSTEMS:
                print_command(self.train_cmd(system, 10**7, self.calibrate_dir(system), True))
            updates = s.min_updates
            self.train_window = max(30.0, self.budget - s.decode_reserve_s - 20)
            print(
                f"# the calibration sizes the number of updates N to the budget; shown here with N = {updates} "
                "(the size's minimum; --updates N fixes it)"
            )
        print(f"# 3. train: the three at once, {updates} updates each")
        for system in SYSTEMS:
            print_command(self.train_cmd(system, updates, self.model_dir(system), False))
        jobs, common, workers, _ = self.decode_plan()
        decode(
            jobs,
            common,
            self.data,
            workers,
            "",
            dry_run=True,
            plan=("4. decode", self.decode_dir("SYSTEM") + "/SRC-TGT.gen"),
        )
        print("# 5. report")
        print_command(self.report_cmd(self.facts()["machine"]))


class RunRecord:
    """What the run writes: run.json (the facts, the phases' times, each system's figures) as it
    goes, and at the end the output folder."""

    def __init__(self, plan):
        self.plan = plan
        self.info = {"facts": {}, "systems": {s: {} for s in SYSTEMS}, "phases_s": {}}

    def fact(self, key, value):
        self.info["facts"][key] = value

    def save(self):
        write_text(os.path.join(self.plan.work, "run.json"), json.dumps(self.info, indent=1))

    def phase(self, name, seconds):
        self.info["phases_s"][name] = round(seconds, 1)
        self.fact("phase times (s)", ", ".join(f"{k} {v:.0f}" for k, v in self.info["phases_s"].items()))
        self.save()

    def calibration(self, lines, first_seen, launched):
        """Each system's median updates/s and tokens/s over its steady progress lines, and the
        start-up time: (the slowest system's updates/s, start-up seconds)."""
        rates, startup = {}, 0.0
        for system, log in lines.items():
            ups, wps = log.steady("ups"), log.steady("wps")
            rates[system] = ups
            self.info["systems"][system]["calibration updates/s (3 at once)"] = round(ups, 2)
            self.info["systems"][system]["calibration tokens/s (3 at once)"] = round(wps)
            first_interval = log.progress[0]["num_updates"] / ups if ups > 0 else 0.0
            startup = max(startup, first_seen[system] - launched - first_interval)
        self.fact(
            "calibration",
            f"the three systems trained together until each logged {self.plan.size.calib_lines + 1} progress lines "
            f"({time.time() - launched:.0f}s); start-up {startup:.0f}s; "
            + ", ".join(f"{k} {v:.2f} updates/s" for k, v in rates.items()),
        )
        return min(rates.values()), startup

    def training(self, system, path, updates):
        """A system's figures from its training log."""
        log = read_train_log(path)
        row, steady = self.info["systems"][system], log.progress != []
        row.update(
            {
                "parameters": f"{log.params:,}" if log.params else "?",
                "updates": log.updates,
                "tokens/s (training, 3 at once)": round(log.steady("wps")) if steady else "?",
                "updates/s": round(log.steady("ups"), 2) if steady else "?",
                "training wall (s)": log.wall if log.wall is not None else "?",
            }
        )
        if log.updates < updates:
            row["note"] = f"stopped early by the time guard at {log.updates} of {updates} updates"
        switch = re.search(r"HLT-MT stage all \(.*", "\n".join(read_log(path) or [])) if system == "hltmt" else None
        if switch:
            self.fact("HLT-MT stage switch", switch.group(0)[:300])

    def collect(self):
        """The output folder: the report's files, run.json, gpu_run.log and one tarball of the rest."""
        work, out = self.plan.work, self.plan.out
        report = os.path.join(work, "report")
        wanted = ["results.md", "results.csv", "bleu.png", "valid_loss.png", "gate_heatmap.png"]
        copied = [name for name in wanted if os.path.exists(os.path.join(report, name))]
        for name in copied:
            copy_file(os.path.join(report, name), os.path.join(out, name))
        self.save()
        copy_file(os.path.join(work, "run.json"), os.path.join(out, "run.json"))
        logs = [(self.plan.logs, "logs")] if os.path.isdir(self.plan.logs) else []
        decoded, decode_root = [], os.path.join(work, "decode")
        for dirpath, _, files in sorted(os.walk(decode_root)):
            for name in sorted(f for f in files if f.endswith(".gen")):
                path = os.path.join(dirpath, name)
                decoded.append((path, os.path.join("decode", os.path.relpath(path, decode_root))))
        tar_path = os.path.join(out, "logs.tar.gz")
        write_tarball(tar_path, logs + decoded)
        if os.path.getsize(tar_path) > 15 * 2**20:  # over 15 MiB: the logs alone, without the decoded test sets
            write_tarball(tar_path, logs)
        ours = copied + ["run.json", "logs.tar.gz", "gpu_run.log"]
        assert len(ours) <= MAX_OUT_FILES, ours
        return ours


def write_tarball(path, members):
    """``members`` ((a file or folder, its name in the archive)) as the gzip tarball ``path``,
    written whole or not at all."""
    with AtomicFile(path) as out, tarfile.open(fileobj=out.open(binary=True), mode="w:gz") as tar:
        for source, name in members:
            tar.add(source, arcname=name)


class Runner:
    """Running the plan, each step timed against the budget (counted from ``t0``): data, the
    three systems started at once (calibrated, then trained), watched and stopped; decoding;
    the report. What it measures goes to the record."""

    def __init__(self, plan, t0):
        self.plan, self.record, self.t0 = plan, RunRecord(plan), t0
        self.procs, self.fell_back = [], False

    def say(self, msg):
        steps.say(msg, who="gpu_run", since=self.t0)

    def phase(self, name, fn, *a):
        self.say(f"{name} ...")
        t = time.time()
        result = fn(*a)
        self.record.phase(name, time.time() - t)
        self.say(f"{name} done in {time.time() - t:.1f}s")
        return result

    def fresh(self, path):
        """``path`` made anew, empty: removed only when this script made it (atomic_files.fresh_folder)."""
        try:
            return fresh_folder(path, "gpu_run")
        except FolderRefused as error:
            raise StepFailed(f"{error} (or give another --work)") from None

    def prepare(self):
        """The data, reused when an earlier run prepared it with the same options."""
        cmd = self.plan.prepare_cmd()
        stamp, want = os.path.join(self.plan.work, "data", ".gpu_run-prepared"), " ".join(cmd[2:])
        if os.path.isdir(self.plan.data) and os.path.exists(stamp) and open(stamp).read() == want:
            self.say(f"data already prepared in {self.plan.data} (same options): reused")
            return
        run_quiet(cmd, os.path.join(self.plan.logs, "prepare.log"))
        write_text(stamp, want)

    def launch(self, cmd, log):
        """``cmd`` started in the background (one thread), its output in the log ``log``."""
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore")
        os.makedirs(os.path.dirname(log), exist_ok=True)
        with open(log, "w", encoding="utf-8") as f:
            f.write("$ " + " ".join(cmd) + "\n")
            f.flush()
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=env, start_new_session=True)
        self.procs.append(proc)
        return proc

    def stop_all(self):
        stop_ranks(self.procs)
        self.procs = []

    def calibrate(self):
        """The three systems started together and stopped once each has logged a few progress
        lines: (the slowest one's updates/s, the start-up time). A system that fails in mixed
        precision makes the three calibrate again in fp32."""
        launched, runs = time.time(), {}
        for system in SYSTEMS:
            log = os.path.join(self.plan.logs, f"calibrate_{system}.log")
            cmd = self.plan.train_cmd(system, 10**7, self.plan.calibrate_dir(system), calibrate=True)
            runs[system] = (self.launch(cmd, log), log)
        try:
            seen = self.await_progress(runs, launched)
        finally:
            self.stop_all()
        return self.calibrate() if seen is None else self.record.calibration(*seen, launched)

    def await_progress(self, runs, launched):
        """Every half second, the calibration logs read until each system has logged
        calib_lines + 1 progress lines: ({system: its TrainLog}, {system: when its first line
        appeared}); None when a system failed in mixed precision (then the precision is fp32)."""
        first_seen, deadline = {}, launched + max(120.0, 0.4 * self.plan.budget)
        while True:
            time.sleep(0.5)
            lines = {system: read_train_log(log) for system, (_, log) in runs.items()}
            for system, log in lines.items():
                if log.progress and system not in first_seen:
                    first_seen[system] = time.time()
            for system, (proc, log) in runs.items():
                if proc.poll() is not None:
                    if self.plan.precision != "fp32" and not self.fell_back:
                        self.fall_back_to_fp32(system, log)
                        return None
                    raise StepFailed(f"calibration of {system} stopped (exit {proc.returncode}):\n{log_tail(log)}")
            if all(len(log.progress) >= self.plan.size.calib_lines + 1 for log in lines.values()):
                return lines, first_seen
            if time.time() > deadline:
                raise StepFailed(
                    f"calibration: no steady progress within {deadline - launched:.0f}s: "
                    + ", ".join(f"{k} {len(v.progress)} progress lines" for k, v in lines.items())
                )

    def fall_back_to_fp32(self, system, log):
        """A mixed-precision failure must not cost the device run: say why and switch all three
        systems to fp32 (the same precision for all)."""
        last, precision = log_tail(log, 1).strip()[:200], self.plan.precision
        self.record.fact("precision fallback", f"{precision} failed for {system} ({last}); all systems run in fp32")
        self.say(f"warning: {system} failed in {precision} ({last}); calibrating again in fp32")
        self.plan.precision, self.fell_back = "fp32", True

    def updates(self):
        """The number of updates per system: --updates, else sized from the calibration; the reason."""
        remaining = self.plan.budget - (time.time() - self.t0)
        if self.plan.args.updates:
            return self.plan.fixed_updates(remaining)
        rate, startup = self.phase("calibrate", self.calibrate)
        remaining = self.plan.budget - (time.time() - self.t0)
        n, why, sized = self.plan.size_updates(rate, startup, remaining)
        if sized < self.plan.size.min_updates:
            self.say(
                f"warning: the budget allows only {sized} updates; training {n} (the size's minimum), "
                "so the run will overrun --budget-s"
            )
        return n, why

    def train(self, updates):
        """The three systems trained at once, watched (a status line every --status-every seconds)
        and stopped when one fails or the window is passed; their figures recorded."""
        runs = {}
        for system in SYSTEMS:
            save = self.fresh(self.plan.model_dir(system))
            log = os.path.join(self.plan.logs, f"train_{system}.seed{self.plan.args.seed}.log")
            runs[system] = (self.launch(self.plan.train_cmd(system, updates, save, calibrate=False), log), log)
        launched = last_report = time.time()
        deadline = launched + self.plan.train_window + 180
        try:
            while any(p.poll() is None for p, _ in runs.values()):
                time.sleep(1.0)
                for system, (proc, log) in runs.items():
                    if proc.poll() not in (None, 0):
                        raise StepFailed(f"training {system} failed (exit {proc.returncode}):\n{log_tail(log)}")
                if time.time() - last_report >= self.plan.args.status_every:
                    last_report = time.time()
                    done = {
                        k: (read_train_log(log).progress or [{"num_updates": 0}])[-1] for k, (_, log) in runs.items()
                    }
                    self.say("train: " + ", ".join(f"{k} {int(v['num_updates'])}/{updates}" for k, v in done.items()))
                if time.time() > deadline:
                    raise StepFailed(f"training ran past its window ({self.plan.train_window:.0f}s + 180s): stopped")
        finally:
            self.stop_all()
        for system, (proc, log) in runs.items():
            if proc.returncode != 0:
                raise StepFailed(f"training {system} failed (exit {proc.returncode}):\n{log_tail(log)}")
            self.record.training(system, log, updates)

    def decode(self):
        """Every direction of every system; fp16 that fails is done again in fp32."""
        jobs, common, workers, threads = self.plan.decode_plan()
        for system in SYSTEMS:
            self.fresh(self.plan.decode_dir(system))
        env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS=threads)
        fp16 = ", fp16" if "--fp16" in common else ", fp32"
        self.record.fact("decoding", f"beam 5, {len(jobs)} directions x systems over {workers} worker processes{fp16}")
        logs = os.path.join(self.plan.logs, "decode")
        try:
            decode(jobs, common, self.plan.data, workers, logs, env=env, echo=None)
        except StepFailed as error:
            if "--fp16" not in common:
                raise
            todo = [j for j in jobs if not os.path.exists(j[4])]
            why = str(error).splitlines()[0]
            self.say(f"warning: fp16 decoding failed ({why}); the {len(todo)} directions left again in fp32")
            self.record.fact(
                "decoding fallback", f"fp16 decoding failed; {len(todo)} of {len(jobs)} directions decoded in fp32"
            )
            common.remove("--fp16")
            decode(todo, common, self.plan.data, workers, logs + "_fp32", env=env, echo=None)

    def report(self):
        cmd = self.plan.report_cmd(self.record.info["facts"]["machine"])
        run_quiet(cmd, os.path.join(self.plan.logs, "report.log"), env=dict(os.environ, PYTHONWARNINGS="ignore"))

    def run(self):
        plan, record = self.plan, self.record
        os.makedirs(plan.work, exist_ok=True)
        for key, value in plan.facts().items():
            record.fact(key, value)
        self.say(
            f"size {plan.args.size}, {len(plan.directions)} directions, work {plan.work}, out {plan.out}, "
            f"budget {plan.budget}s; {record.info['facts']['machine']}"
        )
        self.phase("prepare", self.prepare)
        updates, why = self.updates()
        record.fact("updates per system", f"{updates} ({why})")
        record.fact("HLT-MT schedule", f"stage high {updates // 2} updates, then stage all to {updates} (one run)")
        record.fact("validation", f"every {max(1, updates // plan.size.validations)} updates")
        self.say(f"training the three systems at once, {updates} updates each ({why})")
        self.phase("train", self.train, updates)
        self.phase("decode", self.decode)
        self.phase("report", self.report)
        record.fact("total wall (s)", round(time.time() - self.t0))
        record.save()


def build_parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", choices=sorted(SIZES), default="small", help="default: %(default)s")
    p.add_argument(
        "--budget-s",
        type=int,
        default=0,
        help="wall seconds from start to report (default: the size's: small/base 420, tiny 900); "
        "the number of updates is sized to fit it",
    )
    p.add_argument("--updates", type=int, default=0, help="updates per system (skips the calibration)")
    p.add_argument(
        "--out",
        default=os.environ.get("OUT") or None,
        help="output folder, at most 8 files (default: $OUT, else WORK/out)",
    )
    p.add_argument("--work", default=None, help="working folder (default: runs/gpu-SIZE)")
    p.add_argument("--raw", default=DEBMT10, help="raw data in the DebMT-10 layout (default: DebMT-10)")
    p.add_argument("--langs", default=None, help="non-English languages (default: the size's)")
    p.add_argument("--high", default=None, help="high-resource languages (default: DebMT-10's)")
    p.add_argument("--precision", choices=["auto", *PRECISION_FLAGS], default="auto", help=PRECISION_HELP)
    p.add_argument("--ngpu", type=int, default=1, help=NGPU_HELP + "; the three systems share them")
    p.add_argument(
        "--gpu",
        action="store_true",
        help="run on the GPU; stop if torch sees none (default: the GPU when torch sees one)",
    )
    p.add_argument("--cpu", action="store_true", help="run on the CPU even where a GPU is")
    p.add_argument("--bf16", action="store_true", help=argparse.SUPPRESS)  # refused in one line
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print every command the run would start, one per line, and run and write nothing "
        "(with --gpu, no GPU needs to be there)",
    )
    p.add_argument("--decode-workers", type=int, default=0, help="default: min(12, cores) on a GPU, cores on CPU")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--status-every", type=float, default=15.0, help="seconds between training status lines")
    return p


def work_dir(args):
    """The working folder: --work, else runs/gpu-SIZE in the checkout."""
    return os.path.abspath(args.work or os.path.join(ROOT, "runs", f"gpu-{args.size}"))


def full_run(plan, t0):
    """The run, its console output also in OUT/gpu_run.log, the outputs collected into --out
    whether it finished or not, and the report printed when it finished; the exit code."""
    os.makedirs(plan.out, exist_ok=True)
    sys.stdout = Tee(os.path.join(plan.out, "gpu_run.log"))
    runner, ok = Runner(plan, t0), False
    try:
        runner.run()
        ok = True
    except (StepFailed, HltmtConfigError) as error:
        print(f"gpu_run: error: {error}", flush=True)
    except KeyboardInterrupt:
        print("gpu_run: error: interrupted", flush=True)
    finally:
        runner.stop_all()
        try:
            files = runner.record.collect()
            steps.say(
                f"{'finished' if ok else 'FAILED'}: {len(files)} files in {plan.out}: {', '.join(files)}",
                who="gpu_run",
                since=t0,
            )
        except OSError as error:
            print(f"gpu_run: error: collecting the outputs: {error}", flush=True)
            ok = False
    if ok:
        print(open(os.path.join(plan.out, "results.md"), encoding="utf-8").read())
    return 0 if ok else 1


def main(argv=None):
    """The options checked and the plan made (its refusals, the device's and the languages', are
    one line before anything is written); then the plan printed (--dry-run) or run."""
    p = build_parser()
    args = p.parse_args(argv)
    t0 = float(os.environ.get("GPU_RUN_T0") or time.time())
    for name in ("budget_s", "updates", "decode_workers"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')} must be >= 0")
    args.out = args.out or os.path.join(work_dir(args), "out")
    try:
        plan = RunPlan(args)
    except HltmtConfigError as error:  # --bf16, --gpu without one, --ngpu, --langs and --high
        print(f"gpu_run: error: {error}", file=sys.stderr)
        return 2
    if not args.dry_run:
        return full_run(plan, t0)
    try:
        plan.print_plan()
    except BrokenPipeError:
        return reader_gone()
    return 0


if __name__ == "__main__":
    sys.exit(main())
