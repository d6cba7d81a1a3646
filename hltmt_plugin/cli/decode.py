#!/usr/bin/env python3
"""Decode many directions in few processes: fairseq-generate's own ``main``, called once per
(checkpoint, direction) job inside one Python process, so Python, torch, fairseq and CUDA start
once per worker instead of once per direction; several workers run at the same time.

    python hltmt_plugin/cli/decode.py --jobs JOBS.tsv -- DATA --user-dir ... --beam 5 ...

JOBS.tsv: one job per line, ``label<TAB>checkpoint<TAB>src<TAB>tgt<TAB>output.gen``. Each job
runs ``fairseq-generate <common options> --path CKPT -s SRC -t TGT`` and its output (the
usual S-/T-/H-/D- lines) is written to ``output.gen`` (atomically: a ``.gen`` exists only
when its direction is complete). A failed job stops the worker with one error line.

``decode_all`` (used by hltmt-main-job and scripts/gpu_run.py) splits jobs over
workers, balanced by the size of each direction's test set, and runs them concurrently.
"""

import argparse
import copy
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from hltmt_plugin.atomic_files import replace_file
from hltmt_plugin.cli import CHECKOUT, plugin_cli, register
from hltmt_plugin.errors import HltmtError


class DecodeFailed(HltmtError):
    """A decoding that failed: a malformed jobs file, or a worker that stopped (the tail of its log)."""


def run_jobs(jobs, common):
    # fairseq-generate's logging.basicConfig would bind the root logger to the first job's
    # output file; one handler on stderr, set first, keeps every job's log in the worker log
    logging.basicConfig(
        format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", level=logging.INFO, stream=sys.stderr
    )
    register()  # the plugin's task and model, before fairseq reads --user-dir (an imported package is not read again)
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import generate

    per_job = {"source_lang", "target_lang", "path", "results_path"}
    first, cfg = None, None
    for label, ckpt, src, tgt, out in jobs:
        print(f"==> {label}", flush=True)
        t0 = time.time()
        tmp = tempfile.mkdtemp(prefix=".decode-", dir=os.path.dirname(out))
        try:
            parser = options.get_generation_parser()
            args = options.parse_args_and_arch(
                parser, [*common, "--path", ckpt, "-s", src, "-t", tgt, "--results-path", tmp]
            )
            # fairseq's namespace -> config conversion (a hydra compose) costs seconds; the jobs of
            # a worker differ only in these four options, so convert once and set them per job
            same = first is not None and {k: v for k, v in vars(args).items() if k not in per_job} == first
            if not same:
                first = {k: v for k, v in vars(args).items() if k not in per_job}
                cfg = convert_namespace_to_omegaconf(args)
                task0 = copy.deepcopy(vars(cfg.task))
            vars(cfg.task).clear()  # the task may edit its options (e.g. split lists): start clean
            vars(cfg.task).update(copy.deepcopy(task0))
            cfg.task.source_lang, cfg.task.target_lang = src, tgt
            cfg.common_eval.path, cfg.common_eval.results_path = ckpt, tmp
            generate.main(cfg)
            produced = os.path.join(tmp, f"generate-{args.gen_subset}.txt")
            replace_file(produced, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"    {label}: {time.time() - t0:.1f}s", flush=True)


def read_jobs(path):
    jobs = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 5:
                raise DecodeFailed(f"{path} line {n}: expected 5 tab-separated fields, got {len(fields)}")
            jobs.append(fields)
    return jobs


def test_size(data, src, tgt):
    """Bytes of the direction's binarized test source: a proxy for its decoding cost."""
    a, b = sorted([src, tgt], key=lambda x: (x != "en", x))
    path = os.path.join(data, f"test.{a}-{b}.{src}.bin")
    return os.path.getsize(path) if os.path.exists(path) else 0


def split_balanced(jobs, weights, n):
    """Longest-first greedy split of jobs into at most n groups of similar total weight."""
    groups = [[] for _ in range(max(1, min(n, len(jobs))))]
    loads = [0] * len(groups)
    for job, w in sorted(zip(jobs, weights), key=lambda jw: -jw[1]):
        i = loads.index(min(loads))
        groups[i].append(job)
        loads[i] += w + 1
    return [g for g in groups if g]


def decode_all(jobs, common, data, workers, log_dir, env=None, echo=sys.stdout):
    """Run every job (label, checkpoint, src, tgt, out) over ``workers`` concurrent processes.
    Raises DecodeFailed naming the worker log when one fails."""
    if not jobs:
        return
    os.makedirs(log_dir, exist_ok=True)
    groups = split_balanced(jobs, [test_size(data, j[2], j[3]) for j in jobs], workers)
    procs = []
    lock = threading.Lock()
    for w, group in enumerate(groups):
        jobs_file = os.path.join(log_dir, f"decode_worker{w}.jobs.tsv")
        with open(jobs_file, "w", encoding="utf-8") as f:
            f.writelines("\t".join(j) + "\n" for j in group)
        log_path = os.path.join(log_dir, f"decode_worker{w}.log")
        log = open(log_path, "w", encoding="utf-8")
        cmd = [*plugin_cli("decode"), "--jobs", jobs_file, "--", *common]
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, cwd=CHECKOUT, env=env)

        def pump(stream=proc.stdout, sink=log):
            for line in stream:
                sink.write(line)
                if echo is not None and (line.startswith("==>") or line.startswith("gpu_decode:")):
                    with lock:
                        echo.write(line[4:] if line.startswith("==>") else line)
                        echo.flush()

        thread = threading.Thread(target=pump)
        thread.start()
        procs.append((proc, thread, log, log_path))
    failed = []
    for proc, thread, log, log_path in procs:
        code = proc.wait()
        thread.join()
        log.close()
        if code != 0:
            failed.append((code, log_path))
    if failed:
        code, log_path = failed[0]
        tail = [line[:300] for line in open(log_path, encoding="utf-8", errors="replace").read().splitlines()[-20:]]
        raise DecodeFailed(f"decode worker failed (exit {code}); last lines of {log_path}:\n" + "\n".join(tail))


def build_parser():
    """The command line of the decoding workers (before ``--``)."""
    from hltmt_plugin.paths import READ_FILE, ArgumentParser, path_option

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    path_option(p, "--jobs", kind=READ_FILE, required=True, help="tab-separated job file (see above)")
    return p


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        print(
            "hltmt-decode: error: usage: gpu_decode.py --jobs JOBS.tsv -- DATA [fairseq-generate options]",
            file=sys.stderr,
        )
        return 2
    cut = argv.index("--")
    args = build_parser().parse_args(argv[:cut])
    try:
        jobs = read_jobs(args.jobs)
    except (DecodeFailed, OSError) as error:
        print(f"hltmt-decode: error: {error}", flush=True)
        return 1
    try:
        run_jobs(jobs, argv[cut + 1 :])
    except BaseException as error:  # noqa: B902  (fairseq's option errors are SystemExit)
        if isinstance(error, KeyboardInterrupt):
            raise
        traceback.print_exc()
        what = (
            f"exit {error.code} from fairseq's option parser (see the log)"
            if isinstance(error, SystemExit)
            else f"{type(error).__name__}: {error}"
        )
        print(f"hltmt-decode: error: {what}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
