"""The systems the benchmarks compare and what they run on: the HLT-MT variants and the
plain fairseq transformer built in this process on one task (:func:`build`), the real
multilingual training batches (:func:`batches`), one training step (:func:`train_step_fn`),
the arithmetic of a piece of work (:func:`flops`), the languages a data folder holds
(:func:`derive_languages`), and the same systems as ``fairseq-train`` command lines (the
experiment recipe's, :func:`fairseq_train_cmd`)."""

import inspect
import os

import torch

from hltmt_plugin.corpora import DEBMT10_HIGH
from hltmt_plugin.errors import HltmtConfigError
from hltmt_plugin.experiments.recipe import PLUGIN_TASK, Comparison, Hyper, directions, languages_of, pool_size
from hltmt_plugin.sizes import MODEL_SIZES
from timing import BenchError

# the command the benchmarks' child processes run (python scripts/bench.py --...-child SPEC)
BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench.py")

ADAPTERS = ["--language-adapters", "--shared-adapters", "--decoder-adapters", "--invertible-adapters"]
SKILLS = ["--skill-ffn", "--skill-attention"]
# name -> (HLT-MT model?, extra options); every system sees --enable-lang-ids batches
SYSTEMS = {
    "baseline": (False, []),
    "hltmt": (True, []),
    "hltmt high": (True, ["--hlt-stage", "high"]),
    "hltmt+adapters": (True, ADAPTERS),
    "hltmt+skills": (True, SKILLS),
}
DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
# the model sizes the benches measure: (the baseline's architecture, HLT-MT's), from the one size table
ARCHS = {size: (MODEL_SIZES[size].baseline_arch, MODEL_SIZES[size].hltmt_arch) for size in ("tiny", "small", "base")}
LR = 1e-4  # every bench's learning rate (speed only: the rate does not change a step's cost)
# what a bench's fairseq-train run adds to the recipe's line: fairseq's own order of the data
# (its default, concat: no temperature sampling), nothing saved, no validation
BENCH_RUN = ["--sampling-method", "concat", "--no-save", "--disable-validation"]

# the systems of the real training step (bench_profile.py): name -> the recipe's system; both
# train the stage-high directions on the same batches, HLT-MT routing hard at every update
TRAIN_SYSTEMS = {"baseline": "mnmt", "hltmt": "hltmt"}


def hyper(size, max_tokens):
    """The recipe's hyper-parameters at the bench's model size, batch and learning rate."""
    return Hyper(model=size, lr=LR, max_tokens=max_tokens)


def comparison(args, pairs=None):
    """The recipe's comparison of --data, --langs and --high: every direction of --langs
    unless ``pairs`` says which, on the CPU unless --device says otherwise."""
    langs = args.langs.split(",")
    return Comparison(args.data, langs, list(pairs or directions(langs)), args.high.split(","), args.device == "cpu")


def data_languages(data):
    """The non-English languages of a binarized folder: its langs.txt (hltmt-prepare-data
    writes it), else every dict.XX.txt; English-centric data has train.en-XX.*.idx files."""
    path = os.path.join(data, "langs.txt")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            langs = [x.strip() for x in f if x.strip()]
    else:
        langs = sorted(
            name[len("dict.") : -len(".txt")]
            for name in os.listdir(data)
            if name.startswith("dict.") and name.endswith(".txt")
        )
    return [x for x in langs if x != "en"]


def derive_languages(args):
    """Fill --langs, --high and --pool-size where they were not given, by the drivers' rule
    (:func:`~hltmt_plugin.experiments.recipe.languages_of`): every language of the data folder,
    DebMT-10's high-resource ones (fr, de, cs, tr, fi, et) among them, T = min(3, number of
    high-resource languages)."""
    found = data_languages(args.data)
    if args.langs is None and not found:
        raise BenchError(
            f"--data {args.data}: no languages found (no langs.txt, no dict.XX.txt besides en); give --langs"
        )
    try:
        langs, high = languages_of(args.langs, args.high, found, DEBMT10_HIGH)
    except HltmtConfigError as error:
        raise BenchError(str(error)) from None
    missing = [x for x in langs if not os.path.isfile(os.path.join(args.data, f"dict.{x}.txt"))]
    if missing:
        raise BenchError(
            f"--langs names {','.join(missing)}, which --data {args.data} has no dictionary for "
            f"(it has {','.join(found) or 'none'})"
        )
    for name, value in (("langs", ",".join(langs)), ("high", ",".join(high))):
        if getattr(args, name) is None:
            setattr(args, name, value)
            args.derived.append(f"--{name} {value}")
    if args.pool_size is None:
        args.pool_size = pool_size(high)
        args.derived.append(f"--pool-size {args.pool_size}")
    if not 1 <= args.pool_size <= len(high):
        raise BenchError(
            f"--pool-size must lie in [1, {len(high)}] (the number of high-resource languages), got {args.pool_size}"
        )


def build(args, name):
    """System ``name`` built in this process as fairseq-train builds it (seed 1), on the plugin's
    task for every system (the same batches; the baseline leaves the language ids out)."""
    from fairseq import options, tasks

    is_hltmt, extra = SYSTEMS[name]
    cli = [
        args.data,
        *comparison(args, getattr(args, "pairs", None)).system_args(
            "hltmt" if is_hltmt else "mnmt", hyper(args.size, args.max_tokens), stage="all", pool=args.pool_size
        ),
        *["--task", PLUGIN_TASK, "--enable-lang-ids", "--hlt-stage", "all", "--max-tokens", str(args.max_tokens)],
        *["--optimizer", "adam", "--lr", str(LR), "--dropout", "0.1", "--seed", "1", *extra],
    ]
    parsed = options.parse_args_and_arch(options.get_training_parser(), cli)
    task = tasks.setup_task(parsed)
    torch.manual_seed(1)
    model = task.build_model(parsed).to(args.device)
    if is_hltmt and "--hlt-stage" not in extra:  # stage all: a fixed map, as after stage high
        model.slp_router.fix_map(torch.arange(len(args.high.split(","))) % args.pool_size)
    return {
        "args": parsed,
        "task": task,
        "model": model,
        "lang_ids": "src_lang_id" in inspect.signature(model.encoder.forward).parameters,
    }


def batches(args, task, n):
    from fairseq import utils

    task.load_dataset("train", epoch=1)
    itr = task.get_batch_iterator(
        dataset=task.dataset("train"),
        max_tokens=args.max_tokens,
        max_positions=(1024, 1024),
        seed=1,
        epoch=1,
        required_batch_size_multiple=8,
        ignore_invalid_inputs=True,
    )
    out = []
    for sample in itr.next_epoch_itr(shuffle=True):
        out.append(utils.move_to_cuda(sample) if args.device == "cuda" else sample)
        if len(out) == n:
            break
    return out


def for_model(system, sample):
    """The sample as this model takes it (the plain transformer has no language-id inputs)."""
    if system["lang_ids"]:
        return sample
    net = {k: v for k, v in sample["net_input"].items() if k not in ("src_lang_id", "tgt_lang_id")}
    return {**sample, "net_input": net}


def train_step_fn(args, system):
    from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

    model = system["model"]
    criterion = LabelSmoothedCrossEntropyCriterion(system["task"], False, 0.1)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=LR)
    dtype = DTYPES[args.dtype]

    def step(sample, update):
        model.train()
        model.set_num_updates(update)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(args.device, dtype=dtype, enabled=dtype is not None):
            loss, _, _ = criterion(model, for_model(system, sample))
        loss.backward()
        optimizer.step()

    return step


def flops(fn):
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def high_pairs(args):
    return directions(args.high.split(","))


def fairseq_train_cmd(args, system, size, save_dir, updates):
    """fairseq-train's options (after the program) of one system: the recipe's plain
    ``transformer`` on fairseq's own ``translation_multi_simple_epoch`` task, or HLT-MT of the
    same sizes on ``hltmt_translation`` (stage high, hard routing at every update); the
    stage-high directions, the same data, options and seed, so the same batches."""
    recipe_system = TRAIN_SYSTEMS[system]
    return comparison(args, high_pairs(args)).train_args(
        recipe_system,
        hyper(size, args.max_tokens),
        seed=1,
        updates=updates,
        save_dir=save_dir,
        log_interval=1,
        options=[*BENCH_RUN, *(["--slp-hard-prob", "1"] if recipe_system == "hltmt" else [])],
        pool=args.pool_size,
    )
