"""The experiment recipe, written once: the systems compared, the hyper-parameters they share,
the data's preparation, the fairseq-train command line of each, the decoding of every direction,
the pool-size rule, scoring and the training log.

Every driver that trains the comparison (``hltmt-main-job``, ``hltmt-study``,
scripts/gpu_run.py, the benches, examples/wmt10/xlmr_recipe.py) builds its hltmt-prepare-data,
fairseq-train and fairseq-generate lines here; it adds only what is its own (where checkpoints
go, how often it validates, its device).

The systems (the same data, batch, learning-rate schedule and seed for all):

- ``mnmt``: fairseq's plain ``transformer`` on ``translation_multi_simple_epoch``, every
  direction from the start;
- ``hltmt``: HLT-MT on ``hltmt_translation``: the pool of ``T = min(3, H)`` modules over the
  ``H`` high-resource target languages and the universal layer for the rest, stage high (the
  gate learns, alternating hard and soft routing), then stage all (the map fixed);
- ``lsmnmt``: LS-MNMT, one pool module per language it is given, no gate;
- ``mnmt-staged``: the plain MNMT on HLT-MT's data schedule (the high-resource directions
  first, then all): what the stages do without the pool.
"""

import re
import statistics
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from hltmt_plugin import records
from hltmt_plugin.cli import PLUGIN, fairseq_cli, plugin_cli
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.sizes import MODEL_SIZES

SYSTEMS = ("mnmt", "hltmt", "lsmnmt", "mnmt-staged")
BASELINE_TASK = "translation_multi_simple_epoch"  # fairseq's own multilingual task
PLUGIN_TASK = "hltmt_translation"
POOL_SIZE = 3  # the HLT-MT paper's T (six high-resource languages, three modules)
PAPER_BATCH_GPUS = 64  # the HLT-MT paper's batch: --max-tokens 4096 on each of 64 GPUs
# the segment pairs a tiny model learns within hours on a CPU: at most 12 English and 16 target
# words, in every split (hltmt-prepare-data --segment-words; the quality study's selection)
SHORT_SEGMENTS = (12, 16)


def pool_size(high: Sequence[str], most: int = POOL_SIZE) -> int:
    """The number of pool modules for the high-resource languages ``high``: ``T = min(most, H)``."""
    return min(most, len(high))


def high_among(langs: Sequence[str], high: Sequence[str]) -> List[str]:
    """The high-resource languages that are among ``langs``, in the order ``high`` gives."""
    return [x for x in high if x in langs]


def update_freq(ngpu: int, given: int = 0, batch_gpus: int = PAPER_BATCH_GPUS) -> Tuple[int, Optional[str]]:
    """``--update-freq`` on ``ngpu`` GPUs: ``given`` when set, else the whole number nearest to
    ``batch_gpus / ngpu``, so that an update holds the batches of ``batch_gpus`` GPUs (the
    paper's batch: 64; 0: no batch to hold, 1); and, when the update's batches are not exactly
    ``batch_gpus``, a line saying how far off they are (else None)."""
    if batch_gpus <= 0:
        return given or 1, None
    freq = given or max(1, round(batch_gpus / ngpu))
    made = freq * ngpu
    if made == batch_gpus:
        return freq, None
    return freq, (
        f"--ngpu {ngpu} x --update-freq {freq} makes an update of {made} batches of --max-tokens, not the "
        f"paper's {batch_gpus}: a batch {abs(made - batch_gpus) / batch_gpus:.1%} "
        f"{'larger' if made > batch_gpus else 'smaller'}"
    )


def languages_of(
    langs: Optional[str], high: Optional[str], default_langs: Sequence[str], default_high: Sequence[str]
) -> Tuple[List[str], List[str]]:
    """A driver's ``--langs`` and ``--high`` (comma-separated, None when not given) as (the
    languages, the high-resource ones): each option as given, else ``default_langs`` and those
    of ``default_high`` among the languages. A name given twice or empty, a given ``--high``
    language outside the languages, or no high-resource language at all is refused
    (:class:`HltmtConfigError`, one line)."""
    chosen = list(default_langs) if langs is None else langs.split(",")
    among = [x for x in default_high if x in chosen] if high is None else high.split(",")
    for option, values in (("--langs", chosen), ("--high", among)):
        twice = sorted({x for x in values if values.count(x) > 1})
        if twice or "" in values:
            raise HltmtConfigError(
                f"{option} names {','.join(twice) or 'an empty language'} {'twice' if twice else ''}".strip()
            )
    outside = [x for x in among if x not in chosen]
    if outside:
        raise HltmtConfigError(
            f"--high {','.join(outside)} not in --langs ({','.join(chosen)}): HLT-MT's pool would have no "
            "language of its own"
        )
    if not among:
        raise HltmtConfigError(
            f"no high-resource language among --langs ({','.join(chosen)}): HLT-MT needs at least one (--high)"
        )
    return chosen, among


def directions(langs: Sequence[str], to_english: bool = True) -> List[str]:
    """En->X for each of ``langs``, then X->En (unless ``to_english`` is false)."""
    return [f"en-{x}" for x in langs] + ([f"{x}-en" for x in langs] if to_english else [])


def prepare_command(
    raw: str,
    out: str,
    langs: Sequence[str],
    *,
    vocab: int = 0,
    options: Sequence[str] = (),
    segment_words: Sequence[int] = (),
    max_train: int = 0,
    max_train_lang: Optional[str] = None,
    max_valid: int = 0,
    max_test: int = 0,
) -> List[str]:
    """The hltmt-prepare-data line that prepares the comparison's data: the raw pairs of
    ``langs`` from ``raw`` into ``out`` (a joint sentencepiece model of ``vocab`` pieces, or
    the model and dictionary that ``options`` name), then the segment and line limits (0: all)."""
    cmd = [*plugin_cli("prepare_data"), "--raw", raw, "--out", out, "--langs", ",".join(langs)]
    cmd += ["--vocab-size", str(vocab)] if vocab else []
    cmd += [*options]
    cmd += ["--segment-words", ",".join(map(str, segment_words))] if segment_words else []
    for option, value in (
        ("--max-train", max_train),
        ("--max-train-lang", max_train_lang),
        ("--max-valid", max_valid),
        ("--max-test", max_test),
    ):
        cmd += [option, str(value)] if value else []
    return cmd


@dataclass(kw_only=True)
class Hyper:
    """The hyper-parameters every system of one comparison shares (a driver's size or setting
    adds its own data and schedule fields to these)."""

    model: str = "tiny"  # the model size (hltmt_plugin/sizes.py), which gives the two architectures:
    hltmt_arch: str = field(init=False)  # HLT-MT and LS-MNMT
    baseline_arch: str = field(init=False)  # fairseq's plain transformer of the same sizes
    lr: float = 3e-3  # peak learning rate (inverse_sqrt)
    warmup: int = 200  # warm-up updates
    max_tokens: int = 4096  # tokens per batch
    temperature: float = 5.0  # temperature sampling over the directions

    def __post_init__(self):
        size = MODEL_SIZES[self.model]
        self.hltmt_arch, self.baseline_arch = size.hltmt_arch, size.baseline_arch


@dataclass
class Comparison:
    """One comparison's data and languages: ``data`` the binarized folder, ``langs`` the
    non-English languages (``--langs`` is English and these), ``pairs`` the directions trained,
    ``high`` the high-resource languages, ``cpu`` whether fairseq runs on the CPU, ``max_pool``
    the most pool modules HLT-MT gets (its T is :func:`pool_size` of ``high``)."""

    data: str
    langs: List[str]
    pairs: List[str]
    high: List[str]
    cpu: bool = True
    max_pool: int = POOL_SIZE

    @classmethod
    def from_args(
        cls,
        args,
        data: str,
        *,
        langs: Sequence[str],
        high: Sequence[str],
        to_english: bool = True,
        cpu: bool = True,
        max_pool: int = POOL_SIZE,
    ) -> "Comparison":
        """The comparison a driver's command line asks for, its ``--langs`` and ``--high`` read
        here once (:func:`languages_of`; ``langs`` and ``high`` when not given): every
        direction En->X and, with ``to_english``, X->En, on the binarized folder ``data``."""
        chosen, among = languages_of(args.langs, args.high, langs, high)
        return cls(data, chosen, directions(chosen, to_english), among, cpu=cpu, max_pool=max_pool)

    def task_args(self, task: str, pairs: Optional[Sequence[str]] = None) -> List[str]:
        """The task's options (the data's languages, the directions, the target-language token
        on the encoder side, the CPU): what fairseq-train and fairseq-generate share."""
        return [
            "--user-dir",
            PLUGIN,
            "--task",
            task,
            "--langs",
            ",".join(["en"] + list(self.langs)),
            "--lang-pairs",
            ",".join(pairs or self.pairs),
            "--encoder-langtok",
            "tgt",
            *(["--cpu"] if self.cpu else []),
        ]

    def generate_args(
        self,
        *,
        subset: str = "test",
        max_tokens: int = 8000,
        gen_len: Sequence[float] = (1.5, 10),
        fp16: bool = False,
        beam: int = 5,
    ) -> List[str]:
        """fairseq-generate's options for decoding a direction of any system (the checkpoint
        and the direction come after): ``subset`` with beam ``beam``, at most ``gen_len`` =
        (a, b) tokens, a * source length + b, the sentencepiece pieces joined back into text,
        fp16 when asked. Every model decodes under hltmt_translation, fairseq's plain
        transformer too: fairseq 0.12's translation_multi_simple_epoch drops the last partial
        batch of a test set (fairseq issue 5036)."""
        return [
            self.data,
            *self.task_args(PLUGIN_TASK),
            "--gen-subset",
            subset,
            "--beam",
            str(beam),
            "--max-tokens",
            str(max_tokens),
            "--max-len-a",
            f"{gen_len[0]:g}",
            "--max-len-b",
            str(gen_len[1]),
            "--remove-bpe",
            "sentencepiece",
            *(["--fp16"] if fp16 else []),
        ]

    def high_pairs(self) -> List[str]:
        """The directions of stage high: those whose non-English side is high-resource."""
        return [p for p in self.pairs if any(x in self.high for x in p.split("-") if x != "en")]

    def system_args(
        self,
        system: str,
        hyper: Hyper,
        *,
        stage: str = "high",
        high_updates: int = 0,
        ls_langs: Optional[Sequence[str]] = None,
        pool: Optional[int] = None,
        pairs: Optional[Sequence[str]] = None,
        criterion: Optional[str] = None,
    ) -> List[str]:
        """The task, model and criterion of one system: ``stage`` and ``high_updates`` (the
        update at which stage high gives way to stage all, 0: no switch in this run) are
        HLT-MT's; ``ls_langs`` the languages that get an LS-MNMT module each; ``pool`` HLT-MT's
        T (default: :func:`pool_size` of the high-resource languages, at most ``max_pool``); ``pairs`` the directions of this run (default: all);
        ``criterion`` another criterion than the system's own (HLT-MT's disparity weight then
        goes: it is an option of HLT-MT's criterion)."""
        if system in ("mnmt", "mnmt-staged"):
            return [
                *self.task_args(BASELINE_TASK, pairs),
                "--arch",
                hyper.baseline_arch,
                "--criterion",
                criterion or "label_smoothed_cross_entropy",
            ]
        if system == "hltmt":
            capacity = [
                "--high-resource-langs",
                ",".join(self.high),
                "--slp-pool-size",
                str(pool_size(self.high, self.max_pool) if pool is None else pool),
                "--hlt-stage",
                stage,
                *(["--high-stage-updates", str(high_updates)] if high_updates else []),
                *(["--disparity-weight", "1.0"] if stage == "high" and criterion is None else []),
            ]
        elif system == "lsmnmt":
            langs = list(ls_langs or self.langs)
            capacity = [
                "--high-resource-langs",
                ",".join(langs),
                "--slp-pool-size",
                str(len(langs)),
                "--slp-language-specific",
                "--hlt-stage",
                "all",
            ]
        else:
            raise ValueError(f"unknown system {system!r} (one of {', '.join(SYSTEMS)})")
        return [
            *self.task_args(PLUGIN_TASK, pairs),
            "--arch",
            hyper.hltmt_arch,
            *capacity,
            "--criterion",
            criterion or "hltmt_cross_entropy",
        ]

    def train_command(self, system: str, hyper: Hyper, **options) -> List[str]:
        """One fairseq-train line: the program, then :meth:`train_args`."""
        return [*fairseq_cli("train"), *self.train_args(system, hyper, **options)]

    def train_args(
        self,
        system: str,
        hyper: Hyper,
        *,
        seed: int,
        updates: int,
        save_dir: str,
        log_interval: int = 50,
        options: Sequence[str] = (),
        **system_options,
    ) -> List[str]:
        """fairseq-train's options (after the program: what fairseq's training parser, or
        ``fairseq_cli.train``'s ``cli_main`` in this process, reads): the system
        (:meth:`system_args`), the shared optimiser and schedule (Adam 0.9/0.98, inverse_sqrt,
        label smoothing and dropout 0.1, temperature sampling), ``updates`` updates from
        ``seed``, checkpoints in ``save_dir`` (the last and the best only), simple progress lines
        every ``log_interval`` updates, then the driver's own ``options`` (validation,
        checkpointing, device)."""
        return [
            self.data,
            *self.system_args(system, hyper, **system_options),
            *optimiser_args(hyper),
            "--max-update",
            str(updates),
            "--seed",
            str(seed),
            "--save-dir",
            save_dir,
            "--no-epoch-checkpoints",
            "--log-format",
            "simple",
            "--log-interval",
            str(log_interval),
            *options,
        ]


def optimiser_args(hyper: Hyper) -> List[str]:
    """The optimiser, schedule, regularisation and batch every system shares."""
    return [
        "--label-smoothing",
        "0.1",
        "--optimizer",
        "adam",
        "--adam-betas",
        "(0.9,0.98)",
        "--lr",
        str(hyper.lr),
        "--lr-scheduler",
        "inverse_sqrt",
        "--warmup-updates",
        str(hyper.warmup),
        "--dropout",
        "0.1",
        "--max-tokens",
        str(hyper.max_tokens),
        "--sampling-method",
        "temperature",
        "--sampling-temperature",
        f"{hyper.temperature:g}",
    ]


# ---- scoring -------------------------------------------------------------------------------
def score(hyps: Sequence[str], refs: Sequence[str], signatures: Optional[Dict[str, str]] = None) -> Dict[str, float]:
    """sacreBLEU's corpus BLEU and chrF of ``hyps`` against one reference each:
    ``{"bleu": .., "chrf": ..}``; ``signatures``, when given, receives each metric's signature."""
    from sacrebleu.metrics import BLEU, CHRF

    bleu, chrf = BLEU(), CHRF()
    scores = {"bleu": bleu.corpus_score(hyps, [refs]).score, "chrf": chrf.corpus_score(hyps, [refs]).score}
    if signatures is not None:
        signatures["BLEU"], signatures["chrF"] = str(bleu.get_signature()), str(chrf.get_signature())
    return scores


# ---- the training log ----------------------------------------------------------------------
TRAIN_INNER = re.compile(r"train_inner[ |:]+(.*)")
VALID_LINE = re.compile(r"valid on 'valid' subset \|(.*)")
VALID_KEYS = ("loss", "nll_loss", "ppl", "num_updates")
UPDATES = re.compile(r"num_updates[= ](\d+)")
FIELD = re.compile(r"(\w+)=([-\d.e]+)")
# a progress line of fairseq's --log-format json: its fields, each a text or a number
PROGRESS_LINE = records.MapOf(records.OneOf(records.Text(max_len=1000), records.Number(), records.Null()), max_len=1000)
PARAMS = re.compile(r"num\. (?:shared|expert) model params: ([\d,]+)")
DONE = re.compile(r"done training in ([\d.]+) seconds")


@dataclass
class TrainLog:
    """What a fairseq-train log says: its progress lines (``train_inner``, simple or json
    format) as field dicts, its whole validations (:data:`VALID_KEYS`, as text), the loss of
    the last validation, the last update count any line names, the parameter count and the
    wall time fairseq reports at the end."""

    progress: List[Dict[str, float]]
    valid: List[Dict[str, str]]
    valid_loss: Optional[float]
    updates: int
    params: int
    wall: Optional[float]

    def steady(self, field: str) -> Optional[float]:
        """The median of ``field`` (e.g. ``ups``, ``wps``) over the progress lines after the
        first (which holds the start-up), or over the one line there is; None without any."""
        lines = self.progress[1:] or self.progress
        return statistics.median(fields.get(field, 0.0) for fields in lines) if lines else None


def parse_train_log(text: str) -> TrainLog:
    """The :class:`TrainLog` of a fairseq-train log's text (a log still being written too)."""
    progress, valid, updates, valid_loss = [], [], 0, None
    for line in text.splitlines():
        found = UPDATES.search(line)
        if found:
            updates = max(updates, int(found.group(1)))
        inner = TRAIN_INNER.search(line)
        if inner and "num_updates" in line:
            body = inner.group(1).strip()
            if body.startswith("{"):
                try:
                    fields = records.check(
                        records.parse_json(body, "a progress line"), PROGRESS_LINE, "a progress line"
                    )
                except HltmtInputError:
                    continue  # a line cut while being written
                progress.append({k: float(v) for k, v in fields.items() if _number(v)})
            else:
                progress.append({k: float(v) for k, v in FIELD.findall(body)})
            continue
        val = VALID_LINE.search(line)
        if val:
            fields = dict(x.strip().split(" ", 1) for x in val.group(1).split("|") if " " in x.strip())
            valid_loss = float(fields["loss"]) if _number(fields.get("loss")) else valid_loss
            if all(k in fields for k in VALID_KEYS):
                valid.append(fields)
    wall = DONE.search(text)
    return TrainLog(
        progress=progress,
        valid=valid,
        valid_loss=valid_loss,
        updates=updates,
        params=sum(int(p.replace(",", "")) for p in PARAMS.findall(text)),
        wall=float(wall.group(1)) if wall else None,
    )


def read_train_log(path: str) -> TrainLog:
    """:func:`parse_train_log` of the file ``path`` (empty when it is not there yet)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return parse_train_log(f.read())
    except FileNotFoundError:
        return parse_train_log("")


def _number(value) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True
