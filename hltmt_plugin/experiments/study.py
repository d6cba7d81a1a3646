#!/usr/bin/env python3
"""The quality study: does HLT-MT translate better than the plain MNMT, on two CPU cores?

    hltmt-study                         # everything, resuming where a previous call stopped
    hltmt-study --runs mnmt:1,hltmt:1   # only these system:seed runs (the rest later)
    hltmt-study --report-only           # rebuild the report from the finished runs
    hltmt-study --dry-run               # print every command, run nothing

One-to-many En->X over DebMT-10's ten target languages, on the segments a tiny model can
learn within hours on a CPU: at most 12 English and 16 target words, in every split (the
valid and test sets are cut the same way: ``hltmt-prepare-data --segment-words 12,16``). One
joint sentencepiece model, the tiny model size (d 128, 2+2 layers) for every system, the same data, batch, learning-rate
schedule and number of updates for all. The systems:

- ``mnmt``: fairseq's plain ``transformer`` of the same size, every direction from the start;
- ``hltmt``: HLT-MT (pool of 3 modules over the six high-resource targets, the universal
  layer for the four others), stage high for the first ``--high-updates``, then stage all;
- ``lsmnmt``: LS-MNMT, one module per target language, no gate;
- ``mnmt-staged``: the plain MNMT with HLT-MT's data schedule (the high-resource directions
  only for the same first updates, then all): what the stages alone do, without the pool.

Each system and seed trains (fairseq-train, one thread), then decodes the test set of every
direction (fairseq-generate, beam 5) and is scored (sacreBLEU BLEU and chrF); ``--parallel``
runs go on at once (one per core). What a finished run leaves in ``--results`` (the
hypotheses, the training log, the scores) marks it done: a later call skips it, and an
unfinished run continues from its last fairseq checkpoint (every ``--valid-interval``
updates), so the study can be stopped at any point. The report (written at the end of every call,
rebuilt alone by ``--report-only``) is built from the results folder alone.
"""

import argparse
import functools
import json
import os
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import List, Tuple

from hltmt_plugin import records, text
from hltmt_plugin.atomic_files import copy_file, save_torch, write_text
from hltmt_plugin.cli import DEBMT10, add_version, register
from hltmt_plugin.cli.output import AtomicOutput
from hltmt_plugin.cli.prepare_data import SPLITS, load_pair
from hltmt_plugin.corpora import DEBMT10_HIGH as HIGH, DEBMT10_LANGS as LANGS
from hltmt_plugin.errors import HltmtConfigError, HltmtError, HltmtInputError
from hltmt_plugin.experiments import steps
from hltmt_plugin.experiments.recipe import (
    POOL_SIZE,
    SHORT_SEGMENTS,
    Comparison,
    Hyper,
    prepare_command,
    read_train_log,
    score,
)
from hltmt_plugin.experiments.runs import gate_of, read_gen, read_scores
from hltmt_plugin.experiments.steps import StepFailed, decode, decode_jobs, print_command

SYSTEMS = ("mnmt", "hltmt", "lsmnmt", "mnmt-staged")
# seed 1 of every system first (a first comparison, and the models a user can try), then seeds
# 2 and 3 of MNMT and HLT-MT, then those of the staged MNMT (the schedule's share needs its spread too)
DEFAULT_RUNS = "mnmt:1,hltmt:1,lsmnmt:1,mnmt-staged:1,mnmt:2,hltmt:2,mnmt:3,hltmt:3,mnmt-staged:2,mnmt-staged:3"


@dataclass
class Setting(Hyper):
    """What every system of the study shares: the recipe's hyper-parameters (:class:`Hyper`),
    the segments it keeps, the number of updates and decoding."""

    max_en_words: int = SHORT_SEGMENTS[0]  # a segment pair is kept when its English has at most this many words ...
    max_xx_words: int = SHORT_SEGMENTS[1]  # ... and its target at most this many
    vocab: int = 8000  # joint sentencepiece vocabulary
    pool_size: int = POOL_SIZE  # at most T, HLT-MT's modules
    updates: int = 5000  # every system
    high_updates: int = 2000  # HLT-MT's stage high; mnmt-staged's high-resource-only updates
    valid_interval: int = 500  # validation and checkpoint every this many updates
    beam: int = 5
    gen_len: Tuple[float, int] = (1.5, 10)  # decoding length cap: a * source length + b


say = functools.partial(steps.say, who="study")


class Study:
    """The study's runs over one data folder (``run_dir``) and one results folder."""

    def __init__(self, args, setting: Setting):
        self.args, self.s = args, setting
        self.run_dir = os.path.abspath(args.run_dir)
        self.results = os.path.abspath(args.results or os.path.join(args.run_dir, "results"))
        self.data = os.path.join(self.run_dir, "data", "bin")
        self.comparison = Comparison.from_args(
            args, self.data, langs=LANGS, high=HIGH, to_english=False, max_pool=setting.pool_size
        )
        self.langs, self.high, self.pairs = self.comparison.langs, self.comparison.high, self.comparison.pairs
        self.dry_run = args.dry_run
        self.segment_words = (setting.max_en_words, setting.max_xx_words)
        self._segments = {}

    def segments(self, split: str, lang: str) -> Tuple[List[str], List[str]]:
        """The English and ``lang`` sides of the study's segment pairs of ``split`` (valid or
        test): hltmt-prepare-data's own selection (:func:`~hltmt_plugin.cli.prepare_data.load_pair`,
        ``--segment-words``) of ``--raw``, the text the prepared data was encoded from."""
        if (split, lang) not in self._segments:
            try:
                self._segments[split, lang] = load_pair(self.args.raw, split, lang, None, self.segment_words)
            except HltmtError as error:
                raise StepFailed(str(error)) from None
        return self._segments[split, lang]

    # ---- fairseq command lines (the recipe's) ----------------------------------------------
    def train_commands(self, system, seed):
        """[(name, command)] of one system and seed, in order: one fairseq-train run, two for
        mnmt-staged (the high-resource directions, then all from its checkpoint: the same
        optimizer state and learning-rate schedule, only the data reloaded)."""
        s, save = self.s, self.save_dir(system, seed)

        def train(system, updates, save, *options, **system_options):
            every = [
                "--save-interval-updates",
                str(s.valid_interval),
                "--validate-interval-updates",
                str(s.valid_interval),
            ]
            return self.comparison.train_command(
                system,
                s,
                seed=seed,
                updates=updates,
                save_dir=save,
                log_interval=100,
                options=[*every, "--num-workers", "0", *options],
                **system_options,
            )

        if system == "mnmt-staged":
            first = save + "-high"
            resume = (
                []
                if os.path.exists(os.path.join(save, "checkpoint_last.pt"))
                else ["--restore-file", os.path.join(first, "checkpoint_last.pt"), "--reset-dataloader"]
            )
            return [
                ("train-high", train(system, s.high_updates, first, pairs=self.comparison.high_pairs())),
                ("train", train(system, s.updates, save, *resume)),
            ]
        if system == "hltmt":
            return [("train", train(system, s.updates, save, high_updates=s.high_updates))]
        if system == "lsmnmt":  # a module per target language, every direction from the start
            return [("train", train(system, s.updates, save, ls_langs=self.langs))]
        return [("train", train(system, s.updates, save))]

    def save_dir(self, system, seed):
        return os.path.join(self.run_dir, "models", f"{system}.seed{seed}")

    def decode_dir(self, system, seed):
        return os.path.join(self.run_dir, "decode", f"{system}.seed{seed}.{self.s.updates}")

    def out_dir(self, system, seed):
        return os.path.join(self.results, "runs", f"{system}.seed{seed}")

    def is_done(self, system, seed):
        """Whether the run is finished at this setting's number of updates (a run finished
        at fewer continues from its last checkpoint, when the checkpoints are still there)."""
        path = os.path.join(self.out_dir(system, seed), "scores.json")
        if not os.path.lexists(path):
            return False
        try:
            return read_scores(path)["setting"]["updates"] == self.s.updates
        except HltmtInputError as error:
            raise StepFailed(f"{error}: remove the run's results folder to run it again") from None

    # ---- one run: train, decode, score -----------------------------------------------------
    def log_path(self, system, seed, name):
        return os.path.join(self.run_dir, "logs", f"{system}.seed{seed}.{name}.log")

    def run(self, system, seed, on_step=lambda name: None):
        """Train, decode and score one system and seed (each part resumes where it stopped);
        ``on_step(name)`` is told of each part as it starts (a training command's name, then
        "decode")."""
        t0 = time.time()
        for name, cmd in self.train_commands(system, seed):
            on_step(name)
            if self.dry_run:
                print_command(cmd)
                continue
            updates = str(self.s.high_updates if name == "train-high" else self.s.updates)
            done = os.path.join(self.save_dir(system, seed) + ("-high" if name == "train-high" else ""), ".finished")
            if not os.path.exists(done) or open(done).read() != updates:
                steps.run_quiet(cmd, self.log_path(system, seed, name), env=one_thread_env())
                write_text(done, updates)
        if self.dry_run:
            return self.decode(system, seed)
        train_seconds = time.time() - t0
        on_step("decode")
        self.decode(system, seed)
        self.score(system, seed, train_seconds)

    def decode(self, system, seed):
        """The test set of every direction, beam 5."""
        self.decode_to(
            self.decode_dir(system, seed),
            os.path.join(self.save_dir(system, seed), "checkpoint_last.pt"),
            system,
            "test",
        )

    def decode_to(self, folder, ckpt, system, subset):
        """Every direction of ``subset`` by ``ckpt`` into ``folder``/<pair>.gen, one
        fairseq-generate after another in one process, at one thread."""
        todo = decode_jobs({system: ckpt}, self.pairs, lambda _: folder)
        common = self.comparison.generate_args(subset=subset, gen_len=self.s.gen_len, beam=self.s.beam)
        decode(todo, common, self.data, 1, folder + ".logs", dry_run=self.dry_run, env=one_thread_env(), echo=None)

    def score(self, system, seed, train_seconds):
        """Hypotheses and references as text, sacreBLEU's BLEU and chrF per direction, the
        training logs and (HLT-MT) the gate: written to the results folder, scores.json last."""
        out = self.out_dir(system, seed)
        os.makedirs(out, exist_ok=True)
        scores = {}
        for pair in self.pairs:
            hyps, _ = read_gen(os.path.join(self.decode_dir(system, seed), f"{pair}.gen"))
            sources, refs = self.segments("test", pair[3:])  # the text, not the pieces'
            if len(hyps) != len(refs):
                raise StepFailed(f"{system}:{seed} {pair}: {len(hyps)} hypotheses for {len(refs)} references")
            write_lines(os.path.join(out, f"{pair}.hyp"), hyps)
            write_reference(os.path.join(self.results, "refs", f"{pair}.ref"), refs)
            write_reference(os.path.join(self.results, "refs", f"{pair}.en"), sources)
            scores[pair] = {**{k: round(v, 2) for k, v in score(hyps, refs).items()}, "sentences": len(refs)}
        for name, _ in self.train_commands(system, seed):
            log = self.log_path(system, seed, name)
            if os.path.exists(log):
                write_lines(os.path.join(out, f"{name}.log"), open(log, encoding="utf-8").read().splitlines())
        if system == "hltmt":
            write_gate(os.path.join(self.save_dir(system, seed), "checkpoint_last.pt"), os.path.join(out, "gate.json"))
        if seed == 1:
            export_model(
                os.path.join(self.save_dir(system, seed), "checkpoint_last.pt"),
                self.data,
                os.path.join(self.results, "models"),
                system,
            )
        summary = {
            "system": system,
            "seed": seed,
            "high": self.high,
            "scores": scores,
            "setting": asdict(self.s),
            "wall_seconds": round(train_seconds),
        }
        write_lines(os.path.join(out, "scores.json"), [json.dumps(summary, indent=1)])


def calibrate(study: Study, runs, every: int):
    """Validation BLEU of the runs' checkpoints every ``every`` updates (beam 5, every
    direction), to results/calibration.csv: how the models learn, measured on the validation
    split only (the test split is scored once, at the end of each run)."""
    path = os.path.join(study.results, "calibration.csv")
    rows = (
        [line.split(",") for line in open(path, encoding="utf-8").read().split("\n")[1:-1]]
        if os.path.exists(path)
        else []
    )
    seen = {(r[0], r[1], r[2]) for r in rows}
    for system, seed in runs:
        folder = study.save_dir(system, seed)
        found = sorted(
            int(m.group(1))
            for m in map(
                re.compile(r"checkpoint_\d+_(\d+)\.pt$").search, os.listdir(folder) if os.path.isdir(folder) else []
            )
            if m
        )
        for updates in [u for u in found if u % every == 0 and (system, str(seed), str(u)) not in seen]:
            ckpt = next(p for p in os.listdir(folder) if p.endswith(f"_{updates}.pt"))
            gen = os.path.join(study.run_dir, "calibration", f"{system}.seed{seed}.{updates}")
            study.decode_to(gen, os.path.join(folder, ckpt), system, "valid")
            for pair in study.pairs:
                hyps, _ = read_gen(os.path.join(gen, f"{pair}.gen"))
                _, refs = study.segments("valid", pair[3:])
                rows.append([system, str(seed), str(updates), pair, f"{score(hyps, refs)['bleu']:.2f}"])
            say(f"calibration: {system}:{seed} at {updates} updates decoded (validation split)")
            write_lines(path, ["system,seed,updates,direction,valid_bleu"] + [",".join(r) for r in rows])


def export_model(checkpoint, data, out, name):
    """``checkpoint``'s weights in half precision, with its stored options and no optimizer
    state, as ``out/name.pt``, beside the data's dictionaries and sentencepiece model (once):
    what hltmt-translate, the Python API and fairseq-generate need, a few MB."""
    from hltmt_plugin.compat.safe_loading import load_state

    state = load_state(checkpoint)
    weights = {k: (v.half() if v.is_floating_point() else v) for k, v in state["model"].items()}
    slim = {
        "cfg": state["cfg"],
        "args": state.get("args"),
        "model": weights,
        "optimizer_history": state.get("optimizer_history", []),
        "extra_state": {},
    }
    os.makedirs(out, exist_ok=True)
    for name_ in sorted(os.listdir(data)):
        if name_.startswith("dict.") or name_ == "dict_fingerprint.json":
            copy_file(os.path.join(data, name_), os.path.join(out, name_))
    copy_file(os.path.join(os.path.dirname(data), "spm", "spm.model"), os.path.join(out, "spm.model"))
    target = os.path.join(out, f"{name}.pt")
    save_torch(slim, target)
    return target


def one_thread_env():
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.setdefault("PYTHONWARNINGS", "ignore")
    return env


def write_lines(path, lines):
    """``lines`` to ``path``, one per line, written whole or not at all."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with AtomicOutput(path) as f:
        f.writelines(line + "\n" for line in lines)


def write_reference(path, refs):
    """The references of one direction: written once, the same for every run after that."""
    if os.path.exists(path):
        if text.read_lines(path) != refs:
            raise StepFailed(f"{path}: this run's references differ from the study's (another data selection?)")
        return
    write_lines(path, refs)


def write_gate(checkpoint, path):
    """The HLT-MT gate p(module | language) and the routing map of ``checkpoint``, as JSON."""
    probs, langs, chosen, _ = gate_of(checkpoint)
    write_lines(
        path, [json.dumps({"langs": langs, "probs": [[round(p, 4) for p in row] for row in probs], "map": chosen})]
    )


def prepare(study: Study):
    """hltmt-prepare-data of the study's segment pairs (``--segment-words``: joint
    sentencepiece, binarized), once; the pairs kept per split and language in data.json."""
    data = os.path.join(study.run_dir, "data")
    cmd = prepare_command(
        study.args.raw,
        data,
        study.langs,
        vocab=study.s.vocab,
        segment_words=study.segment_words,
        max_train=study.args.max_train,
    )
    if study.dry_run:
        print_command(cmd)
        return
    marker = os.path.join(study.run_dir, ".done-prepare")
    made = {
        "raw": os.path.abspath(study.args.raw),
        "langs": study.langs,
        "vocab": study.s.vocab,
        "max_train": study.args.max_train,
        "max_en_words": study.s.max_en_words,
        "max_xx_words": study.s.max_xx_words,
    }
    if os.path.exists(marker):
        check_prepared(marker, made)
        return
    steps.run_quiet(cmd, os.path.join(study.run_dir, "logs", "prepare.log"), env=one_thread_env())
    kept = {split: {lang: count_lines(data, split, lang) for lang in study.langs} for split in SPLITS}
    say("selected: " + ", ".join(f"{split} {sum(n.values())} pairs" for split, n in kept.items()))
    write_lines(os.path.join(study.results, "data.json"), [json.dumps(kept, indent=1)])
    write_text(marker, json.dumps(made, sort_keys=True) + "\n")


def count_lines(data: str, split: str, lang: str) -> int:
    """The segment pairs hltmt-prepare-data kept of en-``lang`` in ``split`` (its encoded text's lines)."""
    with open(os.path.join(data, "spm", f"{split}.en-{lang}.en"), "rb") as f:
        return sum(1 for _ in f)


# the run folder's .done-prepare: the options its data was prepared with (prepare writes every field)
PREPARED = records.Record(
    {
        "raw": records.Text(min_len=1),
        "langs": records.ListOf(records.Text(min_len=1, max_len=20), min_len=1, max_len=1000),
        "vocab": records.Int(low=1),
        "max_train": records.Int(low=0),
        "max_en_words": records.Int(low=1),
        "max_xx_words": records.Int(low=1),
    }
)


def check_prepared(marker: str, made: dict) -> None:
    """A run folder's data was prepared with these options (a folder prepared otherwise would be
    trained on silently, and its report would name the new options)."""
    try:
        was = records.read_json(marker, PREPARED, "preparation record")
    except HltmtInputError as error:
        raise StepFailed(
            f"{error}: give another --run-dir, or remove the run folder's data to prepare it again"
        ) from None
    differ = [f"{k}: prepared {was[k]}, asked {made[k]}" for k in sorted(made) if was.get(k) != made[k]]
    if differ:
        raise StepFailed(
            f"the run folder {os.path.dirname(marker)} holds data prepared otherwise ({'; '.join(differ)}): "
            "give another --run-dir, or the options it was prepared with"
        )


def parse_runs(text: str) -> List[Tuple[str, int]]:
    runs = []
    for item in filter(None, text.split(",")):
        system, _, seed = item.partition(":")
        if system not in SYSTEMS or not seed.isdigit():
            raise ValueError(f"--runs {item!r}: expected SYSTEM:SEED with SYSTEM one of {', '.join(SYSTEMS)}")
        if (system, int(seed)) in runs:
            raise ValueError(f"--runs names {system}:{int(seed)} twice: both would train one folder at once")
        runs.append((system, int(seed)))
    return runs


def watch(study: Study, active: dict, stop: threading.Event, every: float):
    """Every ``every`` seconds, one line per running run: updates so far and the last validation loss."""
    while not stop.wait(every):
        parts = []
        for (system, seed), name in sorted(active.items()):
            if name == "decode":
                parts.append(f"{system}:{seed} decoding")
                continue
            log = read_train_log(study.log_path(system, seed, name))
            updates, loss = log.updates, log.valid_loss
            high = name == "train-high"
            parts.append(
                f"{system}:{seed} {updates}/{study.s.high_updates if high else study.s.updates} updates"
                + (" (high-resource directions only)" if high else "")
                + (f", valid loss {loss:.3f}" if loss else "")
            )
        if parts:
            say("; ".join(parts))


def run_all(study: Study, runs, parallel: int, every: float):
    """The runs, ``parallel`` at a time; returns the failures [(run, message)]."""
    active, failures = {}, []

    def one(system, seed):
        try:
            if study.is_done(system, seed):  # (a results record that is not one: a failure of the run)
                say(f"{system}:{seed} already finished ({study.out_dir(system, seed)})")
                return
            say(f"{system}:{seed} starts")
            study.run(system, seed, on_step=lambda name: active.__setitem__((system, seed), name))
            say(f"{system}:{seed} finished: " + summary_line(study, system, seed))
        except StepFailed as error:
            failures.append(((system, seed), str(error)))
            say(f"{system}:{seed} failed: {error}")
        finally:
            active.pop((system, seed), None)

    stop = threading.Event()
    watcher = threading.Thread(target=watch, args=(study, active, stop, every), daemon=True)
    watcher.start()
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        list(pool.map(lambda run: one(*run), runs))
    stop.set()
    return failures


def summary_line(study, system, seed):
    scores = read_scores(os.path.join(study.out_dir(system, seed), "scores.json"))["scores"]
    high = [v["bleu"] for k, v in scores.items() if k[3:] in study.high]
    low = [v["bleu"] for k, v in scores.items() if k[3:] not in study.high]
    return f"BLEU high-resource mean {sum(high) / len(high):.1f}, low-resource mean {sum(low) / len(low):.1f}"


def build_parser():
    from hltmt_plugin.hub.arguments import count_option
    from hltmt_plugin.paths import READ_FOLDER, WORK_FOLDER, ArgumentParser, path_option

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    path_option(
        p,
        "--raw",
        kind=READ_FOLDER,
        default=DEBMT10,
        help="raw parallel data, {split}.en-XX.{en,XX} (default: DebMT-10)",
    )
    path_option(
        p,
        "--run-dir",
        kind=WORK_FOLDER,
        default=os.path.join("runs", "cpu-study"),
        help="data, checkpoints and logs (default: runs/cpu-study)",
    )
    path_option(
        p,
        "--results",
        kind=WORK_FOLDER,
        default=None,
        help="scores, hypotheses, logs, report and the seed-1 models (default: RUN_DIR/results; the "
        "recorded study of a source checkout is docs/results/cpu-study, written only when named here)",
    )
    p.add_argument("--langs", default=None, help="target languages (default: the ten of DebMT-10)")
    p.add_argument("--high", default=None, help="high-resource targets (default: DebMT-10's fr,de,cs,tr,fi,et)")
    p.add_argument("--vocab", type=int, default=None, help=f"joint sentencepiece vocabulary (default {Setting.vocab})")
    p.add_argument(
        "--max-train",
        type=int,
        default=0,
        help="at most N selected training pairs per language (default: all; a quick look at the pipeline)",
    )
    p.add_argument("--runs", default=DEFAULT_RUNS, help=f"SYSTEM:SEED runs in order (default: {DEFAULT_RUNS})")
    p.add_argument("--parallel", type=count_option, default=2, help="runs at once, one thread each (default: 2)")
    p.add_argument("--progress", type=float, default=120, help="seconds between progress lines (default: 120)")
    p.add_argument("--updates", type=int, default=None, help=f"updates of every run (default {Setting.updates})")
    p.add_argument(
        "--high-updates",
        type=int,
        default=None,
        help=f"HLT-MT's stage high, mnmt-staged's high-resource-only updates (default {Setting.high_updates})",
    )
    p.add_argument(
        "--calibrate",
        type=int,
        default=0,
        metavar="N",
        help="only decode the validation split with the runs' checkpoints of every N updates so far "
        "(results/calibration.csv), then stop",
    )
    p.add_argument("--report-only", action="store_true", help="rebuild the report from the results folder")
    p.add_argument("--dry-run", action="store_true", help="print every command, run nothing")
    return add_version(p)


def check_options(p, args):
    """The --runs as [(system, seed)] and the study of the options (its --langs and --high read
    once, by the recipe); stops with argparse's one-line error on options that cannot work."""
    try:
        runs = parse_runs(args.runs)
    except ValueError as error:
        p.error(str(error))
    if args.parallel < 1:
        p.error("--parallel must be at least 1")
    setting = Setting(
        **{
            k: v
            for k, v in (("updates", args.updates), ("high_updates", args.high_updates), ("vocab", args.vocab))
            if v is not None
        }
    )
    try:
        study = Study(args, setting)
    except HltmtConfigError as error:
        p.error(str(error))
    if not args.report_only and not args.dry_run:
        missing = [x for x in study.langs if not os.path.isfile(os.path.join(args.raw, f"train.en-{x}.{x}"))]
        if missing:
            p.error(f"--raw {args.raw} has no data for {','.join(missing)} (train.en-XX.XX)")
    return runs, study


def print_plan(study: Study, runs):
    """--dry-run: every command of the preparation and of each run, printed."""
    prepare(study)
    for run in runs:
        print(f"# {run[0]} seed {run[1]}")
        study.run(*run)


def run_study(study: Study, runs, args):
    """The preparation and the runs (unless --report-only), then the report; the exit code."""
    failures = []
    if not args.report_only:
        try:
            prepare(study)
        except StepFailed as error:
            print(f"hltmt-study: error: {error}", file=sys.stderr)
            return 1
        failures = run_all(study, runs, args.parallel, args.progress)
    from hltmt_plugin.experiments.study_report import build_report

    try:
        build_report(study.results)
    except HltmtError as error:  # a result file that is not the record a run writes
        print(f"hltmt-study: error: {error}", file=sys.stderr)
        return 1
    for (system, seed), message in failures:
        print(f"hltmt-study: error: {system}:{seed}: {message}", file=sys.stderr)
    return 1 if failures else 0


def main(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    runs, study = check_options(p, args)
    register()  # torch and fairseq, once the arguments are checked
    if args.dry_run:
        print_plan(study, runs)
        return 0
    if args.calibrate:
        calibrate(study, runs, args.calibrate)
        return 0
    return run_study(study, runs, args)


if __name__ == "__main__":
    sys.exit(main())
