"""The in-process measures of ``scripts/bench.py``: every system built in this process on the
same task and data, timed on the same batches with the systems interleaved round by round:
training words/s, a mixed-direction batch against single-direction ones, beam-5 generation
tokens/s, parameters and training memory, each speed with the ratio its arithmetic predicts
(:func:`~bench_systems.flops`); the table, the JSON figures and the plot."""

import json
import os

import torch

from bench_systems import BENCH, DTYPES, batches, build, comparison, flops, for_model, train_step_fn
from hltmt_plugin.atomic_files import write_text
from hltmt_plugin.experiments.recipe import PLUGIN_TASK
from hltmt_plugin.experiments.runs import save_figure
from timing import Clock, alternating, markdown_table, median

# what the ratio column holds, per kind of row: speed rows give a time ratio (so > 1 is slower)
RATIO_IS = {"speed": "time: system / baseline (= baseline speed / system speed)", "size": "size: system / baseline"}
TARGET = 1.06  # the target for HLT-MT's time ratios (1.10 for its training memory)


def clock_of(args):
    """The clock the measures use: CPU time of this process (``--clock cpu``: one thread on a
    shared machine, where other processes' load inflates wall time but not the CPU time this
    process spends), or wall time (otherwise: several threads, or a GPU)."""
    return Clock("cpu" if getattr(args, "clock", "wall") == "cpu" else "wall", args.device)


def time_training(args, systems, samples):
    """Words/s per system over rounds of the batches, the systems alternating batch by batch;
    also the FLOPs of one round."""
    steps = {name: train_step_fn(args, s) for name, s in systems.items()}
    for name, step in steps.items():  # warm-up
        for i, s in enumerate(samples[:3]):
            step(s, i)
    words = sum(int(s["ntokens"]) for s in samples)
    rates = {name: [] for name in systems}
    for r in range(args.rounds):
        spent = alternating(steps, {name: samples for name in steps}, clock_of(args), 1000 * r)
        for name in steps:
            rates[name].append(words / spent[name])
        print(
            f"# training round {r + 1}/{args.rounds}: "
            + ", ".join(f"{name} {v[-1]:,.0f}" for name, v in rates.items())
            + " words/s",
            flush=True,
        )
    return rates, training_work(steps, samples)


def training_work(steps, samples):
    """The arithmetic (FLOPs) of each training step function's pass over ``samples``."""
    return {name: flops(lambda step=step: [step(s, i) for i, s in enumerate(samples)]) for name, step in steps.items()}


def generation_setup(args, direction):
    """The test batches of one direction and the options of a beam-5 generator (fairseq's
    defaults otherwise) that runs every hypothesis to the same length."""
    from fairseq import options, tasks, utils

    src, tgt = direction.split("-")
    inference = options.parse_args_and_arch(
        options.get_generation_parser(),
        [
            args.data,
            *comparison(args).task_args(PLUGIN_TASK, [direction]),
            *["--enable-lang-ids", "-s", src, "-t", tgt, "--path", BENCH, "--beam", "5", "--max-len-a", "0"],
            *["--max-len-b", str(args.gen_len), "--min-len", str(args.gen_len)],  # fairseq's search, every step run
        ],
    )
    task = tasks.setup_task(inference)  # the data side only: the models are the ones being timed
    task.load_dataset("test")
    itr = task.get_batch_iterator(
        dataset=task.dataset("test"),
        max_tokens=4000,
        max_sentences=args.gen_batch_size or None,
        max_positions=(1024, 1024),
        seed=1,
    )
    samples, n = [], 0
    for sample in itr.next_epoch_itr(shuffle=False):
        samples.append(utils.move_to_cuda(sample) if args.device == "cuda" else sample)
        n += len(sample["id"])
        if n >= args.gen_sentences:
            break
    return task, samples, inference


def generate_fn(args, task, samples, gen_args, system):
    generator = task.build_generator([system["model"]], gen_args)
    dtype = DTYPES[args.dtype]

    def run():
        system["model"].eval()
        toks = 0
        with torch.no_grad(), torch.autocast(args.device, dtype=dtype, enabled=dtype is not None):
            for sample in samples:
                for nbest in task.inference_step(generator, [system["model"]], for_model(system, sample)):
                    toks += len(nbest[0]["tokens"])
        return toks

    return run


def time_generation(args, systems, directions):
    """Beam-5 tokens/s per (system, direction), rounds interleaved; also the FLOPs of one pass."""
    rates, work = {}, {}
    clock = clock_of(args)
    for direction in directions:
        task, samples, gen_args = generation_setup(args, direction)
        runs = {name: generate_fn(args, task, samples, gen_args, s) for name, s in systems.items()}
        for run in runs.values():
            run()  # warm-up
        for r in range(args.rounds):
            for name, run in runs.items():
                seconds, toks = clock.seconds(run)
                rates.setdefault((name, direction), []).append(toks / seconds)
        for name, run in runs.items():
            work[(name, direction)] = flops(run)
        print(
            f"# generation {direction}: "
            + ", ".join(f"{name} {median(rates[(name, direction)]):,.0f}" for name in systems)
            + " tokens/s",
            flush=True,
        )
    return rates, work


def one_direction(sample, task, tgt_lang, src_lang="en", lang_ids=False):
    """A copy of ``sample`` whose rows all carry ``tgt_lang``'s target-language token (and with
    ``lang_ids`` the language ids of ``src_lang``-``tgt_lang`` as well): the same tokens, so the
    same arithmetic, but one routing group in every routed layer."""
    net = dict(sample["net_input"])
    src = net["src_tokens"].clone()
    first = src.ne(task.source_dictionary.pad()).long().argmax(dim=1)
    src[torch.arange(src.size(0)), first] = task.data_manager.get_encoder_langtok(src_lang, tgt_lang, "tgt")
    net["src_tokens"] = src
    for key, lang in (("src_lang_id", src_lang), ("tgt_lang_id", tgt_lang)) if lang_ids else ():
        if key in net:
            net[key] = torch.full_like(net[key], task.data_manager.lang_dict.index(lang))
    return {**sample, "net_input": net}


def time_pair(args, system, first, second):
    """Words/s of the same model on two lists of batches of the same tokens, after one step of
    each, alternating batch by batch."""
    step = train_step_fn(args, system)
    words = sum(int(s["ntokens"]) for s in first)
    rates = {"mixed": [], "single": []}
    step(first[0], 0)
    step(second[0], 1)
    for r in range(args.rounds):
        spent = alternating(
            {"mixed": step, "single": step}, {"mixed": first, "single": second}, clock_of(args), 1000 * r
        )
        for name in rates:
            rates[name].append(words / spent[name])
    return {k: median(v) for k, v in rates.items()}


def params(model):
    return sum(p.numel() for p in model.parameters())


def training_bytes(args, system, samples):
    """Bytes one training step holds at its peak: weights, their gradients and Adam's two
    moments (trainable parameters only), plus the largest set of activations a batch saves
    for the backward pass."""
    model = system["model"]
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    frozen = sum(p.numel() * p.element_size() for p in model.parameters() if not p.requires_grad)
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

    criterion = LabelSmoothedCrossEntropyCriterion(system["task"], False, 0.1)
    peak = 0
    model.train()
    for i, sample in enumerate(samples):
        seen = {}

        def pack(t):
            storage = t.untyped_storage()
            if storage.data_ptr() not in weights:
                seen[storage.data_ptr()] = storage.nbytes()
            return t

        model.set_num_updates(i)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss, _, _ = criterion(model, for_model(system, sample))
        peak = max(peak, sum(seen.values()))
        del loss
    return 4 * trainable + frozen + peak


def measure(args, names):
    """Every measure of the systems ``names``: training, mixed against single-direction
    batches, generation, memory."""
    systems = {name: build(args, name) for name in names}
    samples = batches(args, systems["hltmt" if "hltmt" in systems else "baseline"]["task"], args.batches)
    tgt_tokens = sum(int(s["ntokens"]) for s in samples)
    print(
        f"# {len(samples)} training batches, {tgt_tokens} target tokens per round, device {args.device}, "
        f"{torch.get_num_threads()} threads, {args.clock} clock, load {os.getloadavg()[0]:.2f}, torch "
        f"{torch.__version__}, systems {', '.join(names)}",
        flush=True,
    )
    got = {"systems": systems, "gen_dirs": args.gen_directions.split(",")}
    got["rates"], got["work"] = time_training(args, systems, samples)
    got["mix_rates"] = None
    if "hltmt" in systems:  # the same batches with every row's language token set to one language
        single = [one_direction(s, systems["hltmt"]["task"], args.high.split(",")[0]) for s in samples]
        got["mix_rates"] = time_pair(args, systems["hltmt"], samples, single)
    got["gen_systems"] = {n: s for n, s in systems.items() if n != "hltmt high"}  # stage high decodes as stage all
    got["gen"], got["gen_work"] = time_generation(args, got["gen_systems"], got["gen_dirs"])
    got["memory"] = {name: training_bytes(args, s, samples[:5]) / 2**20 for name, s in systems.items()}
    return got


def figure(measure, system, base, value, kind, predicted=None):
    """One row of the table: a ``kind`` of ratio ("speed": a time ratio, "size")."""
    ratio = base / value if kind == "speed" else value / base
    return dict(
        measure=measure,
        system=system,
        baseline=base,
        value=value,
        ratio=ratio,
        ratio_is=RATIO_IS[kind],
        predicted=predicted,
    )


def table_rows(names, got):
    """The figures of every row: each system's against the baseline's."""
    med = {name: median(v) for name, v in got["rates"].items()}
    work, gen, gen_work, memory = (got[k] for k in ("work", "gen", "gen_work", "memory"))
    base_model, rows = got["systems"]["baseline"]["model"], []
    for name in names[1:]:
        rows.append(figure("parameters", name, params(base_model), params(got["systems"][name]["model"]), "size"))
        rows.append(figure("train words/s", name, med["baseline"], med[name], "speed", work[name] / work["baseline"]))
        for d in got["gen_dirs"] if name in got["gen_systems"] else []:
            pred = gen_work[(name, d)] / gen_work[("baseline", d)]
            rows.append(
                figure(
                    f"beam-5 tokens/s {d}", name, median(gen[("baseline", d)]), median(gen[(name, d)]), "speed", pred
                )
            )
        rows.append(figure("training memory (MiB, model)", name, memory["baseline"], memory[name], "size"))
    if got["mix_rates"]:
        mix = got["mix_rates"]
        rows.append(
            figure(
                "train words/s, mixed vs single-direction batches", "hltmt", mix["single"], mix["mixed"], "speed", 1.0
            )
        )
    return rows


def print_table(rows):
    """Print the rows as a Markdown table; the rows."""
    lines = []
    for f in rows:
        digits, pred = 0 if f["measure"] == "parameters" else 1, f["predicted"]
        cells = [f"{f['baseline']:,.{digits}f}", f"{f['value']:,.{digits}f}", f"{f['ratio']:.3f}"]
        lines.append([f["measure"], f["system"], *cells, f["ratio_is"], "" if pred is None else f"{pred:.3f}"])
    header = ["measure", "system", "baseline", "system", "ratio", "the ratio is", "predicted"]
    print("\n" + markdown_table(header, lines))
    print(
        "\n(speed rows: the ratio is a time ratio, > 1 when the system is slower; size rows: > 1 when the "
        "system is larger. 'predicted' is the system's arithmetic over the baseline's on the same work.)"
    )
    return rows


def speed_main(args, names):
    """The in-process measures of the systems ``names`` (the baseline first): the table, the
    per-round spread, and --png / --json."""
    got = measure(args, names)
    figures = print_table(table_rows(names, got))
    rates = got["rates"]
    spread = {name: [round(min(v)), round(max(v))] for name, v in rates.items()}
    print(f"\nper-round training words/s (min, max): {json.dumps(spread)}")
    if args.png:
        plot(
            figures,
            args.png,
            f"{args.size} models, {args.device}, {torch.get_num_threads()} thread(s), "
            f"{args.clock} clock, generation batches of {args.gen_batch_size or 'up to 4,000 tokens'}",
        )
    if args.json:
        record = dict(device=args.device, threads=torch.get_num_threads(), clock=args.clock, load=os.getloadavg()[0])
        record.update(torch=torch.__version__, rows=figures, train_rounds=rates)
        record["gen_rounds"] = {f"{n} {d}": v for (n, d), v in got["gen"].items()}
        write_text(args.json, json.dumps(record, indent=1), "--json")
    return 0


def plot(figures, path, title):
    """Bars: measured time (or size) ratio per system and measure; dots: the predicted ratio."""
    from hltmt_plugin.experiments.plots import pyplot

    plt = pyplot()

    rows = [f for f in figures if f["measure"] != "parameters"]
    labels = [f"{f['system']}: {f['measure']}" for f in rows]
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(rows) + 1.6))
    y = range(len(rows))
    ax.barh(list(y), [f["ratio"] - 1 for f in rows], left=1, color="#4c72b0", label="measured")
    pred = [(i, f["predicted"]) for i, f in enumerate(rows) if f["predicted"] is not None]
    ax.scatter([p for _, p in pred], [i for i, _ in pred], color="#dd8452", zorder=3, label="predicted (arithmetic)")
    ax.axvline(1.0, color="black", lw=0.8)
    target = f"{TARGET}: the target for HLT-MT's time ratios (none for adapters, skills)"
    ax.axvline(TARGET, color="grey", ls="--", lw=0.8, label=target)
    ax.set_yticks(list(y), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(
        "ratio to the plain fairseq transformer of the same size: time (system time / baseline time = "
        "baseline speed / system speed), or size\n> 1: the system is slower (or larger)",
        fontsize=8,
    )
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    save_figure(fig, path, dpi=120, option="--png")
    plt.close(fig)
