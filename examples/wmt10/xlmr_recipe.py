#!/usr/bin/env python3
"""The HLT-MT paper's headline setting: every system initialised from XLM-R.

    python examples/wmt10/xlmr_recipe.py --raw RUN/clean --xlmr xlmr.base --run-dir RUN/xlmr --gpu --ngpu 8
    python examples/wmt10/xlmr_recipe.py --raw RUN/clean --xlmr xlmr.base --gpu --ngpu 8 --dry-run

``--dry-run`` prints every command the recipe would run (hltmt-prepare-data, xlmr_init.py, each
fairseq-train run, one fairseq-generate line per decoded direction, hltmt-report), one per line
as a shell would run it, notes as ``#`` lines, and runs nothing (``--raw`` and ``--xlmr`` need
not exist yet; ``--gpu`` is taken as given).

On GPUs every fairseq-train run gets ``--distributed-world-size --ngpu`` (fairseq would
otherwise use every GPU it sees) and, with more than one GPU, ``--ddp-backend legacy_ddp``,
which all-reduces every gradient so that the task can leave the modules no worker used
(pool modules, the gate on hard steps) out of the update. Mixed precision is ``--amp`` by
default (float16 autocast over float32 weights); ``--fp16`` (the authors' V100 setting) is
``--fp16 --fp16-no-flatten-grads``: fairseq's fp16 optimizer with one float32 copy per
parameter, since a bare ``--fp16`` steps one flat copy of all weights and would move the idle
modules. fairseq 0.12's ``--bf16`` is its TPU path and is not offered.

``--xlmr`` is fairseq's XLM-R base release folder (``model.pt``, ``dict.txt``,
``sentencepiece.bpe.model``; ``examples/wmt10/run_xlmr.sh`` fetches it on a machine with
internet access; nothing here downloads). Steps, each announced, logged under RUN/logs/ and
marked done (a rerun resumes after the last completed step):

1. ``prepare``: ``hltmt-prepare-data --spm-model XLMR/sentencepiece.bpe.model --dict
   XLMR/dict.txt``: every split encoded with XLM-R's own sentencepiece model and binarized
   with its fixed dictionary (the task appends the language tokens ``__xx__``).
2. ``init_mnmt``: the MNMT baseline is fairseq's plain ``transformer`` of the same shape;
   ``xlmr_init.py`` copies XLM-R into its encoder with the plugin's loader and saves the
   checkpoint it starts from (``--finetune-from-model``). HLT-MT and LS-MNMT take
   ``--pretrained-xlmr-checkpoint`` themselves.
3. ``train_<system>.t<k>``: MNMT, LS-MNMT (one module per target language, no gate) and HLT-MT
   (stage high for ``--high-updates``, then stage all, in one schedule), all with the authors'
   optimiser: Adam (0.9, 0.98), lr ``--lr`` (5e-4 in the paper's text; the authors' code
   used 3e-4), inverse_sqrt with 4,000 warm-up updates, label smoothing 0.1, dropout 0.1,
   4,096 tokens per GPU and 64 GPUs (``--update-freq`` makes up the difference: 64 / --ngpu).
   The temperature of the sampling over directions rises from ``--temperature-start`` (1)
   to ``--temperature-end`` (5) over the first ``--temperature-epochs`` (5) epochs, as in the
   paper: fairseq 0.12's ``--sampling-temperature`` is one number per run, so each of those
   epochs is one fairseq-train run (``--max-epoch k``, temperature T_k, resuming from the
   previous run's ``checkpoint_last.pt`` with its optimizer, learning rate, stage and map),
   and the last run trains on at the final temperature to ``--max-update``.
4. ``decode``: every direction of every system, beam 5, ``--remove-bpe sentencepiece``, fp16
   on a GPU unless ``--precision fp32`` (fairseq-generate's own main, many directions per process: hltmt_plugin/cli/decode.py).
5. ``report``: ``hltmt-report`` (sacreBLEU BLEU and chrF, HLT-MT - MNMT, gate heatmap).
"""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, ROOT)  # run by path from a checkout: the plugin beside it
from hltmt_plugin.corpora import (  # noqa: E402
    WMT10_HIGH as HIGH_LIST,
    WMT10_LANGS as LANGS_LIST,
)
from hltmt_plugin.errors import HltmtConfigError  # noqa: E402
from hltmt_plugin.experiments.recipe import Comparison, Hyper, prepare_command, update_freq  # noqa: E402
from hltmt_plugin.experiments.steps import (  # noqa: E402
    BF16_REFUSED,
    NGPU_HELP,
    PRECISION_FLAGS,
    PRECISION_HELP,
    StepFailed,
    decode,
    decode_jobs,
    gpu_flags,
    reader_gone,
    report_command,
    run_logged,
    run_report,
    run_steps,
    say,
)

WMT10_LANGS = ",".join(LANGS_LIST)
WMT10_HIGH = ",".join(HIGH_LIST)  # the paper's high-resource split
SYSTEMS = ("mnmt", "lsmnmt", "hltmt")
# fairseq's transformer built like hltmt_transformer_xlmr_base, without the SLP (MNMT)
MNMT_MODEL = [
    "--encoder-learned-pos",
    "--decoder-learned-pos",
    "--layernorm-embedding",
    "--no-scale-embedding",
    "--activation-fn",
    "gelu",
    "--max-source-positions",
    "512",
    "--max-target-positions",
    "512",
    "--share-all-embeddings",
]
STOPPED_AT_MAX_UPDATE = "Stopping training due to num_updates"
# fairseq 0.12's import-time warnings (hydra, pin_memory, autocast) say nothing about the run
QUIET = "ignore::UserWarning,ignore::FutureWarning,ignore::DeprecationWarning"


def temperatures(start: float, end: float, epochs: int):
    """T_1..T_E: linear from start (epoch 1) to end (epoch E)."""
    if epochs <= 1:
        return [end]
    return [start + (end - start) * k / (epochs - 1) for k in range(epochs)]


class Recipe:
    def __init__(self, args):
        self.args = args
        self.run_dir = os.path.abspath(args.run_dir)
        self.data = os.path.join(self.run_dir, "data", "bin")
        self.logs = os.path.join(self.run_dir, "logs")
        self.comparison = Comparison.from_args(
            args, self.data, langs=LANGS_LIST, high=HIGH_LIST, cpu=not args.gpu, max_pool=args.pool_size
        )
        self.langs, self.high, self.directions = self.comparison.langs, self.comparison.high, self.comparison.pairs
        self.systems = [s for s in args.systems.split(",") if s]
        self.xlmr = os.path.abspath(args.xlmr)
        self.pretrained = os.path.join(self.xlmr, "model.pt")
        self.update_freq, self.batch_note = update_freq(args.ngpu, args.update_freq or 0)
        self.precision = args.precision if args.precision != "auto" else ("amp" if args.gpu else "fp32")
        self.dry_run = args.dry_run

    def execute(self, cmd, log_path):
        """Run one command of a step (or print it, with --dry-run)."""
        run_logged(cmd, log_path, dry_run=self.dry_run)

    # ---- fairseq command lines ----------------------------------------------------------
    def shape(self):
        """XLM-R base's encoder (or the --encoder-* sizes given) and a decoder of the same width."""
        a = self.args
        return [
            "--encoder-layers",
            str(a.encoder_layers),
            "--encoder-embed-dim",
            str(a.embed_dim),
            "--encoder-ffn-embed-dim",
            str(a.ffn_dim),
            "--encoder-attention-heads",
            str(a.heads),
            "--decoder-layers",
            str(a.decoder_layers),
            "--decoder-embed-dim",
            str(a.embed_dim),
            "--decoder-ffn-embed-dim",
            str(a.ffn_dim),
            "--decoder-attention-heads",
            str(a.heads),
        ]

    def model_options(self, system):
        """The model's options beside the recipe's: XLM-R's shape; fairseq's transformer built
        like hltmt_transformer_xlmr_base (without the SLP) for MNMT, the XLM-R weights to start
        HLT-MT and LS-MNMT from."""
        if system == "mnmt":
            return [*self.shape(), *MNMT_MODEL]
        pretrained = ["--pretrained-xlmr-checkpoint", self.pretrained]
        return [*self.shape(), *pretrained, *(["--pretrained-xlmr-decoder"] if self.args.pretrained_decoder else [])]

    def hyper(self, temperature=1.0):
        a = self.args
        return Hyper(
            model="xlmr_base",
            lr=a.lr,
            warmup=a.warmup,
            max_tokens=a.max_tokens,
            temperature=temperature,
        )

    def train_command(self, system, temperature, *options):
        """One system's fairseq-train run (the recipe's) at this sampling temperature."""
        a = self.args
        precision = gpu_flags(self.precision, a.ngpu) if a.gpu else PRECISION_FLAGS[self.precision]
        own = {
            "mnmt": {},
            "lsmnmt": {"ls_langs": ["en"] + self.langs},
            "hltmt": {"high_updates": a.high_updates},
        }[system]
        return self.comparison.train_command(
            system,
            self.hyper(temperature),
            seed=a.seed,
            updates=a.max_update,
            save_dir=self.save_dir(system),
            log_interval=a.log_interval,
            options=[
                *self.model_options(system),
                *(["--finetune-from-model", self.init_path()] if system == "mnmt" else []),
                "--update-freq",
                str(self.update_freq),
                *precision,
                *options,
            ],
            **own,
        )

    def save_dir(self, system):
        return os.path.join(self.run_dir, "models", system)

    def init_path(self):
        return os.path.join(self.run_dir, "models", "mnmt_init_from_xlmr.pt")

    # ---- steps ------------------------------------------------------------------------
    def prepare(self):
        a = self.args
        xlmr = [
            "--spm-model",
            os.path.join(self.xlmr, "sentencepiece.bpe.model"),
            "--dict",
            os.path.join(self.xlmr, "dict.txt"),
        ]
        cmd = prepare_command(
            a.raw,
            os.path.join(self.run_dir, "data"),
            self.langs,
            options=xlmr,
            max_train=a.max_train,
            max_train_lang=a.max_train_lang,
            max_valid=a.max_valid,
            max_test=a.max_test,
        )
        self.execute(cmd, os.path.join(self.logs, "prepare.log"))

    def init_mnmt(self):
        """The baseline's model and task built from XLM-R (the optimizer it saves is never used:
        fine-tuning resets it)."""
        a = self.args
        init = [
            self.data,
            *self.comparison.system_args("mnmt", self.hyper()),
            *self.model_options("mnmt"),
            "--label-smoothing",
            "0.1",
            "--optimizer",
            "adam",
            "--lr",
            str(a.lr),
            "--max-tokens",
            str(a.max_tokens),
            "--seed",
            str(a.seed),
        ]
        init = [x for x in init if x != "--cpu"]  # xlmr_init.py builds on the CPU itself
        decoder = ["--decoder"] if self.args.pretrained_decoder else []
        self.execute(
            [
                sys.executable,
                os.path.join(HERE, "xlmr_init.py"),
                "--pretrained",
                self.pretrained,
                "--out",
                self.init_path(),
                *decoder,
                "--",
                *init,
            ],
            os.path.join(self.logs, "init_mnmt.log"),
        )

    def train(self, system, k, temperature, last):
        """Epoch k of the temperature schedule (the last one trains on to --max-update)."""
        if not self.dry_run and k > 1 and self.reached_max_update(system, k - 1):
            say(f"{system}: --max-update was reached in epoch {k - 1}; nothing left to train")
            open(os.path.join(self.logs, f"train_{system}.t{k}.log"), "w").write(STOPPED_AT_MAX_UPDATE + " (earlier)\n")
            return
        epochs = [] if last else ["--max-epoch", str(k)]
        self.execute(
            self.train_command(system, temperature, *epochs), os.path.join(self.logs, f"train_{system}.t{k}.log")
        )
        if last and not self.dry_run:  # one log per system for the report's last validation
            with open(
                os.path.join(self.logs, f"train_{system}.seed{self.args.seed}.log"), "w", encoding="utf-8"
            ) as out:
                for j in range(1, k + 1):
                    out.write(open(os.path.join(self.logs, f"train_{system}.t{j}.log"), encoding="utf-8").read())

    def reached_max_update(self, system, k):
        """Whether epoch k's training log says fairseq stopped at --max-update."""
        log = os.path.join(self.logs, f"train_{system}.t{k}.log")
        return os.path.exists(log) and STOPPED_AT_MAX_UPDATE in open(log, encoding="utf-8").read()

    def decode(self):
        """Every direction of every system with fairseq-generate's own main, many directions per
        process (hltmt_plugin/cli/decode.py); a direction whose .gen exists is not decoded again."""
        a = self.args
        folder = os.path.join(self.run_dir, "decode", "{}", f"seed{a.seed}")
        checkpoints = {system: os.path.join(self.save_dir(system), "checkpoint_last.pt") for system in self.systems}
        jobs = decode_jobs(checkpoints, self.directions, folder.format)
        common = self.comparison.generate_args(
            max_tokens=a.decode_max_tokens,
            gen_len=(a.max_len_a, a.max_len_b),
            fp16=a.gpu and self.precision != "fp32",
        )
        plan = ("decode", folder.format("SYSTEM") + "/SRC-TGT.gen")
        logs = os.path.join(self.logs, "decode")
        decode(jobs, common, self.data, a.decode_workers, logs, dry_run=self.dry_run, plan=plan)

    def report(self):
        cmd = report_command(
            os.path.join(self.run_dir, "decode"),
            os.path.join(self.run_dir, "report"),
            high=self.high,
            title=self.args.title,
            baseline="mnmt" if "mnmt" in self.systems else self.systems[0],
            gate_checkpoint=(
                os.path.join(self.save_dir("hltmt"), "checkpoint_last.pt") if "hltmt" in self.systems else None
            ),
            valid_logs=[f"{system}={self.logs}/train_{system}.seed*.log" for system in self.systems],
            options=["--paper-rows", "xlmr"],  # the paper's rows of systems initialised from XLM-R
            note=None
            if self.args.gpu
            else "Trained on CPU: far from converged; the figures show that the recipe runs end to end, "
            "not the quality of the method.",
        )
        run_report(cmd, os.path.join(self.logs, "report.log"), self.dry_run)

    def steps(self):
        a = self.args
        steps = [("prepare", self.prepare, ())]
        if "mnmt" in self.systems:
            steps.append(("init_mnmt", self.init_mnmt, ()))
        schedule = temperatures(a.temperature_start, a.temperature_end, a.temperature_epochs)
        for system in self.systems:
            for k, t in enumerate(schedule, 1):
                steps.append((f"train_{system}.t{k}", self.train, (system, k, t, k == len(schedule))))
        return steps + [("decode", self.decode, ()), ("report", self.report, ())]

    def run(self):
        a = self.args
        steps = self.steps()
        gpus = f"{a.ngpu} GPU(s), {self.precision}" if a.gpu else f"CPU, {self.precision}"
        schedule = temperatures(a.temperature_start, a.temperature_end, a.temperature_epochs)
        print(
            f"{'# ' if self.dry_run else ''}xlmr recipe: {gpus}; systems {','.join(self.systems)}, "
            f"{len(self.directions)} directions, high {','.join(self.high)}; temperature "
            f"{', '.join(f'{t:g}' for t in schedule)} over the first epochs; lr {a.lr}, {a.max_tokens} tokens x "
            f"update-freq {self.update_freq}; run folder {self.run_dir}",
            flush=True,
        )
        if self.batch_note:
            print(f"{'# ' if self.dry_run else ''}xlmr recipe: {self.batch_note}", flush=True)
        if not self.dry_run and not os.environ.get("PYTHONWARNINGS"):
            os.environ["PYTHONWARNINGS"] = QUIET
        run_steps(steps, self.run_dir, self.dry_run)


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    def _get_help_string(self, action):
        """Each option's help with its default, unless the help says its default itself."""
        return action.help if "default:" in (action.help or "") else super()._get_help_string(action)


def check(args):
    if args.bf16:
        return BF16_REFUSED
    if args.gpu and args.cpu:
        return "--gpu and --cpu exclude each other"
    if args.fp16 and args.precision not in ("auto", "fp16"):
        return f"--fp16 and --precision {args.precision} say different things: give one"
    if args.fp16:
        args.precision = "fp16"
    if not args.gpu and args.precision == "fp16":
        return "--fp16 needs --gpu"
    if not args.gpu and args.ngpu > 1:
        return f"--ngpu {args.ngpu} needs --gpu"
    if not args.dry_run:  # a dry run may come before the data and XLM-R are there
        if not os.path.isdir(args.raw):
            return f"--raw {args.raw} is not a folder"
        for name in ("model.pt", "dict.txt", "sentencepiece.bpe.model"):
            if not os.path.isfile(os.path.join(args.xlmr, name)):
                return (
                    f"--xlmr {args.xlmr} has no {name} (fairseq's XLM-R release folder holds model.pt, "
                    "dict.txt, sentencepiece.bpe.model)"
                )
    unknown = [s for s in args.systems.split(",") if s and s not in SYSTEMS]
    if unknown:
        return f"--systems: unknown {','.join(unknown)} (choose from {','.join(SYSTEMS)})"
    if not 0 < args.high_updates < args.max_update:
        return f"--high-updates must lie between 0 and --max-update {args.max_update}, got {args.high_updates}"
    if args.temperature_epochs < 1 or args.temperature_start <= 0 or args.temperature_end <= 0:
        return "--temperature-epochs must be at least 1 and the temperatures positive"
    if args.ngpu < 1:
        return f"--ngpu must be at least 1, got {args.ngpu}"
    return None


def build_parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument(
        "--raw", required=True, help="cleaned parallel data, {split}.en-XX.{en,XX} (examples/wmt10/clean.py)"
    )
    p.add_argument("--xlmr", required=True, help="XLM-R folder: model.pt, dict.txt, sentencepiece.bpe.model")
    p.add_argument("--run-dir", default=os.path.join(ROOT, "runs", "wmt10-xlmr"), help="where everything goes")
    p.add_argument("--langs", default=WMT10_LANGS, help="non-English languages")
    p.add_argument(
        "--high",
        default=None,
        help=f"high-resource languages (HLT-MT's pool, stage high; default: the paper's, {WMT10_HIGH}, among --langs)",
    )
    p.add_argument("--pool-size", type=int, default=3, help="T, HLT-MT's pool modules")
    p.add_argument("--systems", default=",".join(SYSTEMS), help="systems to train, all from the same XLM-R")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-update", type=int, default=100000, help="updates of every system")
    p.add_argument("--high-updates", type=int, default=50000, help="HLT-MT: updates of stage high")
    p.add_argument("--lr", type=float, default=5e-4, help="peak learning rate (paper: 5e-4; authors' code: 3e-4)")
    p.add_argument("--warmup", type=int, default=4000, help="inverse_sqrt warm-up updates")
    p.add_argument("--max-tokens", type=int, default=4096, help="tokens per GPU batch")
    p.add_argument("--ngpu", type=int, default=1, help=NGPU_HELP + "; sets --update-freq nearest to 64 / --ngpu")
    p.add_argument("--update-freq", type=int, default=None, help="override the 64/--ngpu accumulation")
    p.add_argument("--temperature-start", type=float, default=1.0)
    p.add_argument("--temperature-end", type=float, default=5.0)
    p.add_argument("--temperature-epochs", type=int, default=5, help="epochs over which the temperature rises")
    p.add_argument("--encoder-layers", type=int, default=12, help="must fit the XLM-R checkpoint (base: 12)")
    p.add_argument("--embed-dim", type=int, default=768, help="(XLM-R base: 768)")
    p.add_argument("--ffn-dim", type=int, default=3072, help="(XLM-R base: 3072; also the SLP's inner size)")
    p.add_argument("--heads", type=int, default=12, help="(XLM-R base: 12)")
    p.add_argument("--decoder-layers", type=int, default=6, help="(the paper: 6)")
    p.add_argument(
        "--pretrained-decoder",
        action="store_true",
        help="also initialise the decoder layers' self-attention and FFN from XLM-R",
    )
    p.add_argument("--max-train", type=int, default=None, help="first N training lines per pair (tests)")
    p.add_argument("--max-train-lang", default=None, metavar="XX=N,...", help="per-language --max-train")
    p.add_argument("--max-valid", type=int, default=None, help="first N valid lines per pair")
    p.add_argument("--max-test", type=int, default=None, help="first N test lines per pair")
    p.add_argument("--decode-max-tokens", type=int, default=8000)
    p.add_argument("--decode-workers", type=int, default=1, help="decoding processes running at once")
    p.add_argument("--max-len-a", type=float, default=1.5, help="decoding: at most a * source length + b tokens")
    p.add_argument("--max-len-b", type=int, default=10)
    p.add_argument("--log-interval", type=int, default=100)
    p.add_argument("--title", default="WMT-10, all systems from XLM-R")
    p.add_argument("--gpu", action="store_true", help="train and decode on GPUs (default: CPU)")
    p.add_argument("--cpu", action="store_true", help="train and decode on the CPU (the default)")
    p.add_argument("--precision", choices=["auto", *PRECISION_FLAGS], default="auto", help=PRECISION_HELP)
    p.add_argument("--fp16", action="store_true", help="--precision fp16 (the authors' V100s)")
    p.add_argument("--bf16", action="store_true", help=argparse.SUPPRESS)  # refused in one line
    p.add_argument(
        "--dry-run", action="store_true", help="print every command the recipe would run, one per line, and run nothing"
    )
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    problem = check(args)
    if problem:
        print(f"xlmr_recipe: error: {problem}", file=sys.stderr)
        return 2
    try:
        recipe = Recipe(args)
    except HltmtConfigError as error:
        print(f"xlmr_recipe: error: {error}", file=sys.stderr)
        return 2
    try:
        recipe.run()
    except StepFailed as error:
        print(f"\nxlmr_recipe: error: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return reader_gone()
    return 0


if __name__ == "__main__":
    sys.exit(main())
