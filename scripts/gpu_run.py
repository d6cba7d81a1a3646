#!/usr/bin/env python3
"""The GPU run: DebMT-10, the three systems, one GPU, report in under 8 minutes of wall time.

    bash scripts/gpu_run.sh                      # on the GPU machine (installs the wheel bundle first)
    bash scripts/gpu_run.sh --size tiny          # the smallest size: a few minutes on a CPU
    bash scripts/gpu_run.sh --gpu --dry-run      # print every command it would run, run nothing
    bash scripts/gpu_run.sh --gpu --ngpu 8 --size base --budget-s 3600

Steps, each timed (the budget counts from the start of scripts/gpu_run.sh):

1. prepare DebMT-10 (all training data of the size, the test split) with every core:
   sentencepiece threads and fairseq-preprocess workers from the core count;
2. calibrate: the plain fairseq ``transformer`` MNMT, HLT-MT and LS-MNMT start together as
   three processes on the one GPU (``OMP_NUM_THREADS=1`` each), run until each has logged a
   few progress lines, and are stopped; their measured updates/s (the slowest of the three)
   and start-up time size the number of updates N that fits the budget (``--updates N``
   skips this);
3. train the three systems again from scratch, at the same time, N updates each (same data,
   batch size, learning-rate schedule, seed): MNMT, HLT-MT with both stages in one run
   (stage high for N/2 updates, then stage all: ``--high-stage-updates``), LS-MNMT
   (``--slp-language-specific``, one module per target language); validation every N/8
   updates gives each a validation-loss curve; ``--stop-time-hours`` guards the budget;
4. decode every direction of every system with beam 5 (fp16 on a GPU), several worker
   processes at once, each decoding its directions in one Python (hltmt_plugin/cli/decode.py);
5. score with sacreBLEU and write the report (hltmt-report): machine, sizes, updates,
   tokens/s, convergence from the validation curves, BLEU tables high/low and En->X/X->En,
   the paper's WMT-10 deltas beside ours.

At most 8 files go to the output folder (``--out``, default ``$OUT``): results.md,
results.csv, bleu.png, valid_loss.png, gate_heatmap.png, run.json, gpu_run.log and
logs.tar.gz (every training, calibration, preparation and decoding log and the decoded
test sets).

On a GPU, training runs with ``--amp`` by default (float16 autocast over float32 weights);
``--precision fp16`` is ``--fp16 --fp16-no-flatten-grads``, fairseq's fp16 optimizer with one
float32 copy per parameter (a bare ``--fp16`` steps one flat copy of all weights, which would
move the pool modules and the gate that an update did not use). Each fairseq-train run gets
``--distributed-world-size --ngpu`` (default 1: fairseq would otherwise use every GPU it
sees; the three systems share them), and with several GPUs ``--ddp-backend legacy_ddp``,
which all-reduces every gradient so the task can leave the modules no worker used out of
the update. fairseq 0.12's ``--bf16`` is its TPU path and is not offered.

``--dry-run`` prints every command the run would start (hltmt-prepare-data, the calibration
and training fairseq-train runs, one fairseq-generate line per decoded direction,
hltmt-report), one per line as a shell would run it, notes as ``#`` lines, and runs and writes
nothing; ``--gpu`` is then taken as given. The number of updates comes from the calibration,
so the training lines show ``--updates`` when given, else the size's minimum (a note says so).
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from hltmt_plugin.atomic_files import (  # noqa: E402
    AtomicFile,
    FolderRefused,
    copy_file,
    fresh_folder,
    write_text,
)
from hltmt_plugin.cli.launch import stop_ranks  # noqa: E402
from hltmt_plugin.corpora import (  # noqa: E402
    DEBMT10_HIGH as HIGH,
    DEBMT10_LANGS as LANGS,
)
from hltmt_plugin.errors import HltmtConfigError  # noqa: E402
from hltmt_plugin.experiments import steps  # noqa: E402
from hltmt_plugin.experiments.recipe import (  # noqa: E402
    Comparison,
    Hyper,
    prepare_command,
    read_train_log,
)
from hltmt_plugin.experiments.steps import (  # noqa: E402
    BF16_REFUSED,
    NGPU_HELP,
    PRECISION_FLAGS,
    PRECISION_HELP,
    StepFailed,
    decode,
    decode_jobs,
    gpu_flags,
    log_tail,
    nproc,
    print_command,
    reader_gone,
    report_command,
    resolve_device,
    run_quiet,
)

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


def say(t0, msg):
    steps.say(msg, who="gpu_run", since=t0)


class GpuRun:
    def __init__(self, args, t0):
        self.args, self.t0 = args, t0
        self.size = SIZES[args.size]
        self.work = work_dir(args)
        self.out = os.path.abspath(args.out)
        self.data = os.path.join(self.work, "data", "bin")
        self.logs = os.path.join(self.work, "logs")
        self.budget = args.budget_s or self.size.budget_s
        self.info = {"facts": {}, "systems": {s: {} for s in SYSTEMS}, "phases_s": {}}
        self.procs = []
        self.fell_back = False
        self.dry_run = args.dry_run
        device, self.precision, _ = resolve_device(args, dry_run=args.dry_run)
        self.cuda = device == "cuda"
        self.comparison = Comparison.from_args(
            args, self.data, langs=self.size.langs, high=self.size.high, cpu=not self.cuda
        )
        self.langs, self.high, self.directions = self.comparison.langs, self.comparison.high, self.comparison.pairs

    # ---- bookkeeping --------------------------------------------------------------------
    def elapsed(self):
        return time.time() - self.t0

    def fact(self, key, value):
        self.info["facts"][key] = value

    def save_info(self):
        write_text(os.path.join(self.work, "run.json"), json.dumps(self.info, indent=1))

    def fresh(self, path):
        """``path`` made anew, empty: removed only when this script made it (atomic_files.fresh_folder)."""
        try:
            return fresh_folder(path, "gpu_run")
        except FolderRefused as error:
            raise StepFailed(f"{error} (or give another --work)") from None

    def phase(self, name, fn, *a):
        say(self.t0, f"{name} ...")
        t = time.time()
        result = fn(*a)
        self.info["phases_s"][name] = round(time.time() - t, 1)
        self.fact("phase times (s)", ", ".join(f"{k} {v:.0f}" for k, v in self.info["phases_s"].items()))
        say(self.t0, f"{name} done in {time.time() - t:.1f}s")
        self.save_info()
        return result

    # ---- 1. data ------------------------------------------------------------------------
    def prepare(self):
        s = self.size
        cores = ["--workers", str(nproc()), "--threads", str(nproc())]
        cmd = prepare_command(
            self.args.raw,
            os.path.join(self.work, "data"),
            self.langs,
            vocab=s.vocab,
            options=cores,
            max_train=s.max_train,
            max_valid=s.max_valid,
            max_test=s.max_test,
        )
        if self.dry_run:
            print_command(cmd)
            return
        stamp = os.path.join(self.work, "data", ".gpu_run-prepared")
        want = " ".join(cmd[2:])
        if os.path.isdir(self.data) and os.path.exists(stamp) and open(stamp).read() == want:
            say(self.t0, f"data already prepared in {self.data} (same options): reused")
            return
        os.makedirs(self.logs, exist_ok=True)
        log = os.path.join(self.logs, "prepare.log")
        with open(log, "w") as f:
            done = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
        if done.returncode != 0:
            lines = open(log, encoding="utf-8", errors="replace").read().splitlines()
            error = next((line for line in reversed(lines) if "error:" in line), None)
            raise StepFailed(
                f"data preparation failed: {error}"
                if error
                else f"data preparation failed (exit {done.returncode}):\n{log_tail(log)}"
            )
        write_text(stamp, want)

    # ---- fairseq-train command lines -----------------------------------------------------
    def train_cmd(self, system, updates, save, calibrate):
        """One system's fairseq-train run (the recipe's), ``updates`` updates (HLT-MT switches
        to stage all at half of them), warm-up an eighth of them (4 to 4000)."""
        s = self.size
        hyper = dataclasses.replace(s, warmup=max(4, min(4000, updates // 8)))
        options = ["--no-save-optimizer-state", "--num-workers", "1", *self.precision_flags()]
        if calibrate:
            options += ["--disable-validation", "--no-save"]
        else:
            every = max(1, updates // s.validations)
            guard_h = (self.train_window + 60) / 3600
            options += [
                "--validate-interval-updates",
                str(every),
                "--validate-interval",
                "1000000",
                "--save-interval",
                "1000000",
                "--stop-time-hours",
                f"{guard_h:.4f}",
            ]
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

    def launch(self, system, cmd, log):
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore")
        f = open(log, "w", encoding="utf-8")
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=env, start_new_session=True)
        f.close()
        self.procs.append(proc)
        return proc

    def stop_all(self):
        stop_ranks(self.procs)
        self.procs = []

    # ---- 2. calibration -----------------------------------------------------------------
    def calibrate(self):
        """The three systems started together and stopped once each has logged a few progress
        lines: (the slowest one's updates/s, the start-up time). A system that fails in mixed
        precision makes the three calibrate again in fp32."""
        launched = time.time()
        runs = {}
        for system in SYSTEMS:
            log = os.path.join(self.logs, f"calibrate_{system}.log")
            save = os.path.join(self.work, "calibrate", system)
            runs[system] = (self.launch(system, self.train_cmd(system, 10**7, save, calibrate=True), log), log)
        try:
            seen = self.await_progress(runs, launched)
        finally:
            self.stop_all()
        if seen is None:
            return self.calibrate()
        lines, first_seen = seen
        return self.calibration_rates(lines, first_seen, launched)

    def await_progress(self, runs, launched):
        """Every half second, the calibration logs read until each system has logged
        calib_lines + 1 progress lines: ({system: its TrainLog}, {system: when its first line
        appeared}); None when a system failed in mixed precision (then the precision is fp32)."""
        s = self.size
        first_seen = {}
        deadline = launched + max(120.0, 0.4 * self.budget)
        while True:
            time.sleep(0.5)
            lines = {sys_: read_train_log(log) for sys_, (_, log) in runs.items()}
            for sys_, pl in lines.items():
                if pl.progress and sys_ not in first_seen:
                    first_seen[sys_] = time.time()
            for sys_, (proc, log) in runs.items():
                if proc.poll() is not None:
                    if self.precision != "fp32" and not self.fell_back:
                        self.fall_back_to_fp32(sys_, log)
                        return None
                    raise StepFailed(f"calibration of {sys_} stopped (exit {proc.returncode}):\n{log_tail(log)}")
            if all(len(pl.progress) >= s.calib_lines + 1 for pl in lines.values()):
                return lines, first_seen
            if time.time() > deadline:
                raise StepFailed(
                    "calibration: no steady progress within "
                    f"{deadline - launched:.0f}s: "
                    + ", ".join(f"{k} {len(v.progress)} progress lines" for k, v in lines.items())
                )

    def fall_back_to_fp32(self, system, log):
        """A mixed-precision failure must not cost the device run: say why and switch all three
        systems to fp32 (the same precision for all)."""
        last = log_tail(log, 1).strip()
        self.fact("precision fallback", f"{self.precision} failed for {system} ({last[:200]}); all systems run in fp32")
        say(self.t0, f"warning: {system} failed in {self.precision} ({last[:200]}); calibrating again in fp32")
        self.precision, self.fell_back = "fp32", True

    def calibration_rates(self, lines, first_seen, launched):
        """Each system's median updates/s and tokens/s over its steady progress lines (recorded in
        run.json), and the start-up time: (the slowest system's updates/s, start-up seconds)."""
        rates, startup = {}, 0.0
        for system, log in lines.items():
            ups, wps = log.steady("ups"), log.steady("wps")
            rates[system] = ups
            self.info["systems"][system]["calibration updates/s (3 at once)"] = round(ups, 2)
            self.info["systems"][system]["calibration tokens/s (3 at once)"] = round(wps)
            first_interval = log.progress[0]["num_updates"] / ups if ups > 0 else 0.0
            startup = max(startup, first_seen[system] - launched - first_interval)
        self.info["facts"]["calibration"] = (
            "the three systems trained together until each logged "
            f"{self.size.calib_lines + 1} progress lines ({time.time() - launched:.0f}s); start-up {startup:.0f}s; "
            + ", ".join(f"{k} {v:.2f} updates/s" for k, v in rates.items())
        )
        return min(rates.values()), startup

    def size_updates(self, rate, startup):
        s = self.size
        remaining = self.budget - self.elapsed()
        reserve = max(s.decode_reserve_s, 0.2 * remaining) if s.decode_reserve_s else 0.0
        self.train_window = max(30.0, remaining - reserve - 20)
        usable = self.train_window - startup - 3.0 * s.validations  # about 3 s a validation
        n = int(0.85 * rate * max(0.0, usable))
        sized = n
        n = max(s.min_updates, min(s.max_updates, n))
        n -= n % 2
        why = (
            f"0.85 x {rate:.2f} updates/s (slowest system) x {usable:.0f}s usable of a {self.train_window:.0f}s "
            f"training window = {sized}" + (f", clamped to [{s.min_updates}, {s.max_updates}]" if sized != n else "")
        )
        if sized < s.min_updates:
            say(
                self.t0,
                f"warning: the budget allows only {sized} updates; training {n} (the size's minimum), "
                "so the run will overrun --budget-s",
            )
        return n, why

    # ---- 3. training --------------------------------------------------------------------
    def train(self, updates):
        runs = {}
        for system in SYSTEMS:
            save = self.fresh(os.path.join(self.work, "models", system))
            log = os.path.join(self.logs, f"train_{system}.seed{self.args.seed}.log")
            runs[system] = (self.launch(system, self.train_cmd(system, updates, save, calibrate=False), log), log)
        launched = time.time()
        deadline = launched + self.train_window + 180
        last_report = launched
        try:
            while any(p.poll() is None for p, _ in runs.values()):
                time.sleep(1.0)
                for system, (proc, log) in runs.items():
                    if proc.poll() not in (None, 0):
                        raise StepFailed(f"training {system} failed (exit {proc.returncode}):\n{log_tail(log)}")
                if time.time() - last_report >= self.args.status_every:
                    last_report = time.time()
                    say(
                        self.t0,
                        "train: "
                        + ", ".join(
                            f"{k} {int((read_train_log(log).progress or [{'num_updates': 0}])[-1]['num_updates'])}/{updates}"
                            for k, (_, log) in runs.items()
                        ),
                    )
                if time.time() > deadline:
                    raise StepFailed(f"training ran past its window ({self.train_window:.0f}s + 180s): stopped")
        finally:
            self.stop_all()
        for system, (proc, log) in runs.items():
            if proc.returncode != 0:
                raise StepFailed(f"training {system} failed (exit {proc.returncode}):\n{log_tail(log)}")
            self.read_train_log(system, log, updates)

    def read_train_log(self, system, path, updates):
        log = read_train_log(path)
        row = self.info["systems"][system]
        done_updates = log.updates
        steady = log.progress != []
        row.update(
            {
                "parameters": f"{log.params:,}" if log.params else "?",
                "updates": done_updates,
                "tokens/s (training, 3 at once)": round(log.steady("wps")) if steady else "?",
                "updates/s": round(log.steady("ups"), 2) if steady else "?",
                "training wall (s)": log.wall if log.wall is not None else "?",
            }
        )
        if done_updates < updates:
            row["note"] = f"stopped early by the time guard at {done_updates} of {updates} updates"
        if system == "hltmt":
            switch = re.search(r"HLT-MT stage all \(.*", open(path, encoding="utf-8", errors="replace").read())
            if switch:
                self.fact("HLT-MT stage switch", switch.group(0)[:300])

    # ---- 4. decoding --------------------------------------------------------------------
    def decode_plan(self):
        """The decoding jobs (label, checkpoint, src, tgt, output), fairseq-generate's common
        options, and the number of worker processes."""
        checkpoints = {system: os.path.join(self.work, "models", system, "checkpoint_last.pt") for system in SYSTEMS}
        jobs = decode_jobs(checkpoints, self.directions, self.decode_dir, "decode {system} {direction}", redo=True)
        workers = self.args.decode_workers or (min(12, nproc()) if self.cuda else nproc())
        workers = max(1, min(workers, len(jobs)))
        common = self.comparison.generate_args(
            max_tokens=24000 if self.cuda else 8000,
            gen_len=self.size.gen_len,
            fp16=self.cuda and self.precision != "fp32",
        )
        return jobs, common, workers

    def decode_dir(self, system):
        return os.path.join(self.work, "decode", system, f"seed{self.args.seed}")

    def decode(self, dry_run=False):
        jobs, common, workers = self.decode_plan()
        if dry_run:
            plan = ("4. decode", self.decode_dir("SYSTEM") + "/SRC-TGT.gen")
            return decode(jobs, common, self.data, workers, "", dry_run=True, plan=plan)
        for system in SYSTEMS:
            self.fresh(self.decode_dir(system))
        env = dict(
            os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1" if self.cuda else str(max(1, nproc() // workers))
        )
        self.fact(
            "decoding",
            f"beam 5, {len(jobs)} directions x systems over {workers} worker processes"
            + (", fp16" if "--fp16" in common else ", fp32"),
        )
        try:
            decode(jobs, common, self.data, workers, os.path.join(self.logs, "decode"), env=env, echo=None)
        except StepFailed as error:
            if "--fp16" not in common:
                raise
            todo = [j for j in jobs if not os.path.exists(j[4])]
            say(
                self.t0,
                f"warning: fp16 decoding failed ({str(error).splitlines()[0]}); "
                f"the {len(todo)} directions left again in fp32",
            )
            self.fact(
                "decoding fallback", f"fp16 decoding failed; {len(todo)} of {len(jobs)} directions decoded in fp32"
            )
            common.remove("--fp16")
            decode(todo, common, self.data, workers, os.path.join(self.logs, "decode_fp32"), env=env, echo=None)

    # ---- 5. report ----------------------------------------------------------------------
    def report_cmd(self):
        seed = self.args.seed
        return report_command(
            os.path.join(self.work, "decode"),
            os.path.join(self.work, "report"),
            high=self.high,
            title=f"DebMT-10 GPU run (`{self.args.size}`)",
            gate_checkpoint=os.path.join(self.work, "models", "hltmt", "checkpoint_last.pt"),
            options=["--machine", self.info["facts"]["machine"], "--run-info", os.path.join(self.work, "run.json")],
            valid_logs=[f"{system}={self.logs}/train_{system}.seed{seed}.log" for system in SYSTEMS],
            note=f"Size `{self.args.size}`: {self.size.notes}." if self.size.notes else None,
        )

    def report(self):
        run_quiet(
            self.report_cmd(), os.path.join(self.logs, "report.log"), env=dict(os.environ, PYTHONWARNINGS="ignore")
        )

    # ---- the whole run ------------------------------------------------------------------
    def describe(self):
        from hltmt_plugin.experiments.steps import detect_machine

        s = self.size
        self.fact("machine", detect_machine())
        self.fact("size", f"{self.args.size}: {s.hltmt_arch} (HLT-MT, LS-MNMT) and {s.baseline_arch} (MNMT)")
        self.fact(
            "data",
            f"DebMT-10 en<->{','.join(self.langs)} ({len(self.directions)} directions), "
            f"training lines per pair: {s.max_train or 'all'}, test lines per pair: "
            f"{s.max_test or 'all'}, {s.vocab}-piece joint sentencepiece",
        )
        self.fact("high-resource languages", ",".join(self.high))
        self.fact("precision", self.precision + (" (GPU)" if self.cuda else " (CPU)"))
        self.fact(
            "batch", f"{s.max_tokens} tokens, lr {s.lr} inverse_sqrt, temperature-5 sampling, seed {self.args.seed}"
        )
        self.fact("budget (s)", self.budget)

    def print_plan(self):
        """--dry-run: every command of the run, one per line, in order; notes as # lines."""
        s = self.size
        self.describe()
        gpus = f"{self.args.ngpu} GPU(s) shared by the three systems" if self.cuda else "CPU"
        print(
            f"# gpu run: size {self.args.size}, {len(self.directions)} directions, {gpus}, {self.precision}, "
            f"budget {self.budget}s, work {self.work}"
        )
        print("# 1. prepare")
        self.prepare()
        if self.args.updates:
            updates = self.args.updates - self.args.updates % 2
        else:
            print(
                f"# 2. calibrate: the three start together, run until each has logged {s.calib_lines + 1} "
                "progress lines, and are stopped"
            )
            for system in SYSTEMS:
                print_command(self.train_cmd(system, 10**7, os.path.join(self.work, "calibrate", system), True))
            updates = s.min_updates
            print(
                f"# the calibration sizes the number of updates N to the budget; shown here with N = {updates} "
                "(the size's minimum; --updates N fixes it)"
            )
        self.train_window = max(30.0, self.budget - s.decode_reserve_s - 20)
        print(f"# 3. train: the three at once, {updates} updates each")
        for system in SYSTEMS:
            print_command(self.train_cmd(system, updates, os.path.join(self.work, "models", system), False))
        self.decode(dry_run=True)
        print("# 5. report")
        print_command(self.report_cmd())

    def run(self):
        os.makedirs(self.work, exist_ok=True)
        self.describe()
        say(
            self.t0,
            f"size {self.args.size}, {len(self.directions)} directions, work {self.work}, out {self.out}, "
            f"budget {self.budget}s; {self.info['facts']['machine']}",
        )
        self.phase("prepare", self.prepare)
        if self.args.updates:
            updates = self.args.updates - self.args.updates % 2
            self.train_window = max(30.0, self.budget - self.elapsed() - self.size.decode_reserve_s - 20)
            why = "given by --updates"
        else:
            rate, startup = self.phase("calibrate", self.calibrate)
            updates, why = self.size_updates(rate, startup)
        self.fact("updates per system", f"{updates} ({why})")
        self.fact("HLT-MT schedule", f"stage high {updates // 2} updates, then stage all to {updates} (one run)")
        self.fact("validation", f"every {max(1, updates // self.size.validations)} updates")
        say(self.t0, f"training the three systems at once, {updates} updates each ({why})")
        self.phase("train", self.train, updates)
        self.phase("decode", self.decode)
        self.phase("report", self.report)
        self.fact("total wall (s)", round(self.elapsed()))
        self.save_info()


def collect(run):
    """The output folder: the report's files, run.json, gpu_run.log and one tarball of the rest."""
    work, out = run.work, run.out
    report = os.path.join(work, "report")
    wanted = ["results.md", "results.csv", "bleu.png", "valid_loss.png", "gate_heatmap.png"]
    copied = []
    for name in wanted:
        if os.path.exists(os.path.join(report, name)):
            copy_file(os.path.join(report, name), os.path.join(out, name))
            copied.append(name)
    run.save_info()
    copy_file(os.path.join(work, "run.json"), os.path.join(out, "run.json"))
    tar_path = os.path.join(out, "logs.tar.gz")
    logs = [(run.logs, "logs")] if os.path.isdir(run.logs) else []
    decoded = []
    decode = os.path.join(work, "decode")
    for dirpath, _, files in sorted(os.walk(decode)):
        for name in sorted(files):
            if name.endswith(".gen"):
                path = os.path.join(dirpath, name)
                decoded.append((path, os.path.join("decode", os.path.relpath(path, decode))))
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


def check_options(p, args):
    """Stops on an option out of range (argparse's one-line error); 2 after the one-line
    refusal of --bf16; None when the options are fine."""
    for name in ("budget_s", "updates", "decode_workers"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')} must be >= 0")
    if args.bf16:
        print(f"gpu_run: error: {BF16_REFUSED}", file=sys.stderr)
        return 2
    if args.ngpu < 1:
        p.error("--ngpu must be >= 1")
    return None


def work_dir(args):
    """The working folder: --work, else runs/gpu-SIZE in the checkout."""
    return os.path.abspath(args.work or os.path.join(ROOT, "runs", f"gpu-{args.size}"))


def dry_run(args, t0):
    """--dry-run: the plan printed, nothing run or written; the exit code."""
    try:
        GpuRun(args, t0).print_plan()
    except (StepFailed, HltmtConfigError) as error:
        print(f"gpu_run: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return reader_gone()
    return 0


def full_run(args, t0):
    """The run, its console output also in OUT/gpu_run.log, the outputs collected into --out
    whether it finished or not, and the report printed when it finished; the exit code."""
    os.makedirs(args.out, exist_ok=True)
    sys.stdout = Tee(os.path.join(args.out, "gpu_run.log"))
    run = None
    ok = False
    try:
        run = GpuRun(args, t0)
        run.run()
        ok = True
    except (StepFailed, HltmtConfigError) as error:
        print(f"gpu_run: error: {error}", flush=True)
    except KeyboardInterrupt:
        print("gpu_run: error: interrupted", flush=True)
    finally:
        if run is not None:
            run.stop_all()
            try:
                files = collect(run)
                say(t0, f"{'finished' if ok else 'FAILED'}: {len(files)} files in {args.out}: {', '.join(files)}")
            except OSError as error:
                print(f"gpu_run: error: collecting the outputs: {error}", flush=True)
                ok = False
    if ok:
        print(open(os.path.join(args.out, "results.md"), encoding="utf-8").read())
    return 0 if ok else 1


def main(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    t0 = float(os.environ.get("GPU_RUN_T0") or time.time())
    refused = check_options(p, args)
    if refused is not None:
        return refused
    if args.out is None:
        args.out = os.path.join(work_dir(args), "out")
    return dry_run(args, t0) if args.dry_run else full_run(args, t0)


if __name__ == "__main__":
    sys.exit(main())
