#!/usr/bin/env python3
"""A checkpoint served by the translator (what ``hltmt-translate`` runs) against its CTranslate2
export (``hltmt-export``, float32 and int8) and its transformers export, side by side in one
alternating run.

    python scripts/bench_export.py --work /tmp/bench_export --out /tmp/bench_export/result.json

For each model (default: the study's committed MNMT and HLT-MT), the same test sentences
(the first --per-direction segments of each direction of --directions in DebMT-10's test set
that the study's rule keeps: at most 12 English and 16 target words), beam 5, length penalty
1, at most 200 tokens. Every measurement is a process of its own (``timing.run_child``), with
``OMP_NUM_THREADS`` and the engine's threads set to 1 or 2: sentences/s over the translation
only (model loaded), and the process's peak resident memory (load included). Two modes: the
whole set in one call (``batch``: sorted by length and batched by tokens) and one sentence per
call (``single``). The order alternates engines innermost (checkpoint, float32, int8, then the
next mode or thread count), so that a change in the machine's load falls on all of them. Beside
each CTranslate2 run its raw ceiling (``raw_sent_per_s``): CTranslate2's ``translate_batch``
called directly on the same tokens, groups and search, so that the translator's own cost shows.
``--fixed-len``: no end of sentence before --max-len tokens, then the end (``min_len=max_len``:
fairseq's --min-len, CTranslate2's min_decoding_length, generate's min_new_tokens), the same
work on every engine whatever the weights.

Then, from the one-thread batch runs: the lines identical to the checkpoint's, BLEU and chrF
(sacreBLEU) against the references, and the largest difference between the decoder's
log-probabilities of the checkpoint's translations (fairseq's model, teacher-forced) and
CTranslate2's (``score_batch``) on the first 32 sentences.

``--via command``: every measurement is the ``hltmt-translate`` command itself (the lines as a
``SRC<TAB>TGT<TAB>TEXT`` file, ``--buffer-size 1`` for one sentence at a time): its rate is the
command's own summary line, its start-up the process's wall time less the translation, its peak
memory the process's. ``--serve-env VENV`` runs the exports' commands from another environment
(the serving install, ``serving/``: no torch, no fairseq).

``--paper-size``: the models are built here, untrained, at the size of the WMT-10 recipe
(``hltmt-main-job --size base``: fairseq's ``transformer`` and HLT-MT's ``hltmt_transformer``,
6 + 6 layers of width 512, the recipe's pool of 3 modules over its 6 high-resource languages),
with a dictionary of 64,000 pieces (the study's sentencepiece pieces and fairseq's
``madeupword`` fill); HLT-MT's routing map spreads the 6 languages over the 3 modules. Untrained
weights never end a sentence, so every translation runs to ``--max-len`` tokens. The memory of
HLT-MT's export is measured as well: all its groups loaded, one group, and one group loaded
twice (whether CTranslate2 shares weights between two translators).
"""

import argparse
import json
import os
import re
import sys
import time

from hltmt_plugin import records
from hltmt_plugin.atomic_files import write_text
from hltmt_plugin.errors import HltmtError
from timing import BenchError, child_env, child_main, rss_mib, run_child, run_measured

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "docs", "results", "cpu-study", "models")
RAW = os.path.join(ROOT, "data", "debmt10")
ENGINES = ("checkpoint", "float32", "int8", "transformers")


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="bench_export", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--work", required=True, help="folder for the exports, sentences and hypotheses")
    p.add_argument("--out", default=None, help="the result as JSON (default: WORK/result.json)")
    p.add_argument(
        "--models",
        default=f"mnmt={MODELS}/mnmt.pt,hltmt={MODELS}/hltmt.pt",
        help="NAME=CHECKPOINT,... (default: the study's MNMT and HLT-MT)",
    )
    p.add_argument("--directions", default="en-de,en-fr,en-gu")
    p.add_argument("--per-direction", type=int, default=100)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--modes", default="batch,single")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--spm", default=None, help="sentencepiece model (default: found beside the checkpoint)")
    p.add_argument("--max-len", type=int, default=200, help="the most tokens of a translation")
    p.add_argument("--fixed-len", action="store_true", help="every translation exactly --max-len tokens (see above)")
    p.add_argument("--via", default="api", choices=["api", "command"], help="what is measured (see above)")
    p.add_argument("--serve-env", default=None, help="the environment whose hltmt-translate serves the exports")
    p.add_argument("--paper-size", action="store_true", help="untrained models of the recipe's size (see above)")
    p.add_argument("--no-quality", action="store_true", help="leave out BLEU and the log-probability check")
    args = p.parse_args(argv)
    if args.per_direction < 1 or args.beam < 1 or args.max_len < 1:
        p.error("--per-direction, --beam and --max-len must be at least 1")
    if args.fixed_len and args.via == "command":
        p.error("--fixed-len measures the API (hltmt-translate has no --min-len)")
    return args


def select_items(directions, per_direction):
    """[(src, tgt, text, reference)]: the first ``per_direction`` short test segments of each
    direction (hltmt-prepare-data's --segment-words 12,16)."""
    from hltmt_plugin.cli.prepare_data import load_pair
    from hltmt_plugin.experiments.recipe import SHORT_SEGMENTS

    items = []
    for direction in directions:
        src, tgt = direction.split("-")
        other = tgt if src == "en" else src
        en, xx = load_pair(RAW, "test", other, per_direction, SHORT_SEGMENTS)
        pairs = zip(en, xx) if src == "en" else zip(xx, en)
        items += [(src, tgt, a.strip(), b.strip()) for a, b in pairs]
    return items


# ---- the child: one engine, one thread count, one mode ----------------------------------


def translate_child(spec) -> dict:
    """One measurement (``spec``: the model, the items, the mode, the search, where the lines
    go), in a process of its own at ``OMP_NUM_THREADS`` threads: its figures."""
    import logging

    logging.disable(logging.WARNING)
    from hltmt_plugin.hub import HltmtTranslator

    threads, model = int(os.environ.get("OMP_NUM_THREADS", "1")), spec["model"]
    exported = os.path.isdir(model)
    if not exported:  # a checkpoint: torch's threads (an export imports no torch)
        import torch

        torch.set_num_threads(threads)
    items = [tuple(i[:3]) for i in spec["items"]]
    start = time.perf_counter()
    mt = HltmtTranslator.load(model, **({"threads": threads} if exported else {"device": "cpu", "spm": spec["spm"]}))
    loaded, cpu = time.perf_counter(), time.process_time()
    search = dict(beam=spec["beam"], max_len=spec["max_len"], min_len=spec["max_len"] if spec["fixed_len"] else 1)
    if spec["mode"] == "batch":
        texts = mt.translate_batch(items, max_tokens=4000, **search)
    else:
        texts = [mt.translate_batch([item], **search)[0] for item in items]
    done, cpu = time.perf_counter(), time.process_time() - cpu
    raw = raw_ceiling(mt, items, spec["mode"], search) if getattr(mt, "engine", "") == "ctranslate2" else None
    write_text(spec["hyp"], json.dumps(texts, ensure_ascii=False))
    return {
        "load_s": loaded - start,
        "translate_s": done - loaded,
        "sentences": len(items),
        "sent_per_s": len(items) / (done - loaded),
        "translate_cpu_s": cpu,  # this process's CPU time: at one thread, what other processes' load leaves out
        "sent_per_cpu_s": len(items) / cpu,
        "peak_mib": rss_mib()[1],
        "raw_sent_per_s": raw and len(items) / raw,  # CTranslate2 alone on the same tokens
    }


def raw_ceiling(mt, items, mode, search) -> float:
    """Seconds CTranslate2's own ``translate_batch`` takes on the tokens the translator gives it
    (the same groups, sources, target prefixes and search): the translator's cost is the rest."""
    from hltmt_plugin.hub import arguments
    from hltmt_plugin.hub.ct2_engine import ENGINE_BATCH_TOKENS, decoding

    checked = arguments.search(**search)
    _, prepared = mt._prepare_items(items, 1)
    by_group = {}
    for index, source in prepared:
        by_group.setdefault(mt.batch_key(items[index][1]), []).append((items[index][1], source))
    calls = [(g, rows) for g, rows in by_group.items()]
    calls = calls if mode == "batch" else [(g, [row]) for g, rows in calls for row in rows]
    prefix = mt.record["decoder_langtok"]
    start = time.perf_counter()
    for group, rows in calls:
        mt.models[group].translate_batch(
            [source for _, source in rows],
            target_prefix=[[mt.record["language_tokens"][tgt]] for tgt, _ in rows] if prefix else None,
            max_batch_size=ENGINE_BATCH_TOKENS,
            batch_type="tokens",
            return_scores=True,
            **decoding(checked, prefix),
        )
    return time.perf_counter() - start


# ---- the run ---------------------------------------------------------------------------


def measure(args, name, model, engine, threads, mode, items):
    if args.via == "command":
        result = measure_command(args, model, engine, threads, mode, items)
    else:
        result = measure_api(args, model, threads, mode, items, f"{name}.{engine}.{threads}t.{mode}")
    result.update(model=name, engine=engine, threads=threads, mode=mode)
    raw = f" (raw {result['raw_sent_per_s']:.2f})" if result.get("raw_sent_per_s") else ""
    print(
        f"{name:10s} {engine:12s} {threads}t {mode:6s} {result['sent_per_s']:7.2f} sent/s{raw} "
        f"({result.get('sent_per_cpu_s', 0):7.2f} per CPU s)  "
        f"peak {result['peak_mib']:7.1f} MiB  load {result['load_s']:.1f} s",
        flush=True,
    )
    return result


def measure_api(args, model, threads, mode, items, stem):
    """:func:`translate_child` in a process of its own at ``threads`` threads: its figures."""
    spec = dict(model=model, items=items, mode=mode, spm=args.spm, beam=args.beam, max_len=args.max_len)
    spec.update(fixed_len=args.fixed_len, hyp=os.path.abspath(os.path.join(args.work, f"{stem}.json")))
    return dict(run_child(__file__, "translate", spec, env=child_env(threads), what=stem), hyp=spec["hyp"])


SUMMARY = re.compile(r"(\d+) of (\d+) sentence\(s\) translated in ([\d.]+) s: ([\d.]+) sentences/s")


def translate_command(args, engine: str) -> str:
    """The hltmt-translate that serves ``engine``: this environment's, or --serve-env's for an export."""
    env = (
        args.serve_env
        if args.serve_env and engine != "checkpoint"
        else os.path.dirname(os.path.dirname(sys.executable))
    )
    return os.path.join(env, "bin", "hltmt-translate")


def measure_command(args, model, engine, threads, mode, items):
    """One run of the hltmt-translate command on the items' file (:func:`write_items`): its rate
    (its summary line), start-up (wall time less the translation) and peak resident memory."""
    tsv, hyp = os.path.join(args.work, "items.tsv"), os.path.join(args.work, f"{os.getpid()}.out")
    cmd = [translate_command(args, engine), "--checkpoint", model, "--input", tsv, "--output", hyp]
    cmd += ["--beam", str(args.beam), "--max-len", str(args.max_len), "--no-progress"]
    cmd += ["--threads", str(threads)] if engine != "checkpoint" else ["--device", "cpu"]
    cmd += (["--spm", args.spm] if args.spm and engine == "checkpoint" else []) + (
        ["--buffer-size", "1"] if mode == "single" else []
    )
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONWARNINGS": "ignore"}
    done = run_measured(cmd, env=env, cwd=args.work)
    found = SUMMARY.search(done.err)
    if done.code != 0 or found is None:
        raise BenchError(f"{' '.join(cmd[:3])} failed: {(done.err.strip().splitlines() or ['?'])[-1]}")
    with open(hyp, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    os.remove(hyp)
    stem = f"{os.path.basename(model)}.{engine}.{threads}t.{mode}"
    write_text(os.path.join(args.work, f"{stem}.json"), json.dumps(lines, ensure_ascii=False))
    sentences, rate = int(found.group(2)), float(found.group(4))
    return {
        "cpu_s": done.cpu_s,  # the whole process's, load included
        "load_s": done.wall_s - sentences / rate,
        "translate_s": sentences / rate,
        "wall_s": done.wall_s,
        "sentences": sentences,
        "sent_per_s": rate,
        "peak_mib": done.peak_mib,
        "hyp": os.path.join(args.work, f"{stem}.json"),
    }


def export_all(args, models):
    from hltmt_plugin.export import ctranslate2, transformers

    paths = {}
    for name, checkpoint in models.items():
        paths[(name, "checkpoint")] = checkpoint
        for quantization in ("float32", "int8"):
            folder = os.path.join(args.work, f"{name}-{quantization}")
            ctranslate2.export(checkpoint, folder, quantization=quantization, spm=args.spm, force=True)
            paths[(name, quantization)] = folder
        paths[(name, "transformers")] = os.path.join(args.work, f"{name}-transformers")
        transformers.export(checkpoint, paths[(name, "transformers")], spm=args.spm, force=True)
    return paths


def sizes(paths):
    def size(path):
        if os.path.isfile(path):
            return os.path.getsize(path)
        return sum(os.path.getsize(os.path.join(r, n)) for r, _, names in os.walk(path) for n in names)

    return {f"{name}/{engine}": size(path) for (name, engine), path in paths.items()}


def run_lines(runs) -> dict:
    """{(model, engine, threads, mode): the lines the run wrote}, each run's file read once."""
    return {
        (run["model"], run["engine"], run["threads"], run["mode"]): records.parse_json(
            records.read_text(run["hyp"], "a run's lines"), run["hyp"]
        )
        for run in runs
    }


def identical_lines(runs, lines):
    """Each run's ``identical_to_checkpoint``: its ``lines`` (:func:`run_lines`) equal to the
    checkpoint's of the same model, threads and mode."""
    for run in runs:
        base = lines[(run["model"], "checkpoint", run["threads"], run["mode"])]
        mine = lines[(run["model"], run["engine"], run["threads"], run["mode"])]
        run["identical_to_checkpoint"] = sum(a == b for a, b in zip(mine, base))


def quality(runs, items, lines):
    """Identical lines, BLEU and chrF of every engine's one-thread batch output (``lines``:
    :func:`run_lines`; the runs' ``identical_to_checkpoint`` set by :func:`identical_lines`)."""
    from hltmt_plugin.experiments.recipe import score

    refs = [i[3] for i in items]
    table = {}
    for run in runs:
        if run["threads"] != 1 or run["mode"] != "batch":
            continue
        hyps = [h or "" for h in lines[(run["model"], run["engine"], 1, "batch")]]
        scores = score(hyps, refs)
        table[f"{run['model']}/{run['engine']}"] = {
            "identical": run["identical_to_checkpoint"],
            "lines": len(hyps),
            "bleu": round(scores["bleu"], 2),
            "chrf": round(scores["chrf"], 2),
        }
    return table


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def commit() -> str:
    """The checkout's commit (with ``+`` when its files differ from it), or ``?`` outside git."""
    import subprocess

    def git(*words):
        done = subprocess.run(["git", "-C", ROOT, *words], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else None

    head = git("rev-parse", "--short", "HEAD")
    return "?" if head is None else head + ("+" if git("status", "--porcelain", "--untracked-files=no") else "")


def logprob_gap(checkpoint, folder, items, spm, n=32):
    """The largest difference between the token log-probabilities of the checkpoint's own
    translations under fairseq's model (teacher-forced) and under the export (``score_batch``)."""
    import torch

    from hltmt_plugin.hub import HltmtTranslator

    mt = HltmtTranslator.load(checkpoint, spm=spm, device="cpu")
    ct = HltmtTranslator.load(folder, threads=1)
    worst = 0.0
    for src, tgt, text, _ in items[:n]:
        hyp = mt.translate_batch([(src, tgt, text)], beam=5)[0]
        target = mt.encode(hyp)  # the pieces of the translation, with end of sentence
        if ct.record["decoder_langtok"]:
            target = torch.cat([torch.tensor([ct.lang_ids[tgt]]), target])
        sample = next(mt._batches(mt._datasets([(0, src, tgt, mt.encode(text))]), 4000, None))
        prev = torch.cat([torch.tensor([mt.dictionary.eos()]), target[:-1]]).unsqueeze(0)
        with torch.no_grad():
            out = mt.model(**sample["net_input"], prev_output_tokens=prev)
            lprobs = mt.model.get_normalized_probs(out, log_probs=True)[0].gather(1, target.unsqueeze(1)).squeeze(1)
        source = ct.source(src, tgt, ct.encode([text])[0])
        symbols = [ct.symbols[i] for i in target[:-1].tolist()]
        scored = ct.models[ct.record["targets"][tgt]].score_batch([source], [symbols])[0].log_probs
        worst = max(worst, max(abs(a - b) for a, b in zip(lprobs.tolist(), scored)))
    return worst


# ---- the paper's size: untrained models of the WMT-10 recipe ----------------------------------

PAPER_VOCAB = 64000  # the recipe's sentencepiece vocabulary (hltmt-main-job --size base)
PAPER_MAP = [0, 0, 1, 1, 2, 2]  # the recipe's 6 high-resource languages over its 3 pool modules


def recipe_commands(work):
    """{system: fairseq-train options after the data folder} of the WMT-10 recipe at the paper's
    size, from the recipe itself: ``hltmt-main-job --size base``'s MNMT and HLT-MT (both stages in
    one run) over WMT-10's languages and its high-resource split, on the CPU."""
    from hltmt_plugin.corpora import WMT10_HIGH, WMT10_LANGS
    from hltmt_plugin.experiments.main_job import SIZES
    from hltmt_plugin.experiments.recipe import Comparison, directions

    size = SIZES["base"]
    comparison = Comparison(
        os.path.join(work, "recipe", "data", "bin"), WMT10_LANGS, directions(WMT10_LANGS), WMT10_HIGH
    )
    own = {"hltmt": {"high_updates": size.high_updates}, "mnmt": {}}
    return {
        system: comparison.train_args(
            system,
            size,
            seed=1,
            updates=size.high_updates + size.all_updates,
            save_dir=os.path.join(work, "recipe", "models", f"{system}.seed1"),
            options=["--update-freq", str(size.batch_gpus)],
            **options,
        )[1:]
        for system, options in own.items()
    }


def paper_data(work):
    """A data folder of the recipe's languages, each dictionary the study's pieces and fairseq's
    madeupword fill to PAPER_VOCAB entries, and the study's sentencepiece model."""
    from hltmt_plugin.atomic_files import copy_file
    from hltmt_plugin.corpora import WMT10_LANGS

    data = os.path.join(work, "data")
    os.makedirs(data, exist_ok=True)
    with open(os.path.join(MODELS, "dict.en.txt"), encoding="utf-8") as f:
        lines = f.readlines()
    lines += [f"madeupword{i:05d} 0\n" for i in range(PAPER_VOCAB - len(lines))]
    for lang in ["en", *WMT10_LANGS]:
        write_text(os.path.join(data, f"dict.{lang}.txt"), "".join(lines))
    copy_file(os.path.join(MODELS, "spm.model"), os.path.join(data, "spm.model"))
    return data


def build_paper_checkpoint(options, data, path):
    """The model of these fairseq-train options, untrained, saved as fairseq-train saves it."""
    import torch
    from fairseq import options as fairseq_options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    args = fairseq_options.parse_args_and_arch(fairseq_options.get_training_parser(), [data, *options])
    args.fp16 = args.amp = False
    torch.manual_seed(1)
    task = tasks.setup_task(args)
    model = task.build_model(args)
    if getattr(model.decoder, "slp_router", None) is not None:  # the routing map, fixed as at the stage switch
        model.decoder.slp_router.fix_map(torch.tensor(PAPER_MAP))
    cfg = convert_namespace_to_omegaconf(args)
    trainer = Trainer(cfg, task, model, task.build_criterion(cfg.criterion))
    trainer.consolidate_optimizer()  # what fairseq-train does before it saves (sets the optimizer's state)
    trainer.save_checkpoint(path, {})
    return sum(p.numel() for p in model.parameters())


def paper_models(args):
    """{name: checkpoint} of the recipe's HLT-MT and MNMT at its size, built once under --work."""
    import hltmt_plugin

    hltmt_plugin.register()
    work = os.path.join(args.work, "paper")
    data = paper_data(work)
    models = {}
    for system, options in sorted(recipe_commands(work).items()):
        path = os.path.join(work, f"{system}-base.pt")
        if not os.path.exists(path):
            n = build_paper_checkpoint(options, data, path)
            print(f"{system}-base: {n:,} parameters -> {path}", flush=True)
        models[f"{system}-base"] = path
    args.spm = os.path.join(data, "spm.model")
    return models


def memory_child(spec) -> dict:
    """Resident memory of an export's CTranslate2 models loaded in one process: ``spec["model"]``
    the folder, ``spec["mode"]`` all (every group), one (the first group) or twice (the first
    group's folder loaded twice)."""
    import ctranslate2

    from hltmt_plugin.hub.ct2_engine import _patched_files
    from hltmt_plugin.hub.manifest import read

    folder, record = spec["model"], read(spec["model"])
    base = [g for g in record["models"] if g not in record["patches"]][0]
    groups = {"all": list(record["models"]), "one": [base], "twice": [base, base]}[spec["mode"]]
    before = rss_mib()[0]
    kept = [
        ctranslate2.Translator(
            os.path.join(folder, record["models"][g]), files=_patched_files(folder, record, g), intra_threads=1
        )
        for g in groups
    ]
    return {"models": len(kept), "rss_mib": rss_mib()[0], "before_mib": before, "peak_mib": rss_mib()[1]}


def measure_memory(folder):
    """{all, one, twice: memory} of the export ``folder`` (:func:`memory_child` in a process each)."""
    out = {}
    for mode in ("all", "one", "twice"):
        out[mode] = run_child(__file__, "memory", {"model": folder, "mode": mode}, what=f"memory {mode}")
        print(f"memory {os.path.basename(folder)} {mode}: {out[mode]}", flush=True)
    return out


def write_items(args, items):
    """The sentences as SRC<TAB>TGT<TAB>TEXT lines, what the command reads (``--via command``)."""
    write_text(os.path.join(args.work, "items.tsv"), "".join(f"{src}\t{tgt}\t{text}\n" for src, tgt, text, _ in items))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    child = child_main(argv, {"translate": translate_child, "memory": memory_child})
    if child is not None:
        return child
    args = parse_args(argv)
    try:
        return run(args)
    except (BenchError, HltmtError) as error:  # a failed measurement; a model the plugin refuses
        print(f"bench_export: error: {error}", file=sys.stderr)
        return 1


def run(args):
    """Every measurement the options ask for; the result written to --out."""
    os.makedirs(args.work, exist_ok=True)
    started, load_at_start = utc_now(), os.getloadavg()[0]
    models = paper_models(args) if args.paper_size else dict(pair.split("=", 1) for pair in args.models.split(","))
    items = select_items(args.directions.split(","), args.per_direction)
    write_items(args, items)
    print(f"{len(items)} sentences ({args.directions}); exporting", flush=True)
    paths = export_all(args, models)
    runs = []
    for name in models:
        for threads in [int(t) for t in args.threads.split(",")]:
            for mode in args.modes.split(","):
                for engine in ENGINES:  # alternating: the three engines back to back
                    runs.append(measure(args, name, paths[(name, engine)], engine, threads, mode, items))
    gaps = {}
    if not args.no_quality:
        gaps = {
            f"{name}/{q}": logprob_gap(models[name], paths[(name, q)], items, args.spm)
            for name in models
            for q in ("float32", "int8")
        }
    memory = {}
    if args.paper_size:
        memory = {f"{name}/{q}": measure_memory(paths[(name, q)]) for name in models for q in ("float32", "int8")}
    lines = run_lines(runs)
    identical_lines(runs, lines)
    result = {
        "sentences": len(items),
        "directions": args.directions,
        "beam": args.beam,
        "max_len": args.max_len,
        "via": args.via,
        "runs": runs,
        "quality": quality(runs, items, lines),
        "sizes": sizes(paths),
        "max_logprob_diff": gaps,
        "memory": memory,
        "command": " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]),
        "started": started,
        "ended": utc_now(),
        "commit": commit(),
        "load_average_at_start": round(load_at_start, 2),
        "load_average_at_end": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
    }
    write_text(args.out or os.path.join(args.work, "result.json"), json.dumps(result, indent=1), "--out")
    print(json.dumps({k: result[k] for k in ("quality", "sizes", "max_logprob_diff")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
