#!/usr/bin/env python3
"""The main job: train, decode and score MNMT, HLT-MT (and LS-MNMT) on one data set, end to end.

    hltmt-main-job --size quick                       # DebMT-10 on the CPU: about 27 minutes on 2 cores
    hltmt-main-job --size full                        # DebMT-10 on the CPU: all data, 3 seeds
    hltmt-main-job --size base --gpu --ngpu 8 --raw RUN/clean --high fr,cs,de,fi,lv,et --ls-mnmt
                                                      # the paper's setting (examples/wmt10/run.sh)
    hltmt-main-job --size base --gpu --ngpu 8 --dry-run   # print every command, run nothing

Sizes: ``smoke``, ``quick`` and ``full`` are CPU sizes (the tiny model, a few hundred updates:
they show the pipeline and the mechanics, not the quality of the method); ``base`` is the
paper's size for GPUs: transformer-base, 4,096 tokens per GPU and ``--update-freq``
64 / ``--ngpu`` (the paper's batch: 4,096 tokens on each of 64 GPUs), 50,000 updates of stage
high then 50,000 of stage all.

Steps: prepare (joint sentencepiece + binarize) -> for each seed: the plain fairseq
``transformer`` MNMT baseline, HLT-MT stage high then stage all (one fairseq-train run that
switches stage at ``--high-stage-updates``; or two runs, the second from the first's
checkpoint, with ``--hltmt-schedule two-run``), and with ``--ls-mnmt`` the LS-MNMT baseline (one module
per target language, no gate) -> decode all directions of every system with beam 5
(parallel worker processes, each running fairseq-generate's own main for its directions;
fp16 on a GPU) -> sacreBLEU (BLEU, chrF) -> report (Markdown, CSV, PNG chart, gate heatmap) by
``hltmt-report``. All systems get the same data, batch size and number of updates.

Each step announces itself and its place in the run, streams fairseq's own progress, keeps
its log under RUN/logs/ and marks itself done; a rerun resumes after the last completed step
(a decode resumes at the first direction without output). A failed step stops the run with
the tail of its log. ``--raw`` runs the same recipe on other data in the same layout (the
WMT-10 recipe in examples/wmt10 does). ``--dry-run`` prints every command the job would run
(hltmt-prepare-data, each fairseq-train, one fairseq-generate line per decoded direction,
hltmt-report), one per line as a shell would run it, notes as ``#`` lines, and runs nothing:
steps already done in the run folder are left out, as a rerun would skip them.

Device and precision: the GPU when torch sees one (``--gpu`` to insist, ``--cpu`` to refuse
it; with ``--dry-run``, ``--gpu`` is assumed without looking for one). On a GPU, training runs
with ``--amp`` unless ``--precision`` says otherwise, and ``--precision fp16`` is fairseq's
fp16 optimizer with one float32 copy per parameter (``--fp16 --fp16-no-flatten-grads``): a
bare ``--fp16`` steps one flat float32 copy of all weights, so pool modules, the gate and
adapters that an update did not use would move; with one copy per parameter the task leaves
them out of the step. Every GPU run passes ``--distributed-world-size --ngpu`` (fairseq would
otherwise take every GPU it sees); with several GPUs also ``--ddp-backend legacy_ddp``, which
all-reduces every gradient after the backward pass, so the task can drop the gradients that
no worker produced (PyTorch DDP would need ``--find-unused-parameters`` and checks every
update for unused parameters). fairseq 0.12's ``--bf16`` is its TPU path and is not offered.
fairseq runs as ``python -m fairseq_cli.*`` of this Python (a ``pip install --target``
works). The budgeted one-GPU run of the three systems is scripts/gpu_run.sh.
"""

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Dict, List

from hltmt_plugin.cli import DEBMT10, add_version, register
from hltmt_plugin.corpora import DEBMT10_HIGH, DEBMT10_LANGS
from hltmt_plugin.errors import HltmtConfigError
from hltmt_plugin.experiments.recipe import SHORT_SEGMENTS, Comparison, Hyper, prepare_command, update_freq
from hltmt_plugin.experiments.steps import (
    NGPU_HELP,
    PRECISION_HELP,
    OptionError,
    StepFailed,
    decode,
    decode_jobs,
    decode_setup,
    is_done,
    mark_done,
    nproc,
    print_command,
    reader_gone,
    report_command,
    resolve_device,
    run_logged,
    run_report,
    run_steps,
    say,
)

LANGS = DEBMT10_LANGS
HIGH = DEBMT10_HIGH  # DebMT-10's high-resource languages (data/debmt10/README.md)


@dataclass
class Size(Hyper):
    """A size of the main job: the recipe's hyper-parameters (:class:`Hyper`), its data and
    its schedule."""

    max_train: int  # lines per pair (0: all)
    max_test: int  # lines per pair (0: all)
    vocab: int
    high_updates: int  # HLT-MT stage high
    all_updates: int  # HLT-MT stage all; the baselines get high + all
    seeds: List[int] = field(default_factory=lambda: [1])
    max_valid: int = 0  # lines per pair (0: all)
    gen_len: tuple = (1.5, 10)  # decoding length cap: a * source length + b
    batch_gpus: int = 0  # the batch of this many GPUs (max_tokens each): --update-freq batch_gpus / --ngpu (0: 1)
    device: str = "cpu"  # what the size is made for: "cpu" (the pipeline and mechanics) or "gpu"
    segment_words: tuple = ()  # (EN, XX): only segment pairs of at most EN English and XX other words, every split
    to_english: bool = True  # the X->En directions too (else one-to-many En->X only)
    train_jobs: int = 1  # on the CPU, a seed's fairseq-train runs side by side, this many at once (a core each)
    valid_interval: int = 0  # validate every this many updates, for the report's loss curves (0: at each epoch's end)


SIZES: Dict[str, Size] = {
    # a pipeline check: 12 updates of an untrained model decode to the length cap, so the cap
    # is 16 tokens and the valid set is cut (decoding and validation dominated its time)
    "smoke": Size(
        max_train=300,
        max_test=12,
        vocab=1000,
        high_updates=6,
        all_updates=6,
        max_tokens=2048,
        warmup=4,
        max_valid=40,
        gen_len=(0, 16),
        valid_interval=4,
    ),
    # the quality study's setting (docs/quality-study.md: one-to-many En->X over the segments of
    # at most 12 English and 16 target words), cut to what 30 minutes of two cores train: MNMT
    # and HLT-MT side by side at one thread each
    "quick": Size(
        max_train=0,
        max_test=200,
        vocab=8000,
        high_updates=600,
        all_updates=800,
        segment_words=SHORT_SEGMENTS,
        to_english=False,
        train_jobs=2,
        valid_interval=200,
    ),
    # all training data, 3 seeds; sized so the whole job fits in about 2 hours on 2 CPU cores
    # (a larger model would not fit: see docs/results/debmt10-full/README.md)
    "full": Size(
        max_train=0,
        max_test=500,
        vocab=16000,
        high_updates=400,
        all_updates=400,
        seeds=[1, 2, 3],
    ),
    # the paper's size, for GPUs (examples/wmt10/run.sh): transformer-base, the paper's optimiser
    # (Adam 0.9/0.98, lr 5e-4 as its text says, 4,000 warm-up updates) and batch (4,096 tokens on
    # each of 64 GPUs: --update-freq 64 / --ngpu); the paper gives no number of updates: 50k of
    # stage high, then 50k of stage all (days on one GPU; see examples/wmt10/README.md)
    "base": Size(
        max_train=0,
        max_test=0,
        vocab=64000,
        model="base",
        high_updates=50000,
        all_updates=50000,
        seeds=[1],
        lr=5e-4,
        warmup=4000,
        batch_gpus=64,
        device="gpu",
    ),
}


class Job:
    def __init__(self, args):
        self.args = args
        self.size = SIZES[args.size]
        self.seeds = args.seeds or self.size.seeds
        self.run_dir = os.path.abspath(args.run_dir or os.path.join("runs", f"debmt10-{args.size}"))
        self.data = os.path.join(self.run_dir, "data", "bin")
        self.logs = os.path.join(self.run_dir, "logs")
        self.systems = ["mnmt", "hltmt"] + (["lsmnmt"] if args.ls_mnmt else [])
        self.dry_run = args.dry_run
        self.device, self.precision, self.device_flags = resolve_device(args, dry_run=args.dry_run)
        self.update_freq, self.batch_note = update_freq(args.ngpu, args.update_freq, self.size.batch_gpus)
        self.comparison = Comparison.from_args(
            args, self.data, langs=LANGS, high=HIGH, to_english=self.size.to_english, cpu=self.device == "cpu"
        )
        self.langs, self.high, self.directions = self.comparison.langs, self.comparison.high, self.comparison.pairs
        if args.train_jobs > 1 and self.device == "cuda":
            raise OptionError(f"--train-jobs {args.train_jobs} is for the CPU: on a GPU the runs go one after another")
        self.train_jobs = 1 if self.device == "cuda" else min(args.train_jobs or self.size.train_jobs, nproc())

    def execute(self, cmd, log_path, prefix="", env=None):
        """Run one command of a step (or print it, with --dry-run)."""
        run_logged(cmd, log_path, prefix, env, dry_run=self.dry_run)

    # ---- fairseq command lines (the recipe's) ----------------------------------------------
    def train_command(self, system, seed, updates, save, *options, **system_options):
        """One fairseq-train run of ``system`` with this job's size, batch, validation and device."""
        s = self.size
        freq = ["--update-freq", str(self.update_freq)] if self.update_freq > 1 else []
        valid = ["--validate-interval-updates", str(s.valid_interval)] if s.valid_interval else []
        return self.comparison.train_command(
            system,
            s,
            seed=seed,
            updates=updates,
            save_dir=save,
            options=[*freq, *valid, *self.device_flags, *options],
            **system_options,
        )

    def save_dir(self, system, seed, stage=""):
        return os.path.join(self.run_dir, "models", f"{system}{stage}.seed{seed}")

    # ---- steps ------------------------------------------------------------------------
    def prepare(self):
        s = self.size
        cmd = prepare_command(
            self.args.raw,
            os.path.join(self.run_dir, "data"),
            self.langs,
            vocab=s.vocab,
            segment_words=s.segment_words,
            max_train=s.max_train,
            max_valid=s.max_valid,
            max_test=s.max_test,
        )
        self.execute(cmd, os.path.join(self.logs, "prepare.log"))

    def train_mnmt(self, seed):
        """The plain fairseq transformer: (log name, command)."""
        s = self.size
        return "train_mnmt", self.train_command(
            "mnmt", seed, s.high_updates + s.all_updates, self.save_dir("mnmt", seed)
        )

    def train_hltmt_high(self, seed):
        save = self.save_dir("hltmt", seed, "-high")
        return "train_hltmt_high", self.train_command("hltmt", seed, self.size.high_updates, save)

    def train_hltmt_all(self, seed):
        stage1 = os.path.join(self.save_dir("hltmt", seed, "-high"), "checkpoint_last.pt")
        resume = ["--restore-file", stage1, "--reset-optimizer", "--reset-dataloader", "--reset-meters"]
        save = self.save_dir("hltmt", seed)
        return "train_hltmt_all", self.train_command("hltmt", seed, self.size.all_updates, save, *resume, stage="all")

    def train_hltmt_one_run(self, seed):
        """Both stages in one fairseq-train run (--high-stage-updates): one optimizer state and
        one learning-rate schedule across the switch, as the authors meant their schedule."""
        s = self.size
        save = self.save_dir("hltmt", seed)
        return "train_hltmt", self.train_command(
            "hltmt", seed, s.high_updates + s.all_updates, save, high_updates=s.high_updates
        )

    def train_lsmnmt(self, seed):
        """LS-MNMT: a module for each language of --langs, English among them."""
        s = self.size
        save = self.save_dir("lsmnmt", seed)
        return "train_lsmnmt", self.train_command(
            "lsmnmt", seed, s.high_updates + s.all_updates, save, ls_langs=["en"] + self.langs
        )

    def training_lanes(self, seed):
        """A seed's fairseq-train runs, one lane a system (a lane's runs go in order):
        [[(name, command)]], the name that of the step and of its log."""
        hltmt = (
            [self.train_hltmt_one_run]
            if self.args.hltmt_schedule == "one-run"
            else [self.train_hltmt_high, self.train_hltmt_all]
        )
        systems = [[self.train_mnmt], hltmt] + ([[self.train_lsmnmt]] if self.args.ls_mnmt else [])
        return [[(f"{log}.seed{seed}", cmd) for log, cmd in (run(seed) for run in lane)] for lane in systems]

    def train(self, log, cmd):
        """One fairseq-train run, its output streamed."""
        self.execute(cmd, os.path.join(self.logs, f"{log}.log"))

    def train_side_by_side(self, lanes):
        """The lanes at once, ``train_jobs`` at a time, each fairseq-train at its share of the
        cores, its lines prefixed with its log name; a run marks itself done, so that a rerun
        after a stop skips the runs that finished."""
        threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, nproc() // self.train_jobs))  # the user's, if set
        env = dict(os.environ, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
        if self.dry_run:
            print(
                f"# these {sum(map(len, lanes))} fairseq-train runs go side by side in {len(lanes)} lanes "
                f"({self.train_jobs} at a time, OMP_NUM_THREADS={threads}), a lane's runs in order"
            )
            for i, runs in enumerate(lanes, 1):
                print(f"# lane {i}: {', '.join(name for name, _ in runs)}")
                for _, cmd in runs:
                    print_command(cmd)
            return

        def lane(runs):
            for name, cmd in runs:
                if not is_done(self.run_dir, name):
                    t0 = time.time()
                    self.execute(cmd, os.path.join(self.logs, f"{name}.log"), prefix=f"[{name}] ", env=env)
                    mark_done(self.run_dir, name, time.time() - t0)

        with ThreadPoolExecutor(max_workers=self.train_jobs) as pool:
            for result in [pool.submit(lane, runs) for runs in lanes]:
                result.result()  # a failed run's StepFailed, after the other lanes ended

    def decode(self, seed):
        """Every direction of every system, beam 5, over --decode-workers concurrent processes
        (each decodes its directions one after another in one Python; fp16 on a GPU)."""
        folder = os.path.join(self.run_dir, "decode", "{}", f"seed{seed}")
        checkpoints = {
            system: os.path.join(self.save_dir(system, seed), "checkpoint_last.pt") for system in self.systems
        }
        label = f"decode seed {seed} [{{n}}/{{total}}] {{system}} {{direction}}"
        todo = decode_jobs(checkpoints, self.directions, folder.format, label)
        cuda, gen_len, workers = self.device == "cuda", self.size.gen_len, self.args.decode_workers
        common, workers, threads = decode_setup(
            self.comparison, todo, cuda=cuda, precision=self.precision, gen_len=gen_len, workers=workers
        )
        if not self.dry_run:
            total = len(self.systems) * len(self.directions)
            say(f"decode seed {seed}: {len(todo)} of {total} directions to go, {workers} worker(s)")
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", threads)
        plan = (f"decode seed {seed}", folder.format("SYSTEM") + "/SRC-TGT.gen")
        log_dir = os.path.join(self.logs, f"decode_seed{seed}")
        decode(todo, common, self.data, workers, log_dir, dry_run=self.dry_run, plan=plan, env=env)

    def report(self):
        one_run = self.args.hltmt_schedule == "one-run"
        logs = {
            "mnmt": "train_mnmt",
            "hltmt": "train_hltmt" if one_run else "train_hltmt_all",
            "lsmnmt": "train_lsmnmt",
        }
        cmd = report_command(
            os.path.join(self.run_dir, "decode"),
            os.path.join(self.run_dir, "report"),
            high=self.high,
            title=f"DebMT-10 `{self.args.size}`" if self.args.raw == DEBMT10 else self.args.title,
            gate_checkpoint=os.path.join(
                self.save_dir("hltmt", self.seeds[0], "" if one_run else "-high"), "checkpoint_last.pt"
            ),
            valid_logs=[f"{system}={self.logs}/{logs[system]}.seed*.log" for system in self.systems],
            note=self.cpu_note() if self.device == "cpu" else None,
        )
        run_report(cmd, os.path.join(self.logs, "report.log"), self.dry_run)

    def cpu_note(self):
        s = self.size
        trained = f"Trained on CPU ({s.high_updates} + {s.all_updates} updates of {s.hltmt_arch}"
        if not s.segment_words:
            return (
                trained + "): these models are far from converged, so the figures show that the pipeline works "
                "end to end, not the quality of the method."
            )
        return (
            trained + f", on the segment pairs of at most {s.segment_words[0]} English and {s.segment_words[1]} "
            "target words): these models are far from converged (the validation loss is still "
            "falling), so the figures are an early point of training, not the quality of the method; "
            "the quality study (docs/quality-study.md) trains this setting for 5,000 updates."
        )

    def steps(self):
        steps = [("prepare", self.prepare, ())]
        for seed in self.seeds:
            lanes = self.training_lanes(seed)
            if self.train_jobs > 1:
                steps.append((f"train.seed{seed}", self.train_side_by_side, (lanes,)))
            else:
                steps += [(name, self.train, (name, cmd)) for lane in lanes for name, cmd in lane]
            steps.append((f"decode.seed{seed}", self.decode, (seed,)))
        return steps + [("report", self.report, ())]

    def run(self):
        steps = self.steps()
        gpus = f" x {self.args.ngpu}" if self.device == "cuda" else ""
        print(
            f"{'# ' if self.dry_run else ''}main job: size={self.args.size} (made for the {self.size.device}), "
            f"seeds={self.seeds}, systems={','.join(self.systems)}, {len(self.directions)} directions, device "
            f"{self.device}{gpus} ({self.precision}), update-freq {self.update_freq}, "
            f"{self.train_jobs} training run(s) at once, run folder {self.run_dir}",
            flush=True,
        )
        if self.batch_note:
            print(f"{'# ' if self.dry_run else ''}main job: {self.batch_note}", flush=True)
        run_steps(steps, self.run_dir, self.dry_run)


def build_parser():
    """The command line of hltmt-main-job."""
    from hltmt_plugin.hub.arguments import count_option
    from hltmt_plugin.paths import READ_FOLDER, WORK_FOLDER, ArgumentParser, path_option

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--size",
        choices=sorted(SIZES),
        default="quick",
        help="smoke, quick, full: CPU sizes (the tiny model, a few hundred updates: the pipeline, not "
        "the method's quality); base: the paper's size for GPUs (transformer-base, 50k + 50k "
        "updates, the batch of 64 GPUs of 4,096 tokens)",
    )
    path_option(
        p,
        "--raw",
        kind=READ_FOLDER,
        default=DEBMT10,
        help="raw parallel data, {split}.en-XX.{en,XX} (default: DebMT-10)",
    )
    p.add_argument("--langs", default=None, help="non-English languages (default: the ten WMT-10 languages)")
    p.add_argument("--high", default=None, help="high-resource languages (default: DebMT-10's fr,de,cs,tr,fi,et)")
    p.add_argument("--title", default="results", help="report title when --raw is not DebMT-10")
    path_option(
        p, "--run-dir", kind=WORK_FOLDER, default=None, help="where everything goes (default: runs/debmt10-SIZE)"
    )
    p.add_argument(
        "--seeds",
        type=lambda v: [int(x) for x in v.split(",")],
        default=None,
        help="comma-separated seeds (default: the size's)",
    )
    p.add_argument("--ls-mnmt", action="store_true", help="also train the LS-MNMT baseline")
    p.add_argument(
        "--hltmt-schedule",
        choices=["one-run", "two-run"],
        default="one-run",
        help="HLT-MT's stages as one fairseq-train run that switches at --high-stage-updates (one "
        "optimizer state and learning-rate schedule; lower validation loss in "
        "docs/results/debmt10-full) or as two runs (stage all restarts from stage high's "
        "checkpoint with a fresh optimizer and warm-up)",
    )
    p.add_argument(
        "--gpu",
        action="store_true",
        help="train and decode on the GPU (default: the GPU when torch sees one, else the CPU)",
    )
    p.add_argument("--cpu", action="store_true", help="train and decode on the CPU even when a GPU is there")
    p.add_argument(
        "--precision",
        choices=["auto", "fp32", "fp16", "amp"],
        default="auto",
        help=PRECISION_HELP + "; decoding runs in fp16 on a GPU unless fp32",
    )
    p.add_argument("--ngpu", type=count_option, default=1, help=NGPU_HELP)
    p.add_argument(
        "--update-freq",
        type=int,
        default=0,
        help="batches per update (default: the size's: nearest to 64 / --ngpu for base, else 1)",
    )
    p.add_argument("--bf16", action="store_true", help=argparse.SUPPRESS)  # refused in one line: BF16_REFUSED
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print every command the job would run (hltmt-prepare-data, fairseq-train, one "
        "fairseq-generate line per direction, hltmt-report), one per line, and run nothing; "
        "with --gpu, no GPU needs to be there",
    )
    p.add_argument(
        "--train-jobs",
        type=count_option,
        default=0,
        help="on the CPU, a seed's fairseq-train runs (one per system) go side by side, this many at "
        "once, each at its share of the cores (default: the size's: 2 for quick, else 1)",
    )
    p.add_argument(
        "--decode-workers",
        type=count_option,
        default=0,
        help="concurrent decoding processes (default: min(8, cores) on a GPU, the cores on the CPU)",
    )
    return add_version(p)


def main(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    if args.decode_workers < 0 or args.update_freq < 0 or args.train_jobs < 0:
        p.error("--decode-workers, --update-freq and --train-jobs must be >= 0")
    register()  # torch and fairseq, once the arguments are checked
    try:
        Job(args).run()
    except HltmtConfigError as error:  # OptionError, the recipe's --langs and --high
        print(f"hltmt-main-job: error: {error}", file=sys.stderr)
        return 2
    except StepFailed as error:
        print(f"\nhltmt-main-job: error: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return reader_gone()
    return 0


if __name__ == "__main__":
    sys.exit(main())
