#!/usr/bin/env python3
"""The main job: DebMT-10 end to end, offline, on the data carried in this repository.

    python scripts/main_job.py --size quick      # (make demo)

Steps: prepare (sentencepiece + binarize) -> train HLT-MT -> decode every direction
(beam 5) -> sacreBLEU + chrF -> results table. Each step announces itself, streams
fairseq's own progress, writes its log under RUN/logs/, and marks itself done; a rerun
resumes after the last completed step. A failed step stops the run with its log's tail.

On 2 CPU cores this shows the pipeline and the mechanics (routing, the map, scores per
direction), not translation quality: the quick model is far from converged.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGIN = os.path.join(ROOT, "hltmt_plugin")
BIN = os.path.dirname(sys.executable)
LANGS = ["fr", "cs", "de", "fi", "lv", "et", "ro", "hi", "tr", "gu"]
HIGH = ["fr", "de", "cs", "tr", "fi", "et"]  # DebMT-10's high-resource languages (data/debmt10/README.md)


@dataclass
class Size:
    max_train: int
    max_test: int
    vocab: int
    arch: str
    max_updates: int
    max_tokens: int
    extra: List[str] = field(default_factory=list)


SIZES: Dict[str, Size] = {
    "quick": Size(max_train=4000, max_test=200, vocab=8000, arch="hltmt_transformer_tiny", max_updates=400,
                  max_tokens=4096),
    "smoke": Size(max_train=300, max_test=20, vocab=1000, arch="hltmt_transformer_tiny", max_updates=10,
                  max_tokens=2048),
}


def say(msg):
    print(f"\n==> [main_job {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class StepFailed(Exception):
    pass


def run_logged(cmd, log_path, stdout_path=None):
    """Run cmd, streaming its output to the console and to log_path; StepFailed on error."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        out = open(stdout_path + ".partial", "w", encoding="utf-8") if stdout_path else None
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT if not out else subprocess.PIPE,
                                text=True, cwd=ROOT)
        if out:  # generation: hypotheses to a file, fairseq's log lines to the console
            import threading

            def pump_err():
                for line in proc.stderr:
                    log.write(line)
                    print(line, end="", flush=True)
            t = threading.Thread(target=pump_err)
            t.start()
            for line in proc.stdout:
                out.write(line)
            t.join()
        else:
            for line in proc.stdout:
                log.write(line)
                print(line, end="", flush=True)
        code = proc.wait()
        if out:
            out.close()
    if code != 0:
        tail = open(log_path, encoding="utf-8").read().splitlines()[-25:]
        raise StepFailed(f"command failed (exit {code}); last lines of {log_path}:\n" + "\n".join(tail))
    if stdout_path:
        os.replace(stdout_path + ".partial", stdout_path)


class Job:
    def __init__(self, args):
        self.args = args
        self.size = SIZES[args.size]
        self.run_dir = os.path.abspath(args.run_dir or os.path.join(ROOT, "runs", f"debmt10-{args.size}"))
        self.data = os.path.join(self.run_dir, "data", "bin")
        self.logs = os.path.join(self.run_dir, "logs")
        self.directions = [f"en-{x}" for x in LANGS] + [f"{x}-en" for x in LANGS]

    def common(self):
        return ["--user-dir", PLUGIN, "--task", "hltmt_translation", "--langs", ",".join(["en"] + LANGS),
                "--lang-pairs", ",".join(self.directions), "--encoder-langtok", "tgt", "--cpu"]

    # ---- steps -------------------------------------------------------------------------
    def prepare(self):
        s = self.size
        run_logged([sys.executable, os.path.join(ROOT, "scripts", "prepare_data.py"), "--out",
                    os.path.join(self.run_dir, "data"), "--langs", ",".join(LANGS), "--max-train", str(s.max_train),
                    "--max-test", str(s.max_test), "--vocab-size", str(s.vocab)], os.path.join(self.logs, "prepare.log"))

    def train_hltmt(self):
        s = self.size
        save = os.path.join(self.run_dir, "hltmt")
        run_logged([os.path.join(BIN, "fairseq-train"), self.data, *self.common(), "--arch", s.arch,
                    "--high-resource-langs", ",".join(HIGH), "--slp-pool-size", "3",
                    "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
                    "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "3e-3",
                    "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "100", "--dropout", "0.1",
                    "--max-tokens", str(s.max_tokens), "--max-update", str(s.max_updates),
                    "--sampling-method", "temperature", "--sampling-temperature", "5",
                    "--save-dir", save, "--no-epoch-checkpoints", "--log-interval", "25",
                    "--seed", str(self.args.seed), *s.extra], os.path.join(self.logs, "train_hltmt.log"))

    def decode(self):
        ckpt = os.path.join(self.run_dir, "hltmt", "checkpoint_last.pt")
        out_dir = os.path.join(self.run_dir, "decode", "hltmt")
        os.makedirs(out_dir, exist_ok=True)
        for i, direction in enumerate(self.directions, 1):
            target = os.path.join(out_dir, f"{direction}.gen")
            if os.path.exists(target):
                continue
            src, tgt = direction.split("-")
            say(f"decode [{i}/{len(self.directions)}] {direction}")
            run_logged([os.path.join(BIN, "fairseq-generate"), self.data, *self.common(), "-s", src, "-t", tgt,
                        "--path", ckpt, "--gen-subset", "test", "--beam", "5", "--max-tokens", "6000",
                        "--remove-bpe", "sentencepiece"], os.path.join(self.logs, f"decode_{direction}.log"), target)

    def score(self):
        from sacrebleu.metrics import BLEU, CHRF

        rows, signature = [], None
        for direction in self.directions:
            hyps, refs = {}, {}
            with open(os.path.join(self.run_dir, "decode", "hltmt", f"{direction}.gen"), encoding="utf-8") as f:
                for line in f:
                    kind, _, rest = line.partition("-")
                    if kind in ("D", "T") and "\t" in rest:
                        fields = rest.rstrip("\n").split("\t")
                        (hyps if kind == "D" else refs)[int(fields[0])] = fields[-1]
            ids = sorted(refs)
            bleu, chrf = BLEU(), CHRF()
            b = bleu.corpus_score([hyps.get(i, "") for i in ids], [[refs[i] for i in ids]])
            c = chrf.corpus_score([hyps.get(i, "") for i in ids], [[refs[i] for i in ids]])
            tgt = direction.split("-")[1]
            rows.append({"direction": direction, "level": "high" if tgt in HIGH else "low" if tgt != "en" else "x->en",
                         "sentences": len(ids), "bleu": round(b.score, 2), "chrf": round(c.score, 2)})
            signature = str(bleu.get_signature())
        with open(os.path.join(self.run_dir, "results.json"), "w") as f:
            json.dump({"system": "hltmt", "size": self.args.size, "sacrebleu": signature, "rows": rows}, f, indent=1)
        lines = [f"# DebMT-10 `{self.args.size}`: HLT-MT, test split", "",
                 f"sacreBLEU signature: `{signature}`", "",
                 "| direction | target level | sentences | BLEU | chrF |", "|---|---|---|---|---|"]
        lines += [f"| {r['direction']} | {r['level']} | {r['sentences']} | {r['bleu']} | {r['chrf']} |" for r in rows]
        if self.args.size != "full":
            lines += ["", "On 2 CPU cores this model is far from converged: the figures show the pipeline "
                          "works end to end, not the quality of the method."]
        with open(os.path.join(self.run_dir, "results.md"), "w") as f:
            f.write("\n".join(lines) + "\n")
        print("\n".join(lines))

    STEPS = ["prepare", "train_hltmt", "decode", "score"]

    def run(self):
        os.makedirs(self.run_dir, exist_ok=True)
        print(f"main job: DebMT-10 size={self.args.size}, run folder {self.run_dir}")
        for n, step in enumerate(self.STEPS, 1):
            marker = os.path.join(self.run_dir, f".done-{step}")
            if os.path.exists(marker):
                say(f"step {n}/{len(self.STEPS)} {step}: already done, skipped")
                continue
            say(f"step {n}/{len(self.STEPS)} {step}")
            t0 = time.time()
            getattr(self, step)()
            open(marker, "w").write(f"{time.time() - t0:.0f}s\n")
            say(f"step {n}/{len(self.STEPS)} {step} done in {time.time() - t0:.0f}s")
        say(f"finished: {os.path.join(self.run_dir, 'results.md')}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", choices=sorted(SIZES), default="quick")
    p.add_argument("--run-dir", default=None, help="where everything goes (default: runs/debmt10-SIZE)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    try:
        Job(args).run()
    except StepFailed as error:
        print(f"\nmain_job: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
