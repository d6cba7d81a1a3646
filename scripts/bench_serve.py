#!/usr/bin/env python3
"""hltmt-serve under concurrent load, batching on against batching off (docs/benchmarks.md).

    python scripts/bench_serve.py --json docs/bench_serve.json      # the study's HLT-MT model, both engines

For each engine (the checkpoint's fairseq engine, its CTranslate2 export), two ``hltmt-serve``
processes on loopback (one thread each: OMP_NUM_THREADS=1, --threads 1), one with its batching,
one with ``--no-batching``, taking turns (--rounds turns at each level; the one not measured
idles, so the machine's load falls on both alike); against each, 1, 4, 16 and 64 clients (threads
of this process, one connection each), each sending one sentence at a time (LibreTranslate's
``POST /translate``), the sentences drawn from every trained direction of the model, mixed. A
level's turn sends --requests requests in all (each client its share, in turn), bounded by
--max-seconds.
Measured: sentences/s, the median and 99th percentile of the requests' latency, the server's peak
resident memory (VmHWM) and every answer against ``hltmt-translate --json``'s line for that
sentence (same model, engine and options): nothing lost or swapped. Then, beyond the queue
(batching on, --max-queue 128): --burst clients at once, each asking 16 sentences, --burst-rounds times:
how fast the refused ones are answered (429) and the server's resident memory after each burst.
Every request goes to 127.0.0.1 only; each server is stopped (SIGTERM) after its run.
"""

import argparse
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

from hltmt_plugin import records
from hltmt_plugin.atomic_files import write_text
from hltmt_plugin.experiments.recipe import SHORT_SEGMENTS
from timing import HelpFormatter, child_env, markdown_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEBMT10 = os.path.join(ROOT, "data", "debmt10")
MODELS = os.path.join(ROOT, "docs", "results", "cpu-study", "models")
BIN = os.path.dirname(sys.executable)
QUEUE = 128  # the servers' --max-queue


def log(message):
    print(f"[bench_serve] {message}", file=sys.stderr, flush=True)


def build_parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--model", default=os.path.join(MODELS, "hltmt.pt"), help="a checkpoint")
    p.add_argument("--spm", default=os.path.join(MODELS, "spm.model"), help="its sentencepiece model")
    p.add_argument("--data", default=MODELS, help="its dictionaries' folder")
    p.add_argument("--engines", default="fairseq,ctranslate2", help="engines, comma-separated")
    p.add_argument("--clients", default="1,4,16,64", help="concurrent clients of each level, comma-separated")
    p.add_argument("--requests", type=int, default=96, help="requests of one level and round, one sentence each")
    p.add_argument("--rounds", type=int, default=2, help="turns of the two modes at each level")
    p.add_argument("--sentences", type=int, default=24, help="test sentences drawn from each trained direction")
    p.add_argument("--beam", type=int, default=4, help="beam size")
    p.add_argument("--max-len", type=int, default=40, help="the most tokens of a translation")
    p.add_argument("--max-wait", type=float, default=None, help="the servers' --max-wait, ms (default: theirs)")
    p.add_argument("--burst", type=int, default=96, help="clients at once beyond the queue (0: none)")
    p.add_argument("--burst-rounds", type=int, default=3, help="bursts beyond the queue, one after another")
    p.add_argument("--max-seconds", type=float, default=240.0, help="the most seconds of one level")
    p.add_argument("--json", default=None, help="write the figures here (a JSON file)")
    return p


def parse_args(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    try:
        args.clients = [int(c) for c in args.clients.split(",")]
    except ValueError:
        p.error(f"--clients must be whole numbers separated by commas, got {args.clients!r}")
    args.engines = args.engines.split(",")
    if [e for e in args.engines if e not in ("fairseq", "ctranslate2")]:
        p.error(f"--engines takes fairseq and ctranslate2, got {','.join(args.engines)}")
    small = [n for n in ("requests", "rounds", "sentences", "beam", "max_len") if getattr(args, n) < 1]
    if small or min(args.clients) < 1 or args.burst < 0 or args.max_seconds <= 0:
        p.error(f"--{(small or ['clients'])[0].replace('_', '-')} must be at least 1 (--burst at least 0)")
    return args


def test_items(model_langs, n):
    """(src, tgt, sentence): ``n`` short test sentences of every direction from English the model
    serves (the study's rule: at most 12 English and 16 target words), shuffled (seed 1)."""
    from hltmt_plugin.cli.prepare_data import load_pair

    items = []
    for tgt in model_langs:
        en, _ = load_pair(DEBMT10, "test", tgt, n, SHORT_SEGMENTS)
        items += [("en", tgt, text) for text in en]
    random.Random(1).shuffle(items)
    return items


# ---- the servers ----------------------------------------------------------------------------
class Server:
    """``hltmt-serve`` in a process of its own, one thread, on a free loopback port."""

    def __init__(self, model_args, extra, engine):
        threads = ["--threads", "1"] if engine == "ctranslate2" else []
        argv = [os.path.join(BIN, "hltmt-serve"), *model_args, "--port", "0", *threads, *extra]
        self.proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=child_env(1))
        line = self.proc.stderr.readline()
        if "serving" not in line:
            self.proc.kill()
            sys.exit(f"bench_serve: error: hltmt-serve did not start: {line.strip()}")
        self.port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()  # never blocks on a full pipe

    def memory(self, field):
        """``VmHWM`` (peak) or ``VmRSS`` of the server, MiB."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith(field + ":"))
        return round(kib / 1024, 1)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


def post(conn, path, body):
    """(status, answer, seconds) of one request on the connection ``conn``."""
    start = time.perf_counter()
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    return response.status, records.parse_json(data.decode("utf-8"), "an answer"), time.perf_counter() - start


def load_level(port, items, clients, requests, max_seconds):
    """``clients`` threads sending ``requests`` one-sentence requests in all, each its share in
    turn: ``(latencies, answers {index: (status, text)}, seconds)``."""
    latencies, answers = [], {}
    lock = threading.Lock()
    stop_at = time.monotonic() + max_seconds

    def client(k):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        for i in range(k, requests, clients):
            if time.monotonic() > stop_at:
                break
            src, tgt, text = items[i % len(items)]
            status, answer, seconds = post(conn, "/translate", {"q": text, "source": src, "target": tgt})
            with lock:
                latencies.append(seconds)
                answers[i] = (status, answer.get("translatedText"))
        conn.close()

    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, answers, time.perf_counter() - start


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else None


def burst(port, items, clients):
    """``clients`` requests of 16 sentences at once: (seconds of each 429 answer, statuses)."""
    refused, statuses = [], []
    lock = threading.Lock()
    barrier = threading.Barrier(clients)

    def client(k):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        chunk = [items[(k * 16 + j) % len(items)] for j in range(16)]
        body = {"q": [text for _, _, text in chunk], "source": "en", "target": chunk[0][1]}
        barrier.wait()
        status, _, seconds = post(conn, "/translate", body)
        with lock:
            statuses.append(status)
            if status == 429:
                refused.append(seconds)
        conn.close()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return refused, statuses


# ---- the run --------------------------------------------------------------------------------
def reference(model_args, items, engine, options):
    """``hltmt-translate --json``'s translation of each item (the same model, engine and options)."""
    text = "".join(f"{s}\t{t}\t{x}\n" for s, t, x in items)
    threads = ["--threads", "1"] if engine == "ctranslate2" else []
    given = ["--checkpoint" if a == "--model" else a for a in model_args]
    argv = [os.path.join(BIN, "hltmt-translate"), *given, "--json", "--no-progress", *options, *threads]
    done = subprocess.run(argv, input=text, capture_output=True, text=True, env=child_env(1))
    if done.returncode != 0:
        sys.exit(f"bench_serve: error: hltmt-translate failed: {done.stderr.strip()[-300:]}")
    return [records.parse_json(line, "hltmt-translate's line")["translation"] for line in done.stdout.splitlines()]


def start_servers(args, model_args, engine):
    """{batching: its server}: one with batching, one with --no-batching, both listening (one idles
    while the other is measured)."""
    options = ["--beam", str(args.beam), "--max-len", str(args.max_len), "--max-queue", str(QUEUE)]
    options += ["--max-items", "64"] + ([] if args.max_wait is None else ["--max-wait", str(args.max_wait)])
    servers = {}
    for batching in (True, False):
        servers[batching] = Server(model_args, options + ([] if batching else ["--no-batching"]), engine)
        load_level(servers[batching].port, [("en", "de", "Hello.")], 2, 8, args.max_seconds)  # warm up
    return servers


def measure(args, model_args, engine, items, expected):
    """Both modes of one engine, level by level, the modes taking turns --rounds times (the
    machine's load falls on both alike): a row per mode and level; beyond the queue (batching on)."""
    servers = start_servers(args, model_args, engine)
    rows, overload = [], None
    try:
        for clients in args.clients:
            found = {True: ([], 0, 0.0), False: ([], 0, 0.0)}
            for _ in range(args.rounds):
                for batching, server in servers.items():
                    latencies, answers, seconds = load_level(
                        server.port, items, clients, args.requests, args.max_seconds
                    )
                    wrong = sum(
                        1 for i, (code, text) in answers.items() if code != 200 or text != expected[i % len(items)]
                    )
                    wrong += args.requests - len(answers)
                    kept, bad, took = found[batching]
                    found[batching] = (kept + latencies, bad + wrong, took + seconds)
            for batching, (latencies, wrong, seconds) in found.items():
                rows.append(row(engine, batching, clients, latencies, wrong, seconds))
                log(f"{engine} batching={batching} clients={clients}: {rows[-1]}")
        if args.burst:
            overload = beyond_the_queue(servers[True], items, args.burst, args.burst_rounds)
        peaks = {batching: server.memory("VmHWM") for batching, server in servers.items()}
    finally:
        for server in servers.values():
            server.stop()
    for r in rows:
        r["peak_mib"] = peaks[r["batching"]]
    return rows, overload


def row(engine, batching, clients, latencies, wrong, seconds):
    return {
        "engine": engine,
        "batching": batching,
        "clients": clients,
        "requests": len(latencies),
        "sentences_per_s": round(len(latencies) / seconds, 2),
        "p50_ms": round(1000 * percentile(latencies, 0.5), 1),
        "p99_ms": round(1000 * percentile(latencies, 0.99), 1),
        "not_identical": wrong,
    }


def beyond_the_queue(server, items, clients, rounds):
    rss, refused, statuses = [server.memory("VmRSS")], [], []
    for _ in range(rounds):
        seconds, codes = burst(server.port, items, clients)
        refused += seconds
        statuses += codes
        rss.append(server.memory("VmRSS"))
    result = {
        "clients": clients,
        "sentences_each": 16,
        "max_queue": QUEUE,
        "answered": statuses.count(200),
        "refused_429": len(refused),
        "other": len(statuses) - statuses.count(200) - len(refused),
        "refusal_p50_ms": round(1000 * percentile(refused, 0.5), 1) if refused else None,
        "refusal_max_ms": round(1000 * max(refused), 1) if refused else None,
        "rss_mib_before_and_after_each_burst": rss,
    }
    log(f"beyond the queue: {result}")
    return result


def export_model(args, work):
    folder = os.path.join(work, "ct2")
    argv = [os.path.join(BIN, "hltmt-export"), "--checkpoint", args.model, "--spm", args.spm, "--data", args.data]
    done = subprocess.run([*argv, "--out", folder], capture_output=True, text=True, env=child_env(1))
    if done.returncode != 0:
        sys.exit(f"bench_serve: error: hltmt-export failed: {done.stderr.strip()[-300:]}")
    return ["--model", folder]


def main(argv=None):
    args = parse_args(argv)
    import logging

    from hltmt_plugin.hub import HltmtTranslator

    logging.disable(logging.WARNING)

    probe = HltmtTranslator.load(args.model, spm=args.spm, data=args.data, device="cpu")
    targets = sorted({t for s in probe.langs for t in probe.langs if s == "en" and probe.direction(s, t) == "trained"})
    del probe
    items = test_items(targets, args.sentences)
    load_before = os.getloadavg()
    rows, overload = [], {}
    with tempfile.TemporaryDirectory(prefix="bench_serve.") as work:
        for engine in args.engines:
            checkpoint = ["--model", args.model, "--spm", args.spm, "--data", args.data]
            model_args = export_model(args, work) if engine == "ctranslate2" else checkpoint
            expected = reference(model_args, items, engine, ["--beam", str(args.beam), "--max-len", str(args.max_len)])
            found, overload[engine] = measure(args, model_args, engine, items, expected)
            rows += found
    report(args, rows, overload, targets, len(items), load_before)
    return 0


def report(args, rows, overload, targets, n_items, load_before):
    header = [
        "engine",
        "batching",
        "clients",
        "requests",
        "sentences/s",
        "p50 ms",
        "p99 ms",
        "peak MiB",
        "not identical",
    ]
    table = markdown_table(
        header,
        [
            [r["engine"], "on" if r["batching"] else "off", r["clients"], r["requests"], r["sentences_per_s"]]
            + [r["p50_ms"], r["p99_ms"], r["peak_mib"], r["not_identical"]]
            for r in rows
        ],
    )
    print(table)
    result = {
        "command": "python scripts/bench_serve.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip(),
        "load_average_before_and_after": [round(x, 2) for x in (*load_before, *os.getloadavg())],
        "cpus": os.cpu_count(),
        "directions": [f"en-{t}" for t in targets],
        "sentences": n_items,
        "beam": args.beam,
        "max_len": args.max_len,
        "rows": rows,
        "beyond_the_queue": overload,
    }
    if args.json:
        write_text(args.json, json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
