"""The real training step: fairseq's own Trainer of the plain transformer and of HLT-MT of the
same size, both built as fairseq-train builds them in one process and fed the same batches,
updates alternating one by one so that the machine's load hits both alike (``scripts/bench.py
--fairseq-train``): the time ratio per size beside the ratio the arithmetic predicts, and with
``--profile`` where HLT-MT's extra time goes: the phases (CPU time of fairseq's and the
plugin's methods).

The pair runs in a child process (:func:`pair_child`, ``bench.py --child pair`` through
:func:`timing.run_child`), so that each size starts from a fresh process."""

import argparse
import importlib
import json
import os
import tempfile
import time

import torch

from bench_speed import training_work
from bench_systems import ARCHS, BENCH, BenchError, batches, build, fairseq_train_cmd, high_pairs, train_step_fn
from hltmt_plugin.atomic_files import write_text
from hltmt_plugin.experiments.runs import save_figure
from timing import child_env, markdown_table, run_child, span, stamp

WARMUP = 3  # updates of each system before any is timed
# the phases of a training step, one a line: its name (indented: a part of the phase above it),
# " = ", the methods timed as it ("module:Owner.method" or "module:function"), fairseq's and the plugin's
PHASES = """
update (Trainer.train_step) = fairseq.trainer:Trainer.train_step
  task.train_step = fairseq.tasks.fairseq_task:FairseqTask.train_step hltmt_plugin.tasks.hltmt_translation:HltmtTranslationTask.train_step
    criterion forward (model + loss) = fairseq.criterions.label_smoothed_cross_entropy:LabelSmoothedCrossEntropyCriterion.forward hltmt_plugin.criterions.hltmt_cross_entropy:HltmtCrossEntropyCriterion.forward
      model forward = fairseq.models.transformer.transformer_base:TransformerModelBase.forward hltmt_plugin.models.hltmt_transformer:HltmtTransformerModel.forward
        encoder = fairseq.models.transformer.transformer_encoder:TransformerEncoderBase.forward hltmt_plugin.models.hltmt_transformer:HltmtTransformerEncoder.forward hltmt_plugin.models.encoder:HltmtTransformerEncoder.forward
          language record (per batch) = hltmt_plugin.languages:LanguageTable.record
        decoder layers + SLP = fairseq.models.transformer.transformer_decoder:TransformerDecoderBase.extract_features hltmt_plugin.models.hltmt_transformer:HltmtTransformerDecoder.extract_features hltmt_plugin.models.decoder:HltmtTransformerDecoder.extract_features
          decoder layers = fairseq.models.transformer.transformer_decoder:TransformerDecoderBase.extract_features_scriptable
          SLP routing decision = hltmt_plugin.pool.router:LanguageRouter.forward
            route plan (RoutePlan) = hltmt_plugin.routing:RoutePlan.__init__
            module ids = hltmt_plugin.pool.router:LanguageRouter.module_ids
          SLP modules = hltmt_plugin.pool.modules:SelectiveLanguagePool.forward
        output projection = fairseq.models.transformer.transformer_decoder:TransformerDecoderBase.output_layer
      log-softmax (get_lprobs_and_target) = fairseq.criterions.label_smoothed_cross_entropy:LabelSmoothedCrossEntropyCriterion.get_lprobs_and_target
      label-smoothed NLL = fairseq.criterions.label_smoothed_cross_entropy:label_smoothed_nll_loss hltmt_plugin.criterions.hltmt_cross_entropy:label_smoothed_nll_loss
    backward = fairseq.optim.fairseq_optimizer:FairseqOptimizer.backward
  HLT-MT: idle-gradient rule, note = hltmt_plugin.tasks.distributed:IdleGradients.note
  clip_grad_norm = fairseq.trainer:Trainer.clip_grad_norm
  task.optimizer_step = fairseq.tasks.fairseq_task:FairseqTask.optimizer_step hltmt_plugin.tasks.hltmt_translation:HltmtTranslationTask.optimizer_step
    HLT-MT: idle-gradient rule, drop = hltmt_plugin.tasks.distributed:IdleGradients.drop
    Adam step = fairseq.optim.adam:Adam.step
  set_num_updates = fairseq.trainer:Trainer.set_num_updates
  logging outputs (reduce and log) = fairseq.trainer:Trainer._reduce_and_log_stats
"""
PHASE_SPOTS = [  # (phase, method)
    (phase, spot)
    for phase, _, spots in map(lambda line: line.partition(" = "), PHASES.strip("\n").splitlines())
    for spot in spots.split()
]


def _phase_patches():
    """(phase, owner, attribute) of the methods timed as phases, those of fairseq and, where they
    exist, the plugin's (a phase's nested calls count once: the outermost)."""
    out = []
    for key, spot in PHASE_SPOTS:
        module, _, path = spot.partition(":")
        *owner_path, attr = path.split(".")
        try:
            owner = importlib.import_module(module)
            for name in owner_path:
                owner = getattr(owner, name)
        except (ImportError, AttributeError):
            continue
        if attr in vars(owner):
            out.append((key, owner, attr))
    return out


def _install_phase_timers(records, active):
    """Wrap the phase methods: while ``active["on"]`` names a system, each outermost call adds
    its CPU time to ``records[system][phase]`` (calls, seconds)."""
    depth = {}
    for key, owner, attr in _phase_patches():
        inner = getattr(owner, attr)

        def wrapper(*a, __inner=inner, __key=key, **k):
            if not active["on"] or depth.get(__key):
                return __inner(*a, **k)
            depth[__key] = 1
            t = time.process_time()  # one thread: CPU time
            try:
                return __inner(*a, **k)
            finally:
                depth[__key] = 0
                got = records.setdefault(active["on"], {}).setdefault(__key, [0, 0.0])
                got[0] += 1
                got[1] += time.process_time() - t

        setattr(owner, attr, wrapper)


def build_trainer(argv):
    """What fairseq_cli.train.main builds from these options: task, model, criterion, Trainer,
    the (empty) checkpoint look-up and the epoch's batch iterator."""
    from fairseq import checkpoint_utils, options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))
    utils.import_user_module(cfg.common)
    utils.set_torch_seed(cfg.common.seed)
    task = tasks.setup_task(cfg.task)
    trainer = Trainer(cfg, task, task.build_model(cfg.model), task.build_criterion(cfg.criterion))
    _, epoch_itr = checkpoint_utils.load_checkpoint(cfg.checkpoint, trainer)
    trainer.begin_epoch(epoch_itr.epoch)
    return trainer, epoch_itr


def pair_child(spec):
    """Both systems' Trainers in this process, the same batches, WARMUP updates of each, then
    ``spec["updates"]`` updates alternating one by one, each update's wall and CPU time taken
    and the phase timers on; the figures."""
    from fairseq import metrics

    import hltmt_plugin  # noqa: F401

    phases, active = {}, {"on": None}
    _install_phase_timers(phases, active)
    names = list(spec["argv"])
    trainers = {}
    for name in names:
        trainers[name], epoch_itr = build_trainer(spec["argv"][name])
    itr = epoch_itr.next_epoch_itr(shuffle=True)  # the last one built; every system's batches are the same
    samples = [next(itr) for _ in range(WARMUP + spec["updates"])]
    out = {"cpu": dict.fromkeys(names, 0.0), "wall": dict.fromkeys(names, 0.0), "update_cpu": {n: [] for n in names}}
    out.update(words=sum(int(s["ntokens"]) for s in samples[WARMUP:]), phases=phases)
    for i, sample in enumerate(samples):
        for name in names if i % 2 == 0 else names[::-1]:
            start, active["on"] = stamp(), name if i >= WARMUP else None
            with metrics.aggregate("train_inner"):
                trainers[name].train_step([sample])
            active["on"] = None
            if i >= WARMUP:
                spent = span(start, stamp())
                out["cpu"][name] += spent["cpu"]
                out["wall"][name] += spent["wall"]
                out["update_cpu"][name].append(spent["cpu"])
    return out


def run_pair(args, size, n):
    """:func:`pair_child` of both systems at one size, in a child process; its figures."""
    with tempfile.TemporaryDirectory() as save:  # fairseq-train's --save-dir: nothing is saved there
        argv = {
            name: fairseq_train_cmd(args, name, size, os.path.join(save, name), 10**6) for name in ("baseline", "hltmt")
        }
        spec = {"updates": n, "argv": argv}
        return run_child(BENCH, "pair", spec, what=f"the training steps of {size} in one process")


def parse_train_options(args):
    """Check --train-sizes and --train-updates; the updates become {size: N}."""
    sizes = [x for x in args.train_sizes.split(",") if x]
    if not sizes or any(x not in ARCHS for x in sizes):
        raise BenchError(f"--train-sizes: choose from {','.join(ARCHS)}, got {args.train_sizes!r}")
    updates = {}
    for item in args.train_updates.split(","):
        size, _, n = item.rpartition("=")
        if not n.strip().isdigit() or (size and size not in ARCHS):
            raise BenchError(f"--train-updates takes N or SIZE=N,..., got {args.train_updates!r}")
        for key in [size] if size else ARCHS:
            updates[key] = int(n)
    missing = [x for x in sizes if x not in updates]
    if missing:
        raise BenchError(f"--train-updates gives no number for size {','.join(missing)}")
    short = [f"{x}={updates[x]}" for x in sizes if updates[x] < 2]
    if short:
        raise BenchError(f"--train-updates {','.join(short)}: at least 2 updates, one of each half")
    args.train_sizes, args.train_updates = ",".join(sizes), updates


def predicted_train_ratio(args, size, n):
    """The arithmetic of an HLT-MT training step over the baseline's, on the stage-high batches."""
    sub = argparse.Namespace(**vars(args))
    sub.size, sub.pairs = size, high_pairs(args)
    systems = {name: build(sub, name) for name in ("baseline", "hltmt")}
    samples = batches(sub, systems["hltmt"]["task"], n)
    work = training_work({name: train_step_fn(sub, system) for name, system in systems.items()}, samples)
    return work["hltmt"] / work["baseline"]


def step_row(args, size):
    """One size: fairseq's Trainer.train_step of both systems in one process, updates
    alternating: the time ratio (CPU, wall; CPU over each half of the updates) and the predicted one."""
    t = time.time()
    got = run_pair(args, size, args.train_updates[size])
    b, h = got["update_cpu"]["baseline"], got["update_cpu"]["hltmt"]
    half = len(b) // 2
    row = {
        "size": size,
        "cpu_ratio": sum(h) / sum(b),
        "wall_ratio": got["wall"]["hltmt"] / got["wall"]["baseline"],
        "halves": [sum(h[:half]) / sum(b[:half]), sum(h[half:]) / sum(b[half:])],
        "baseline_cpu_wps": got["words"] / sum(b),
        "cpu_wps": got["words"] / sum(h),
        "predicted": predicted_train_ratio(args, size, min(args.batches, 5)),
    }
    print(
        f"# {size}: {len(b)} updates alternating: time ratio {row['cpu_ratio']:.3f} (CPU), "
        f"{row['wall_ratio']:.3f} (wall) ({time.time() - t:.0f}s, load {os.getloadavg()[0]:.2f})",
        flush=True,
    )
    return row


def print_step_table(rows):
    header = ["size", "words per CPU-second, baseline / HLT-MT", "time ratio (CPU; two halves)", "wall", "predicted"]
    lines = [
        [
            r["size"],
            f"{r['baseline_cpu_wps']:,.0f} / {r['cpu_wps']:,.0f}",
            f"**{r['cpu_ratio']:.3f}** ({r['halves'][0]:.3f}, {r['halves'][1]:.3f})",
            f"{r['wall_ratio']:.3f}",
            f"{r['predicted']:.3f}",
        ]
        for r in rows
    ]
    print("\n" + markdown_table(header, lines))
    print(
        "\n(time ratio = HLT-MT's time per update / the baseline's, fairseq's Trainer.train_step of both in one "
        "process, updates alternating on the same batches: > 1 when HLT-MT is slower; predicted: its arithmetic.)"
    )


def _phase_table(got, size, n):
    """Print the CPU time per update of each phase of both systems; (the phases' figures,
    each system's CPU time per update)."""
    order = list(dict.fromkeys(key for key, _owner, _attr in _phase_patches()))
    total = {name: got["cpu"][name] / n for name in ("baseline", "hltmt")}
    diff = total["hltmt"] - total["baseline"]
    print(
        f"\n### One fairseq training step, {size}: both systems in one process, fairseq's Trainer, the same "
        f"{n} batches, updates alternating (CPU time per update; words per CPU-second: baseline "
        f"{got['words'] / got['cpu']['baseline']:,.0f}, HLT-MT {got['words'] / got['cpu']['hltmt']:,.0f}, time "
        f"ratio {total['hltmt'] / total['baseline']:.3f})\n"
    )
    phases, lines = [], []
    for key in order:
        b, h = (got["phases"].get(name, {}).get(key, [0, 0.0]) for name in ("baseline", "hltmt"))
        if not b[0] and not h[0]:
            continue
        d = (h[1] - b[1]) / n
        phases.append(
            {
                "phase": key.strip(),
                "baseline_ms": b[1] / n * 1000,
                "hltmt_ms": h[1] / n * 1000,
                "calls": [b[0] / n, h[0] / n],
            }
        )
        lines.append(
            [key, f"{b[0] / n:.0f} / {h[0] / n:.0f}", f"{b[1] / n * 1000:.1f} ms", f"{h[1] / n * 1000:.1f} ms"]
            + [f"{d * 1000:+.1f} ms", f"{100 * d / diff:.0f}%" if diff > 0 else ""]
        )
    header = ["phase", "calls per update (baseline / HLT-MT)", "baseline", "HLT-MT", "HLT-MT - baseline"]
    print(markdown_table([*header, "share of the difference"], lines))
    return phases, total


def profile_fairseq_train(args):
    """Where HLT-MT's extra time in a real fairseq training step goes (size --profile-size): per
    update, the CPU time of each phase."""
    size, n = args.profile_size, args.profile_updates
    got = run_pair(args, size, n)
    report = {"size": size, "updates": n, "warmup": WARMUP}
    report["phases"], total = _phase_table(got, size, n)
    report["update_ms"] = {k: v * 1000 for k, v in total.items()}
    report["time_ratio"] = total["hltmt"] / total["baseline"]
    return report


def fairseq_train_main(args):
    """``bench.py --fairseq-train``: the training step at each of --train-sizes (and with
    --profile its profile), the table, and --png / --json."""
    print(
        f"# fairseq's training step, {args.device}, OMP_NUM_THREADS={child_env()['OMP_NUM_THREADS']}, torch "
        f"{torch.__version__}, load {os.getloadavg()[0]:.2f}; data {args.data}: --langs {args.langs} --high "
        f"{args.high} --pool-size {args.pool_size}; directions {','.join(high_pairs(args))}",
        flush=True,
    )
    rows = [step_row(args, size) for size in args.train_sizes.split(",")]
    print_step_table(rows)
    out = {"device": args.device, "threads": child_env()["OMP_NUM_THREADS"], "torch": torch.__version__}
    out.update(langs=args.langs, high=args.high, pool_size=args.pool_size, max_tokens=args.max_tokens)
    out.update(updates=args.train_updates, warmup=WARMUP, rows=rows)
    if args.profile:
        out["profile"] = profile_fairseq_train(args)
    if args.png:
        plot_steps(rows, args.png)
    if args.json:
        write_text(args.json, json.dumps(out, indent=1), "--json")
    return 0


def plot_steps(rows, path):
    """Bars: the measured time ratio per size (ticks: its two halves); dots: the arithmetic's."""
    from hltmt_plugin.experiments.plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(rows) + 1.8))
    y = list(range(len(rows)))
    ax.barh(y, [r["cpu_ratio"] - 1 for r in rows], left=1, color="#4c72b0", label="measured (CPU, one process)")
    ax.scatter([r["predicted"] for r in rows], y, color="#dd8452", zorder=3, label="predicted (arithmetic)")
    for i, r in enumerate(rows):
        ax.plot(r["halves"], [i, i], "|", color="black", ms=9)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_yticks(y, [r["size"] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(
        "time ratio HLT-MT / plain transformer of the same size, per update (ticks: the two halves)", fontsize=8
    )
    ax.set_title("fairseq's Trainer.train_step, both systems in one process, updates alternating", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=120, option="--png")
    plt.close(fig)
