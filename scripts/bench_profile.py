"""The real fairseq training step of the plain transformer and HLT-MT in one process, and
where HLT-MT's extra time in it goes.

:func:`profile_pair_child` (run as ``python scripts/bench.py --profile-pair-child SPEC``, see
:func:`run_pair`) builds fairseq's own Trainer of both systems as fairseq-train builds them,
feeds them the same batches with the updates alternating one by one, and times or profiles
the updates: phases (CPU time of fairseq's and the plugin's methods), cProfile (Python
functions), torch.profiler (operators). :func:`profile_fairseq_train` (``bench.py
--fairseq-train --profile DIR``) prints and returns the three tables."""

import cProfile
import json
import os
import subprocess
import sys
import time

from bench_systems import BENCH, BenchError, fairseq_train_cmd
from timing import child_env, markdown_table, span, stamp

# (phase, module, owner, attribute) of the methods timed as phases of a training step, an
# attribute None for a module-level function (owner is then its name); indented phases are
# parts of the one above them
PHASE_SPOTS = [
    ("update (Trainer.train_step)", "fairseq.trainer", "Trainer", "train_step"),
    ("  task.train_step", "fairseq.tasks.fairseq_task", "FairseqTask", "train_step"),
    ("  task.train_step", "hltmt_plugin.tasks.hltmt_translation", "HltmtTranslationTask", "train_step"),
    (
        "    criterion forward (model + loss)",
        "fairseq.criterions.label_smoothed_cross_entropy",
        "LabelSmoothedCrossEntropyCriterion",
        "forward",
    ),
    (
        "    criterion forward (model + loss)",
        "hltmt_plugin.criterions.hltmt_cross_entropy",
        "HltmtCrossEntropyCriterion",
        "forward",
    ),
    ("      model forward", "fairseq.models.transformer.transformer_base", "TransformerModelBase", "forward"),
    ("      model forward", "hltmt_plugin.models.hltmt_transformer", "HltmtTransformerModel", "forward"),
    ("        encoder", "fairseq.models.transformer.transformer_encoder", "TransformerEncoderBase", "forward"),
    ("        encoder", "hltmt_plugin.models.hltmt_transformer", "HltmtTransformerEncoder", "forward"),
    ("        encoder", "hltmt_plugin.models.encoder", "HltmtTransformerEncoder", "forward"),
    ("          language record (per batch)", "hltmt_plugin.languages", "LanguageTable", "record"),
    (
        "        decoder layers + SLP",
        "fairseq.models.transformer.transformer_decoder",
        "TransformerDecoderBase",
        "extract_features",
    ),
    (
        "        decoder layers + SLP",
        "hltmt_plugin.models.hltmt_transformer",
        "HltmtTransformerDecoder",
        "extract_features",
    ),
    ("        decoder layers + SLP", "hltmt_plugin.models.decoder", "HltmtTransformerDecoder", "extract_features"),
    (
        "          decoder layers",
        "fairseq.models.transformer.transformer_decoder",
        "TransformerDecoderBase",
        "extract_features_scriptable",
    ),
    ("          SLP routing decision", "hltmt_plugin.pool.router", "LanguageRouter", "forward"),
    ("            route plan (RoutePlan)", "hltmt_plugin.routing", "RoutePlan", "__init__"),
    ("            module ids", "hltmt_plugin.pool.router", "LanguageRouter", "module_ids"),
    ("          SLP modules", "hltmt_plugin.pool.modules", "SelectiveLanguagePool", "forward"),
    (
        "        output projection",
        "fairseq.models.transformer.transformer_decoder",
        "TransformerDecoderBase",
        "output_layer",
    ),
    (
        "      log-softmax (get_lprobs_and_target)",
        "fairseq.criterions.label_smoothed_cross_entropy",
        "LabelSmoothedCrossEntropyCriterion",
        "get_lprobs_and_target",
    ),
    ("      label-smoothed NLL", "fairseq.criterions.label_smoothed_cross_entropy", "label_smoothed_nll_loss", None),
    ("      label-smoothed NLL", "hltmt_plugin.criterions.hltmt_cross_entropy", "label_smoothed_nll_loss", None),
    ("    backward", "fairseq.optim.fairseq_optimizer", "FairseqOptimizer", "backward"),
    ("  HLT-MT: idle-gradient rule, note", "hltmt_plugin.tasks.distributed", "IdleGradients", "note"),
    ("  clip_grad_norm", "fairseq.trainer", "Trainer", "clip_grad_norm"),
    ("  task.optimizer_step", "fairseq.tasks.fairseq_task", "FairseqTask", "optimizer_step"),
    ("  task.optimizer_step", "hltmt_plugin.tasks.hltmt_translation", "HltmtTranslationTask", "optimizer_step"),
    ("    HLT-MT: idle-gradient rule, drop", "hltmt_plugin.tasks.distributed", "IdleGradients", "drop"),
    ("    Adam step", "fairseq.optim.adam", "Adam", "step"),
    ("  set_num_updates", "fairseq.trainer", "Trainer", "set_num_updates"),
    ("  logging outputs (reduce and log)", "fairseq.trainer", "Trainer", "_reduce_and_log_stats"),
]


def _phase_patches():
    """(key, owner, attribute) of the methods timed as phases of a training step: fairseq's and,
    where they exist, the plugin's (a key's nested calls count once: the outermost)."""
    import importlib

    def get(module, *path):
        try:
            obj = importlib.import_module(module)
            for name in path:
                obj = getattr(obj, name)
            return obj
        except (ImportError, AttributeError):
            return None

    out = []
    for key, module, owner, attr in PHASE_SPOTS:
        if attr is None:  # a module-level function
            target = get(module)
            if target is not None and hasattr(target, owner):
                out.append((key, target, owner))
        else:
            target = get(module, owner)
            if target is not None and attr in vars(target):
                out.append((key, target, attr))
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
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    trainer = Trainer(cfg, task, model, criterion)
    _, epoch_itr = checkpoint_utils.load_checkpoint(cfg.checkpoint, trainer)
    trainer.begin_epoch(epoch_itr.epoch)
    return trainer, epoch_itr


class PairUpdates:
    """Training updates of several systems' fairseq Trainers, each under one tool: "phases"
    (the update's wall and CPU time, with the phase timers on), "cprofile" (Python functions),
    "torch" (operators, torch.profiler), or None (a warm-up update, nothing noted)."""

    def __init__(self, trainers, active, words):
        names = list(trainers)
        self.trainers, self.active = trainers, active
        self.out = {
            "cpu": {name: 0.0 for name in names},
            "wall": {name: 0.0 for name in names},
            "update_cpu": {name: [] for name in names},
            "words": words,
        }
        self.profs = {name: cProfile.Profile() for name in names}
        self.ops = {name: {} for name in names}

    def update(self, name, sample, tool):
        from fairseq import metrics

        trainer = self.trainers[name]
        if tool == "cprofile":
            self.profs[name].enable()
        start = stamp()
        self.active["on"] = name if tool == "phases" else None
        try:
            with metrics.aggregate("train_inner"):
                if tool == "torch":
                    self._operators(name, trainer, sample)
                else:
                    trainer.train_step([sample])
        finally:
            self.active["on"] = None
            if tool == "cprofile":
                self.profs[name].disable()
            if tool == "phases":
                spent = span(start, stamp())
                self.out["cpu"][name] += spent["cpu"]
                self.out["wall"][name] += spent["wall"]
                self.out["update_cpu"][name].append(spent["cpu"])

    def _operators(self, name, trainer, sample):
        """One update under torch.profiler; its operators' own time and calls added to ``ops``."""
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            trainer.train_step([sample])
        for e in prof.key_averages():
            got = self.ops[name].setdefault(e.key, {"self_us": 0.0, "count": 0})
            got["self_us"] += e.self_cpu_time_total
            got["count"] += e.count


def profile_pair_child(spec_path):
    """The real fairseq training step of both systems in one process: fairseq's own Trainer
    (task.train_step, criterion, backward, clip, task.optimizer_step with fairseq's Adam) of the
    baseline and of HLT-MT, built as fairseq-train builds them, fed the same batches, updates
    alternating one by one so that the machine's noise hits both alike. Three passes over the
    same updates: phases (CPU time of fairseq's and the plugin's methods), cProfile (Python
    functions), torch.profiler (operators)."""
    with open(spec_path) as f:
        spec = json.load(f)
    import hltmt_plugin  # noqa: F401

    records, active = {}, {"on": None}
    _install_phase_timers(records, active)
    names = list(spec["argv"])
    trainers = {}
    for name in names:
        trainers[name], epoch_itr = build_trainer(spec["argv"][name])
    itr = epoch_itr.next_epoch_itr(shuffle=True)  # the last one built; every system's batches are the same
    warm, n = spec["warmup"], spec["updates"]
    samples = [next(itr) for _ in range(warm + n)]
    pair = PairUpdates(trainers, active, sum(int(s["ntokens"]) for s in samples[warm:]))
    for i, sample in enumerate(samples[:warm]):
        for name in names:
            pair.update(name, sample, None)
    for tool in spec["tools"]:
        for i, sample in enumerate(samples[warm:]):
            for name in names if i % 2 == 0 else names[::-1]:
                pair.update(name, sample, tool)
    out = pair.out
    out["phases"] = records
    out["ops"] = pair.ops
    if "cprofile" in spec["tools"]:
        for name in names:
            pair.profs[name].dump_stats(f"{spec['out']}.{name}.prof")
    with open(spec["out"], "w") as f:
        json.dump(out, f)
    return 0


def _function_stats(path):
    """Calls and own time of each Python function of a cProfile dump, by "file:line name"."""
    import pstats

    return {
        f"{os.path.basename(file)}:{line} {func}": (nc, tt)
        for (file, line, func), (_cc, nc, tt, _ct, _callers) in pstats.Stats(path).stats.items()
    }


def run_pair(args, size, n, tools, out):
    """profile_pair_child for both systems at one size; its result."""
    import tempfile

    with tempfile.TemporaryDirectory() as save:
        spec_path = os.path.join(save, "spec.json")
        with open(spec_path, "w") as f:
            json.dump(
                {
                    "warmup": 3,
                    "updates": n,
                    "out": out,
                    "tools": tools,
                    "argv": {
                        name: fairseq_train_cmd(args, name, size, os.path.join(save, name), 10**6)
                        for name in ("baseline", "hltmt")
                    },
                },
                f,
            )
        done = subprocess.run(
            [sys.executable, BENCH, "--profile-pair-child", spec_path], capture_output=True, text=True, env=child_env()
        )
    if done.returncode != 0:
        raise BenchError(f"the training steps of {size} in one process failed:\n{(done.stdout + done.stderr)[-3000:]}")
    with open(out) as f:
        return json.load(f)


def _phase_table(got, size, n):
    """Print the CPU time per update of each phase of both systems; (the phases' figures,
    each system's CPU time per update)."""
    records = got["phases"]
    order = []
    for key, _owner, _attr in _phase_patches():
        if key not in order:
            order.append(key)
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
        b, h = (records.get(name, {}).get(key, [0, 0.0]) for name in ("baseline", "hltmt"))
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
            [
                key,
                f"{b[0] / n:.0f} / {h[0] / n:.0f}",
                f"{b[1] / n * 1000:.1f} ms",
                f"{h[1] / n * 1000:.1f} ms",
                f"{d * 1000:+.1f} ms",
                f"{100 * d / diff:.0f}%" if diff > 0 else "",
            ]
        )
    header = ["phase", "calls per update (baseline / HLT-MT)", "baseline", "HLT-MT", "HLT-MT - baseline"]
    print(markdown_table([*header, "share of the difference"], lines))
    return phases, total


def _differences(what, stats, n, top):
    """Print the ``top`` of ``what`` (functions or operators) whose own time per update differs
    most between the systems (``stats``: {system: {name: (calls, seconds)}}); their figures."""
    zero = (0, 0.0)
    names = sorted(
        set(stats["baseline"]) | set(stats["hltmt"]),
        key=lambda k: stats["hltmt"].get(k, zero)[1] - stats["baseline"].get(k, zero)[1],
        reverse=True,
    )
    figures, lines = [], []
    for k in names[:top]:
        (bc, bs), (hc, hs) = stats["baseline"].get(k, zero), stats["hltmt"].get(k, zero)
        figures.append({what: k, "baseline_ms": bs / n * 1000, "hltmt_ms": hs / n * 1000, "calls": [bc / n, hc / n]})
        lines.append(
            [k, f"{bc / n:.0f} / {hc / n:.0f}", f"{bs / n * 1000:.2f} ms", f"{hs / n * 1000:.2f} ms"]
            + [f"{(hs - bs) / n * 1000:+.2f} ms"]
        )
    label = "function (file:line name)" if what == "function" else what
    print(markdown_table([label, "calls per update (baseline / HLT-MT)", "baseline", "HLT-MT", "difference"], lines))
    return figures


def _function_table(out, n, top):
    """Print the ``top`` Python functions whose own time per update differs most (cProfile
    dumps ``out.NAME.prof``); their figures."""
    print(
        "\nPython functions whose own time per update differs most (cProfile, which slows Python calls: "
        "compare the two columns, not with the phases):\n"
    )
    stats = {name: _function_stats(f"{out}.{name}.prof") for name in ("baseline", "hltmt")}
    return _differences("function", stats, n, top)


def _operator_table(ops, n, top):
    """Print the operators' total self time per update and the ``top`` operators whose time
    differs most (torch.profiler); (their figures, the totals in ms)."""
    tb, th = (sum(v["self_us"] for v in ops[name].values()) / n / 1000 for name in ("baseline", "hltmt"))
    print(
        f"\nOperators (torch.profiler, self time per update): baseline {tb:.1f} ms, HLT-MT {th:.1f} ms "
        f"({th / tb:.3f}x); those whose time differs most:\n"
    )
    stats = {name: {o: (v["count"], v["self_us"] / 1e6) for o, v in ops[name].items()} for name in ops}
    return _differences("operator", stats, n, top), {"baseline": tb, "hltmt": th}


def profile_fairseq_train(args):
    """Where HLT-MT's extra time in a real fairseq training step goes (size --profile-size):
    fairseq's Trainer of both systems in one process, updates alternating (see
    profile_pair_child); per update, the CPU time of each phase, then the Python functions
    (cProfile) and the operators (torch.profiler) whose own time differs most."""
    os.makedirs(args.profile, exist_ok=True)
    size, n, warm = args.profile_size, args.profile_updates, 3
    out = os.path.join(args.profile, f"{size}.json")
    got = run_pair(args, size, n, ["phases", "cprofile", "torch"], out)
    report = {"size": size, "updates": n, "warmup": warm}
    report["phases"], total = _phase_table(got, size, n)
    report["update_ms"] = {k: v * 1000 for k, v in total.items()}
    report["time_ratio"] = total["hltmt"] / total["baseline"]
    report["functions"] = _function_table(out, n, args.profile_top)
    report["operators"], report["operator_totals_ms"] = _operator_table(got["ops"], n, args.profile_top)
    return report
