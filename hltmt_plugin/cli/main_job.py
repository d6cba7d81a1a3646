#!/usr/bin/env python3
"""The main job: DebMT-10 end to end, offline, on the data carried in this repository.

    hltmt-main-job --size quick      # (make demo) about 20 minutes on 2 CPU cores
    hltmt-main-job --size full       # the benchmark: all data, 3 seeds

Steps: prepare (joint sentencepiece + binarize) -> for each seed: the plain fairseq
``transformer`` MNMT baseline, HLT-MT stage high then stage all (one fairseq-train run that
switches stage at ``--high-stage-updates``; or two runs, the second from the first's
checkpoint, with ``--hltmt-schedule two-run``), and with ``--ls-mnmt`` the LS-MNMT baseline (one module
per target language, no gate) -> decode all 20 directions of every system with beam 5
(parallel worker processes, hltmt_plugin/cli/decode.py; fp16 on a GPU) ->
sacreBLEU (BLEU, chrF) -> report (Markdown, CSV, PNG chart, gate heatmap) by
``hltmt-report``. All systems get the same data, batch size and number of updates.

Each step announces itself and its place in the run, streams fairseq's own progress, keeps
its log under RUN/logs/ and marks itself done; a rerun resumes after the last completed step
(a decode resumes at the first direction without output). A failed step stops the run with
the tail of its log. ``--raw`` runs the same recipe on other data in the same layout (the
WMT-10 recipe in examples/wmt10 does).

On 2 CPU cores the models are far from converged: the CPU runs show the pipeline and the
mechanics (routing, the map, scores per direction), not the quality of the method. fairseq
runs as ``python -m fairseq_cli.*`` of this Python (a ``pip install --target`` works); the GPU
is used when torch sees one (``--cpu`` to refuse it), with ``--amp`` unless ``--precision``
says otherwise; ``--bf16`` (TPU training in fairseq 0.12) is refused without a TPU. The
budgeted GPU run of the three systems is scripts/gpu_run.sh.
"""
import argparse
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List

from hltmt_plugin.cli import CHECKOUT, DEBMT10, PLUGIN, fairseq_cli, plugin_cli
from hltmt_plugin.cli.decode import DecodeFailed, decode_all
from hltmt_plugin.cli.launch import NOISE, QUIET_WARNINGS  # fairseq's own start-up noise, as hltmt-launch keeps it out


def nproc():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def tpu_present():
    import importlib.util

    return importlib.util.find_spec("torch_xla") is not None


class OptionError(Exception):
    pass


def resolve_device(args):
    """'cuda' or 'cpu' from --gpu / --cpu (default: the GPU when torch sees one), and the
    training precision flags. --bf16 is fairseq 0.12's TPU path: refused without a TPU."""
    if args.gpu and args.cpu:
        raise OptionError("--gpu and --cpu exclude each other")
    if args.bf16 and not tpu_present():
        raise OptionError("--bf16 in fairseq 0.12 trains on a TPU (torch_xla) and dies on a GPU or CPU; "
                          "use --precision amp (the default on a GPU) or --precision fp16")
    import torch

    cuda = torch.cuda.is_available()
    if args.gpu and not cuda:
        raise OptionError("--gpu: torch sees no CUDA device (torch.cuda.is_available() is False)")
    device = "cpu" if args.cpu or (not cuda and not args.bf16) else ("cuda" if cuda else "tpu")
    precision = args.precision
    if precision == "auto":
        precision = "amp" if device == "cuda" else "fp32"
    if device == "cpu" and precision == "fp16":
        raise OptionError("--precision fp16 needs a GPU; on the CPU use fp32 (or amp, which is then fp32)")
    flags = {"fp32": [], "fp16": ["--fp16"], "amp": ["--amp"]}[precision]
    if args.bf16:
        flags, precision = ["--bf16", "--tpu"], "bf16"
    return device, precision, flags
LANGS = ["fr", "cs", "de", "fi", "lv", "et", "ro", "hi", "tr", "gu"]
HIGH = ["fr", "de", "cs", "tr", "fi", "et"]  # DebMT-10's high-resource languages (data/debmt10/README.md)


@dataclass
class Size:
    max_train: int  # lines per pair (0: all)
    max_test: int  # lines per pair (0: all)
    vocab: int
    hltmt_arch: str
    baseline_arch: str  # the plain fairseq transformer of the same sizes
    high_updates: int  # HLT-MT stage high
    all_updates: int  # HLT-MT stage all; the baselines get high + all
    max_tokens: int
    seeds: List[int] = field(default_factory=lambda: [1])
    lr: float = 3e-3
    warmup: int = 200
    max_valid: int = 0  # lines per pair (0: all)
    gen_len: tuple = (1.5, 10)  # decoding length cap: a * source length + b


SIZES: Dict[str, Size] = {
    # a pipeline check: 12 updates of an untrained model decode to the length cap, so the cap
    # is 16 tokens and the valid set is cut (decoding and validation dominated its time)
    "smoke": Size(max_train=300, max_test=12, vocab=1000, hltmt_arch="hltmt_transformer_tiny",
                  baseline_arch="transformer_hltmt_tiny", high_updates=6, all_updates=6,
                  max_tokens=2048, warmup=4, max_valid=40, gen_len=(0, 16)),
    "quick": Size(max_train=4000, max_test=200, vocab=8000, hltmt_arch="hltmt_transformer_tiny",
                  baseline_arch="transformer_hltmt_tiny", high_updates=400, all_updates=400,
                  max_tokens=4096),
    # all training data, 3 seeds; sized so the whole job fits in about 2 hours on 2 CPU cores
    # (a larger model would not fit: see docs/results/debmt10-full/README.md)
    "full": Size(max_train=0, max_test=500, vocab=16000, hltmt_arch="hltmt_transformer_tiny",
                 baseline_arch="transformer_hltmt_tiny", high_updates=400, all_updates=400, max_tokens=4096,
                 seeds=[1, 2, 3]),
    # for a GPU (examples/wmt10): transformer-base sizes, the paper's optimiser settings
    # transformer-base with the paper's optimiser settings: HOURS on one GPU (50k + 50k updates);
    # the budgeted H200 run (minutes, three systems at once) is scripts/gpu_run.sh
    "base": Size(max_train=0, max_test=0, vocab=64000, hltmt_arch="hltmt_transformer", baseline_arch="transformer",
                 high_updates=50000, all_updates=50000, max_tokens=8192, seeds=[1], lr=3e-4, warmup=4000),
}


def say(msg):
    print(f"\n==> [main_job {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class StepFailed(Exception):
    pass


def run_logged(cmd, log_path, stdout_path=None):
    """Run cmd, streaming its log to the console and to log_path; with stdout_path, stdout
    goes there instead (written as .partial, renamed when the command succeeds)."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        out = open(stdout_path + ".partial", "w", encoding="utf-8") if stdout_path else None
        env = dict(os.environ)
        if not env.get("PYTHONWARNINGS"):  # fairseq's hydra / pin_memory / torch.cuda.amp warnings, not ours
            env["PYTHONWARNINGS"] = QUIET_WARNINGS
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE if out else subprocess.STDOUT,
                                text=True, cwd=CHECKOUT, env=env)

        def pump(stream, sinks):
            for line in stream:
                if any(noise in line for noise in NOISE):
                    continue
                for sink in sinks:
                    sink.write(line)
                sys.stdout.flush()

        threads = [threading.Thread(target=pump, args=(proc.stderr, [log, sys.stdout]))] if out else []
        for t in threads:
            t.start()
        pump(proc.stdout, [out] if out else [log, sys.stdout])
        for t in threads:
            t.join()
        code = proc.wait()
        if out:
            out.close()
    if code != 0:
        tail = [line[:300] for line in open(log_path, encoding="utf-8").read().splitlines()[-25:]]
        raise StepFailed(f"command failed (exit {code}); last lines of {log_path}:\n" + "\n".join(tail))
    if stdout_path:
        os.replace(stdout_path + ".partial", stdout_path)


class Job:
    def __init__(self, args):
        self.args = args
        self.size = SIZES[args.size]
        self.seeds = args.seeds or self.size.seeds
        self.run_dir = os.path.abspath(args.run_dir or os.path.join("runs", f"debmt10-{args.size}"))
        self.data = os.path.join(self.run_dir, "data", "bin")
        self.logs = os.path.join(self.run_dir, "logs")
        self.langs = args.langs.split(",") if args.langs else LANGS
        self.high = [x for x in (args.high.split(",") if args.high else HIGH) if x in self.langs]
        self.directions = [f"en-{x}" for x in self.langs] + [f"{x}-en" for x in self.langs]
        self.systems = ["mnmt", "hltmt"] + (["lsmnmt"] if args.ls_mnmt else [])
        self.device, self.precision, self.precision_flags = resolve_device(args)

    # ---- fairseq command lines ----------------------------------------------------------
    def task_args(self, task="hltmt_translation"):
        device = ["--cpu"] if self.device == "cpu" else []
        return ["--user-dir", PLUGIN, "--task", task, "--langs", ",".join(["en"] + self.langs),
                "--lang-pairs", ",".join(self.directions), "--encoder-langtok", "tgt", *device]

    def train_args(self, seed, updates, save):
        s = self.size
        fp = self.precision_flags
        return ["--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
                "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", str(s.lr),
                "--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(s.warmup), "--dropout", "0.1",
                "--max-tokens", str(s.max_tokens), "--max-update", str(updates),
                "--sampling-method", "temperature", "--sampling-temperature", "5",
                "--save-dir", save, "--no-epoch-checkpoints", "--log-interval", "50",
                "--seed", str(seed), *fp]

    def hltmt_args(self, langs, pool_size):
        return ["--arch", self.size.hltmt_arch, "--high-resource-langs", ",".join(langs),
                "--slp-pool-size", str(pool_size)]

    def save_dir(self, system, seed, stage=""):
        return os.path.join(self.run_dir, "models", f"{system}{stage}.seed{seed}")

    # ---- steps ------------------------------------------------------------------------
    def prepare(self):
        s = self.size
        cmd = [*plugin_cli("prepare_data"), "--raw", self.args.raw,
               "--out", os.path.join(self.run_dir, "data"), "--langs", ",".join(self.langs),
               "--vocab-size", str(s.vocab)]
        cmd += ["--max-train", str(s.max_train)] if s.max_train else []
        cmd += ["--max-test", str(s.max_test)] if s.max_test else []
        cmd += ["--max-valid", str(s.max_valid)] if s.max_valid else []
        run_logged(cmd, os.path.join(self.logs, "prepare.log"))

    def train_mnmt(self, seed):
        s = self.size
        save = self.save_dir("mnmt", seed)
        run_logged([*fairseq_cli("train"), self.data, *self.task_args("translation_multi_simple_epoch"),
                    "--arch", s.baseline_arch,
                    *self.train_args(seed, s.high_updates + s.all_updates, save)],
                   os.path.join(self.logs, f"train_mnmt.seed{seed}.log"))

    def train_hltmt(self, seed, log, updates, save, *stage):
        """One fairseq-train run of HLT-MT (the pool over the high-resource languages)."""
        run_logged([*fairseq_cli("train"), self.data, *self.task_args(),
                    *self.hltmt_args(self.high, min(3, len(self.high))), *self.train_args(seed, updates, save),
                    "--criterion", "hltmt_cross_entropy", *stage], os.path.join(self.logs, f"{log}.seed{seed}.log"))

    def train_hltmt_high(self, seed):
        self.train_hltmt(seed, "train_hltmt_high", self.size.high_updates, self.save_dir("hltmt", seed, "-high"),
                         "--hlt-stage", "high", "--disparity-weight", "1.0")

    def train_hltmt_all(self, seed):
        stage1 = os.path.join(self.save_dir("hltmt", seed, "-high"), "checkpoint_last.pt")
        self.train_hltmt(seed, "train_hltmt_all", self.size.all_updates, self.save_dir("hltmt", seed),
                         "--hlt-stage", "all", "--restore-file", stage1,
                         "--reset-optimizer", "--reset-dataloader", "--reset-meters")

    def train_hltmt_one_run(self, seed):
        """Both stages in one fairseq-train run (--high-stage-updates): one optimizer state and
        one learning-rate schedule across the switch, as the authors meant their schedule."""
        s = self.size
        self.train_hltmt(seed, "train_hltmt", s.high_updates + s.all_updates, self.save_dir("hltmt", seed),
                         "--hlt-stage", "high", "--high-stage-updates", str(s.high_updates),
                         "--disparity-weight", "1.0")

    def train_lsmnmt(self, seed):
        s = self.size
        targets = ["en"] + self.langs
        run_logged([*fairseq_cli("train"), self.data, *self.task_args(),
                    *self.hltmt_args(targets, len(targets)), "--slp-language-specific", "--hlt-stage", "all",
                    *self.train_args(seed, s.high_updates + s.all_updates, self.save_dir("lsmnmt", seed))],
                   os.path.join(self.logs, f"train_lsmnmt.seed{seed}.log"))

    def decode(self, seed):
        """Every direction of every system, beam 5, over --decode-workers concurrent processes
        (each decodes its directions one after another in one Python; fp16 on a GPU)."""
        jobs = [(system, d) for system in self.systems for d in self.directions]
        todo = []
        for i, (system, direction) in enumerate(jobs, 1):
            out_dir = os.path.join(self.run_dir, "decode", system, f"seed{seed}")
            target = os.path.join(out_dir, f"{direction}.gen")
            if os.path.exists(target):
                continue
            os.makedirs(out_dir, exist_ok=True)
            src, tgt = direction.split("-")
            ckpt = os.path.join(self.save_dir(system, seed), "checkpoint_last.pt")
            todo.append((f"decode seed {seed} [{i}/{len(jobs)}] {system} {direction}", ckpt, src, tgt, target))
        workers = self.args.decode_workers or (min(8, nproc()) if self.device == "cuda" else nproc())
        workers = max(1, min(workers, len(todo) or 1))
        say(f"decode seed {seed}: {len(todo)} of {len(jobs)} directions to go, {workers} worker(s)")
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1" if self.device == "cuda" else str(max(1, nproc() // workers)))
        common = [self.data, *self.task_args(), "--gen-subset", "test", "--beam", "5",
                  "--max-tokens", "20000" if self.device == "cuda" else "8000", "--max-len-a", str(self.size.gen_len[0]),
                  "--max-len-b", str(self.size.gen_len[1]), "--remove-bpe", "sentencepiece",
                  *(["--fp16"] if self.device == "cuda" and self.precision != "fp32" else [])]
        try:
            decode_all(todo, common, self.data, workers, os.path.join(self.logs, f"decode_seed{seed}"), env=env)
        except DecodeFailed as error:
            raise StepFailed(str(error))

    def report(self):
        one_run = self.args.hltmt_schedule == "one-run"
        cmd = [*plugin_cli("report"), "--decode-dir",
               os.path.join(self.run_dir, "decode"), "--out", os.path.join(self.run_dir, "report"),
               "--high", ",".join(self.high), "--baseline", "mnmt", "--system", "hltmt",
               "--title", f"DebMT-10 `{self.args.size}`" if self.args.raw == DEBMT10 else self.args.title,
               "--gate-checkpoint", os.path.join(self.save_dir("hltmt", self.seeds[0], "" if one_run else "-high"),
                                                 "checkpoint_last.pt"),
               "--valid-log", f"mnmt={self.logs}/train_mnmt.seed*.log",
               "--valid-log", f"hltmt={self.logs}/train_hltmt{'' if one_run else '_all'}.seed*.log"]
        if self.args.ls_mnmt:
            cmd += ["--valid-log", f"lsmnmt={self.logs}/train_lsmnmt.seed*.log"]
        if self.device == "cpu":
            cmd += ["--note", f"Trained on CPU ({self.size.high_updates} + {self.size.all_updates} updates of "
                              f"{self.size.hltmt_arch}): these models are far from converged, so the figures show "
                              "that the pipeline works end to end, not the quality of the method."]
        run_logged(cmd, os.path.join(self.logs, "report.log"))
        print(open(os.path.join(self.run_dir, "report", "results.md"), encoding="utf-8").read())

    def steps(self):
        steps = [("prepare", self.prepare, ())]
        for seed in self.seeds:
            steps.append((f"train_mnmt.seed{seed}", self.train_mnmt, (seed,)))
            if self.args.hltmt_schedule == "one-run":
                steps.append((f"train_hltmt.seed{seed}", self.train_hltmt_one_run, (seed,)))
            else:
                steps += [(f"train_hltmt_high.seed{seed}", self.train_hltmt_high, (seed,)),
                          (f"train_hltmt_all.seed{seed}", self.train_hltmt_all, (seed,))]
            if self.args.ls_mnmt:
                steps.append((f"train_lsmnmt.seed{seed}", self.train_lsmnmt, (seed,)))
            steps.append((f"decode.seed{seed}", self.decode, (seed,)))
        return steps + [("report", self.report, ())]

    def run(self):
        os.makedirs(self.run_dir, exist_ok=True)
        steps = self.steps()
        print(f"main job: size={self.args.size}, seeds={self.seeds}, systems={','.join(self.systems)}, "
              f"{len(self.directions)} directions, device {self.device} ({self.precision}), "
              f"run folder {self.run_dir}", flush=True)
        t_start = time.time()
        for n, (name, fn, fn_args) in enumerate(steps, 1):
            marker = os.path.join(self.run_dir, f".done-{name}")
            if os.path.exists(marker):
                say(f"step {n}/{len(steps)} {name}: already done, skipped")
                continue
            say(f"step {n}/{len(steps)} {name} (run time so far {time.time() - t_start:.0f}s)")
            t0 = time.time()
            fn(*fn_args)
            with open(marker, "w") as f:
                f.write(f"{time.time() - t0:.0f}s\n")
            say(f"step {n}/{len(steps)} {name} done in {time.time() - t0:.0f}s")
        say(f"finished in {time.time() - t_start:.0f}s: {os.path.join(self.run_dir, 'report', 'results.md')}")




def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", choices=sorted(SIZES), default="quick")
    p.add_argument("--raw", default=DEBMT10, help="raw parallel data, {split}.en-XX.{en,XX} (default: DebMT-10)")
    p.add_argument("--langs", default=None, help="non-English languages (default: the ten WMT-10 languages)")
    p.add_argument("--high", default=None, help="high-resource languages (default: DebMT-10's fr,de,cs,tr,fi,et)")
    p.add_argument("--title", default="results", help="report title when --raw is not DebMT-10")
    p.add_argument("--run-dir", default=None, help="where everything goes (default: runs/debmt10-SIZE)")
    p.add_argument("--seeds", type=lambda v: [int(x) for x in v.split(",")], default=None,
                   help="comma-separated seeds (default: the size's)")
    p.add_argument("--ls-mnmt", action="store_true", help="also train the LS-MNMT baseline")
    p.add_argument("--hltmt-schedule", choices=["one-run", "two-run"], default="one-run",
                   help="HLT-MT's stages as one fairseq-train run that switches at --high-stage-updates (one "
                        "optimizer state and learning-rate schedule; lower validation loss in "
                        "docs/results/debmt10-full) or as two runs (stage all restarts from stage high's "
                        "checkpoint with a fresh optimizer and warm-up)")
    p.add_argument("--gpu", action="store_true", help="train and decode on the GPU (default: the GPU when torch "
                                                      "sees one, else the CPU)")
    p.add_argument("--cpu", action="store_true", help="train and decode on the CPU even when a GPU is there")
    p.add_argument("--precision", choices=["auto", "fp32", "fp16", "amp"], default="auto",
                   help="training precision (default: amp on a GPU, fp32 on the CPU); decoding runs in fp16 on "
                        "a GPU unless fp32")
    p.add_argument("--bf16", action="store_true", help="fairseq 0.12's --bf16 is TPU training: refused unless "
                                                       "torch_xla is installed")
    p.add_argument("--decode-workers", type=int, default=0,
                   help="concurrent decoding processes (default: min(8, cores) on a GPU, the cores on the CPU)")
    args = p.parse_args(argv)
    if args.decode_workers < 0:
        p.error("--decode-workers must be >= 0")
    try:
        Job(args).run()
    except OptionError as error:
        print(f"hltmt-main-job: error: {error}", file=sys.stderr)
        return 2
    except StepFailed as error:
        print(f"\nmain_job: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
