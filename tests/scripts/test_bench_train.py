"""scripts/bench_train.py: its options checked, and one real fairseq-train run timed (its JSON
log read by the recipe, its updates timed in the child by timing.run_fairseq)."""

import argparse
import os
import statistics
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))

import bench_train  # noqa: E402
from bench_systems import BenchError  # noqa: E402


def options(**given):
    values = dict(train_sizes="tiny,small", train_systems="hltmt", train_updates="tiny=6,small=4", train_log_interval=2)
    return argparse.Namespace(**{**values, **given})


@pytest.mark.fast
def test_the_train_options_become_updates_per_size():
    args = options()
    bench_train.parse_train_options(args)
    assert (args.train_sizes, args.train_updates) == ("tiny,small", {"tiny": 6, "small": 4})
    args = options(train_updates="8")
    bench_train.parse_train_options(args)
    assert args.train_updates == {"tiny": 8, "small": 8, "base": 8}
    for given, message in (
        ({"train_sizes": "huge"}, "--train-sizes: choose from"),
        ({"train_systems": "hltmt,moe"}, "unknown system moe"),
        ({"train_updates": "tiny=x"}, "takes N or SIZE=N"),
        ({"train_updates": "tiny=6"}, "no number for size small"),
        ({"train_updates": "3"}, "at least 2 x --train-log-interval"),
    ):
        with pytest.raises(BenchError, match=message):
            bench_train.parse_train_options(options(**given))


def test_one_fairseq_train_run_is_timed_from_its_log_and_its_updates(data_bin):
    args = argparse.Namespace(
        data=data_bin,
        langs="de,fr,gu,hi",
        high="fr,de",
        pool_size=2,
        max_tokens=1024,
        device="cpu",
        train_log_interval=2,
    )
    got = bench_train.run_fairseq_train(args, "hltmt", "tiny", 6)
    assert len(got["wps_intervals"]) == 3 and got["wps"] == statistics.median(got["wps_intervals"][1:])
    assert got["wps"] > 0 and got["cpu_wps"] > 0 and got["step_wall_wps"] > 0
    assert len(got["batches"]) == 3 and all(wpb > 0 and bsz > 0 for wpb, bsz in got["batches"])
    with pytest.raises(BenchError, match="logged 1 interval"):
        bench_train.run_fairseq_train(args, "baseline", "tiny", 3)
