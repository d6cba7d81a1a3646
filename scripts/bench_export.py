#!/usr/bin/env python3
"""A checkpoint served by the translator (what ``hltmt-translate`` runs) against its CTranslate2
export (``hltmt-export``, float32 and int8), side by side in one alternating run.

    python scripts/bench_export.py --work /tmp/bench_export --out /tmp/bench_export/result.json

For each model (default: the study's committed MNMT and HLT-MT), the same test sentences
(the first --per-direction segments of each direction of --directions in DebMT-10's test set
that the study's rule keeps: at most 12 English and 16 target words), beam 5, length penalty
1, at most 200 tokens. Every measurement is a process of its own (``--worker``), with
``OMP_NUM_THREADS`` and the engine's threads set to 1 or 2: sentences/s over the translation
only (model loaded), and the process's peak resident memory (load included). Two modes: the
whole set in one call (``batch``: sorted by length and batched by tokens) and one sentence per
call (``single``). The order alternates engines innermost (checkpoint, float32, int8, then the
next mode or thread count), so that a change in the machine's load falls on all three.

Then, from the one-thread batch runs: the lines identical to the checkpoint's, BLEU and chrF
(sacreBLEU) against the references, and the largest difference between the decoder's
log-probabilities of the checkpoint's translations (fairseq's model, teacher-forced) and
CTranslate2's (``score_batch``) on the first 32 sentences.
"""

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "docs", "results", "cpu-study", "models")
RAW = os.path.join(ROOT, "data", "debmt10")
ENGINES = ("checkpoint", "float32", "int8")


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
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--items", help=argparse.SUPPRESS)
    p.add_argument("--mode", help=argparse.SUPPRESS)
    p.add_argument("--hyp", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.per_direction < 1 or args.beam < 1:
        p.error("--per-direction and --beam must be at least 1")
    return args


def short(en: str, xx: str, max_en: int = 12, max_xx: int = 16) -> bool:
    """The study's rule for a segment pair it keeps."""
    return 0 < len(en.split()) <= max_en and 0 < len(xx.split()) <= max_xx


def select_items(directions, per_direction):
    """[(src, tgt, text, reference)]: the first ``per_direction`` short test segments of each direction."""
    items = []
    for direction in directions:
        src, tgt = direction.split("-")
        other = tgt if src == "en" else src
        with (
            open(os.path.join(RAW, f"test.en-{other}.{src}"), encoding="utf-8") as f_src,
            open(os.path.join(RAW, f"test.en-{other}.{tgt}"), encoding="utf-8") as f_tgt,
        ):
            pairs = [(a.strip(), b.strip()) for a, b in zip(f_src, f_tgt)]
        kept = [(a, b) for a, b in pairs if short(a if src == "en" else b, b if src == "en" else a)]
        items += [(src, tgt, a, b) for a, b in kept[:per_direction]]
    return items


# ---- the worker: one engine, one thread count, one mode ----------------------------------


def peak_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def worker(args) -> None:
    import logging

    logging.disable(logging.WARNING)
    import torch

    from hltmt_plugin.hub import HltmtTranslator

    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    torch.set_num_threads(threads)
    with open(args.items, encoding="utf-8") as f:
        items = [tuple(i[:3]) for i in json.load(f)]
    start = time.perf_counter()
    exported = os.path.isdir(args.model)
    options = {"threads": threads} if exported else {"device": "cpu", "spm": args.spm}
    mt = HltmtTranslator.load(args.model, **options)
    loaded = time.perf_counter()
    if args.mode == "batch":
        texts = mt.translate_batch(items, beam=args.beam, max_tokens=4000)
    else:
        texts = [mt.translate_batch([item], beam=args.beam)[0] for item in items]
    done = time.perf_counter()
    with open(args.hyp, "w", encoding="utf-8") as f:
        json.dump(texts, f, ensure_ascii=False)
    print(
        json.dumps(
            {
                "load_s": loaded - start,
                "translate_s": done - loaded,
                "sentences": len(items),
                "sent_per_s": len(items) / (done - loaded),
                "peak_mib": peak_mib(),
            }
        )
    )


# ---- the run ---------------------------------------------------------------------------


def measure(args, name, model, engine, threads, mode, items_path):
    hyp = os.path.join(args.work, f"{name}.{engine}.{threads}t.{mode}.json")
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        "--work",
        args.work,
        "--model",
        model,
        "--items",
        items_path,
        "--mode",
        mode,
        "--hyp",
        hyp,
        "--beam",
        str(args.beam),
    ]
    if args.spm:
        cmd += ["--spm", args.spm]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if done.returncode != 0:
        sys.exit(
            f"bench_export: error: {name} {engine} {threads} thread(s) {mode} failed: "
            f"{(done.stderr.strip().splitlines() or ['?'])[-1]}"
        )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result.update(model=name, engine=engine, threads=threads, mode=mode, hyp=hyp)
    print(
        f"{name:6s} {engine:10s} {threads}t {mode:6s} {result['sent_per_s']:7.2f} sent/s  "
        f"peak {result['peak_mib']:7.1f} MiB  load {result['load_s']:.1f} s",
        flush=True,
    )
    return result


def export_all(args, models):
    from hltmt_plugin.export.ctranslate2 import export

    paths = {}
    for name, checkpoint in models.items():
        paths[(name, "checkpoint")] = checkpoint
        for quantization in ("float32", "int8"):
            folder = os.path.join(args.work, f"{name}-{quantization}")
            export(checkpoint, folder, quantization=quantization, spm=args.spm, force=True)
            paths[(name, quantization)] = folder
    return paths


def sizes(paths):
    def size(path):
        if os.path.isfile(path):
            return os.path.getsize(path)
        return sum(os.path.getsize(os.path.join(r, n)) for r, _, names in os.walk(path) for n in names)

    return {f"{name}/{engine}": size(path) for (name, engine), path in paths.items()}


def quality(runs, items):
    """Identical lines, BLEU and chrF of every engine's one-thread batch output."""
    import sacrebleu

    refs = [i[3] for i in items]
    out = {}
    for run in runs:
        if run["threads"] != 1 or run["mode"] != "batch":
            continue
        with open(run["hyp"], encoding="utf-8") as f:
            hyps = [h or "" for h in json.load(f)]
        out[(run["model"], run["engine"])] = hyps
    table = {}
    for (name, engine), hyps in out.items():
        base = out[(name, "checkpoint")]
        table[f"{name}/{engine}"] = {
            "identical": sum(a == b for a, b in zip(hyps, base)),
            "lines": len(hyps),
            "bleu": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2),
            "chrf": round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2),
        }
    return table


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
        source, _, _ = ct._source(src, tgt, text, True)
        symbols = [ct.symbols[i] for i in target[:-1].tolist()]
        scored = ct.models[ct.record["targets"][tgt]].score_batch([source], [symbols])[0].log_probs
        worst = max(worst, max(abs(a - b) for a, b in zip(lprobs.tolist(), scored)))
    return worst


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    models = dict(pair.split("=", 1) for pair in args.models.split(","))
    os.makedirs(args.work, exist_ok=True)
    items = select_items(args.directions.split(","), args.per_direction)
    items_path = os.path.join(args.work, "items.json")
    with open(items_path, "w", encoding="utf-8") as f:
        json.dump(items, f, ensure_ascii=False)
    print(f"{len(items)} sentences ({args.directions}); exporting", flush=True)
    paths = export_all(args, models)
    runs = []
    for name in models:
        for threads in [int(t) for t in args.threads.split(",")]:
            for mode in args.modes.split(","):
                for engine in ENGINES:  # alternating: the three engines back to back
                    runs.append(measure(args, name, paths[(name, engine)], engine, threads, mode, items_path))
    gaps = {
        f"{name}/{q}": logprob_gap(models[name], paths[(name, q)], items, args.spm)
        for name in models
        for q in ("float32", "int8")
    }
    result = {
        "sentences": len(items),
        "directions": args.directions,
        "beam": args.beam,
        "runs": runs,
        "quality": quality(runs, items),
        "sizes": sizes(paths),
        "max_logprob_diff": gaps,
        "command": " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]),
    }
    out = args.out or os.path.join(args.work, "result.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: result[k] for k in ("quality", "sizes", "max_logprob_diff")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
