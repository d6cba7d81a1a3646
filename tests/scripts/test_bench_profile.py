"""scripts/bench_profile.py: every phase it times names a method that is there, and the real
training step of both systems in one process (fairseq's Trainer, updates alternating) timed
phase by phase on the session's data slice."""

import argparse
import os
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))

import bench_profile  # noqa: E402


@pytest.mark.fast
def test_every_phase_names_a_method_of_fairseq_or_the_plugin():
    import hltmt_plugin  # noqa: F401

    found = {key for key, _, _ in bench_profile._phase_patches()}
    assert [spot for spot in bench_profile.PHASE_SPOTS if spot[0] not in found] == []


def test_both_training_steps_timed_phase_by_phase_in_one_process(data_bin, tmp_path, capsys):
    args = argparse.Namespace(
        data=data_bin,
        langs="de,fr,gu,hi",
        high="fr,de",
        pool_size=2,
        max_tokens=1024,
        device="cpu",
        train_log_interval=1,
    )
    got = bench_profile.run_pair(args, "tiny", 2, ["phases"], str(tmp_path / "pair.json"))
    assert [len(got["update_cpu"][name]) for name in ("baseline", "hltmt")] == [2, 2] and got["words"] > 0
    phases, total = bench_profile._phase_table(got, "tiny", 2)
    by_name = {p["phase"]: p for p in phases}
    assert by_name["update (Trainer.train_step)"]["baseline_ms"] > 0 and total["hltmt"] > 0
    for slp in ("SLP routing decision", "SLP modules"):
        assert by_name[slp]["baseline_ms"] == 0 < by_name[slp]["hltmt_ms"], slp
    assert "### One fairseq training step, tiny" in capsys.readouterr().out
