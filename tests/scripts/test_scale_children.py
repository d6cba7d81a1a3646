"""scripts/scale_children.py on the session's data slice: the fairseq-train options of every
system read back by fairseq's parser, a measure run in a fork of this process (and a failing
one reported with its log)."""

import os
import sys
import tempfile

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))

import scale_children as sc  # noqa: E402
from scale_corpus import ScaleError  # noqa: E402

LANGS = ["de", "fr", "gu", "hi"]


def spec_of(data_bin, **extra):
    return {"data": data_bin, "langs": LANGS, "max_tokens": 1024, **extra}


def test_every_systems_options_parse_as_fairseq_reads_them(data_bin):
    from fairseq import options

    import hltmt_plugin  # noqa: F401

    train = lambda argv: options.parse_args_and_arch(options.get_training_parser(), argv)  # noqa: E731
    spec = spec_of(data_bin, updates=3)
    for system in sc.SYSTEMS:
        run = train(sc.training_args(spec, system, "/tmp/never"))
        assert run.lang_pairs == "en-de,en-fr,en-gu,en-hi,de-en,fr-en,gu-en,hi-en"
        assert (run.max_update, run.log_interval, run.log_format, run.disable_validation) == (3, 1, "json", True)
        assert (run.sampling_method, run.max_tokens, run.seed) == ("concat", 1024, 1)
        if system == "mnmt":
            assert (run.task, run.arch) == ("translation_multi_simple_epoch", "transformer_hltmt_tiny")
        else:  # one high-resource language of four (the first third), the rest pivots: every direction trains
            assert (run.task, run.arch, run.high_resource_langs, run.slp_pool_size) == (
                "hltmt_translation",
                "hltmt_transformer_tiny",
                "de",
                1,
            )
            assert (run.hlt_stage, run.pivot_langs, run.slp_hard_prob) == ("high", "en,fr,gu,hi", 1.0)
            assert run.language_adapters == (system == "hltmt+adapters") and run.skill_ffn == (system == "hltmt+skills")


def child_probe(spec):
    """A measure's child: its own process, the spec it was given, a file left in its scratch folder."""
    with tempfile.NamedTemporaryFile(delete=False) as left:
        left.write(b"x")
    return {"pid": os.getpid(), "twice": 2 * spec["n"], "scratch": os.path.dirname(left.name)}


def test_a_measure_runs_in_a_fork_and_a_failing_one_is_reported_with_its_log(data_bin, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # this test's own: the other worker writes in /tmp
    monkeypatch.setitem(sc.CHILDREN, "probe", child_probe)
    got = sc.run_measure("probe", {"n": 21}, timeout=300)
    assert got["twice"] == 42 and got["pid"] != os.getpid() and got["wall_s"] > 0
    assert os.path.dirname(got["scratch"]) == str(tmp_path) and not os.path.exists(got["scratch"])
    with pytest.raises(ScaleError, match=r"the train measure failed \(exit 1\):\n(.|\n)*RuntimeError"):
        sc.run_measure("train", {"argv": [data_bin, "--no-such-option"]}, 300)
    assert os.listdir(tmp_path) == []  # its log and result had no name, its scratch folder is gone
