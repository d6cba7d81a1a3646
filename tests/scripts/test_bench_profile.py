"""scripts/bench_profile.py: every phase it times names a method that is there, its options,
and the real training step of both systems in one process (fairseq's Trainer, updates
alternating, in a child process) timed phase by phase on the session's data slice."""

import argparse
import os
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))

import bench_profile  # noqa: E402
from timing import BenchError  # noqa: E402


@pytest.mark.fast
def test_every_phase_names_a_method_of_fairseq_or_the_plugin():
    import hltmt_plugin  # noqa: F401

    found = {key for key, _, _ in bench_profile._phase_patches()}
    assert [spot for spot in bench_profile.PHASE_SPOTS if spot[0] not in found] == []


def test_the_train_options_become_updates_per_size():
    args = argparse.Namespace(train_sizes="tiny,small", train_updates="tiny=6,small=4")
    bench_profile.parse_train_options(args)
    assert (args.train_sizes, args.train_updates) == ("tiny,small", {"tiny": 6, "small": 4})
    args = argparse.Namespace(train_sizes="tiny", train_updates="8")
    bench_profile.parse_train_options(args)
    assert args.train_updates == {"tiny": 8, "small": 8, "base": 8}
    for sizes, updates, message in (
        ("huge", "8", "--train-sizes: choose from"),
        ("tiny", "tiny=x", "takes N or SIZE=N"),
        ("tiny,small", "tiny=6", "no number for size small"),
        ("tiny", "1", "at least 2 updates"),
    ):
        with pytest.raises(BenchError, match=message):
            bench_profile.parse_train_options(argparse.Namespace(train_sizes=sizes, train_updates=updates))


def test_both_training_steps_timed_phase_by_phase_in_one_process(data_bin, capsys):
    args = argparse.Namespace(
        data=data_bin, langs="de,fr,gu,hi", high="fr,de", pool_size=2, max_tokens=1024, device="cpu"
    )
    got = bench_profile.run_pair(args, "tiny", 2)
    assert [len(got["update_cpu"][name]) for name in ("baseline", "hltmt")] == [2, 2] and got["words"] > 0
    phases, total = bench_profile._phase_table(got, "tiny", 2)
    by_name = {p["phase"]: p for p in phases}
    assert by_name["update (Trainer.train_step)"]["baseline_ms"] > 0 and total["hltmt"] > 0
    for slp in ("SLP routing decision", "SLP modules"):
        assert by_name[slp]["baseline_ms"] == 0 < by_name[slp]["hltmt_ms"], slp
    assert "### One fairseq training step, tiny" in capsys.readouterr().out
