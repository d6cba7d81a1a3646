"""scripts/bench_systems.py on the session's data slice: the languages it derives from a data
folder, its fairseq-train lines (the recipe's) read back by fairseq's parser, and every system
built, fed the real batches and stepped once."""

import argparse
import os
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))

import bench_systems as bs  # noqa: E402


def options(data, **given):
    values = dict(data=data, langs=None, high=None, pool_size=None, derived=[], size="tiny", max_tokens=1024)
    return argparse.Namespace(**{**values, "device": "cpu", "dtype": "fp32", "train_log_interval": 2, **given})


def test_the_languages_come_from_the_data_folder(data_bin):
    args = options(data_bin)
    bs.derive_languages(args)
    assert (args.langs, args.high, args.pool_size) == ("de,fr,gu,hi", "fr,de", 2)
    assert args.derived == ["--langs de,fr,gu,hi", "--high fr,de", "--pool-size 2"]
    kept = options(data_bin, langs="de,gu")
    bs.derive_languages(kept)
    assert (kept.high, kept.pool_size, kept.derived) == ("de", 1, ["--high de", "--pool-size 1"])
    given = options(data_bin, langs="gu,hi", high="hi")
    bs.derive_languages(given)
    assert (given.high, given.pool_size) == ("hi", 1)
    for given, message in (  # the drivers' refusals of --langs and --high, and a language the data lacks
        ({"langs": "de,xx"}, "--langs names xx"),
        ({"high": "cs"}, "--high cs not in --langs"),
        ({"langs": "gu,hi"}, r"no high-resource language among --langs \(gu,hi\)"),
        ({"langs": "de,de"}, "--langs names de twice"),
    ):
        with pytest.raises(bs.BenchError, match=message):
            bs.derive_languages(options(data_bin, **given))


def test_the_fairseq_train_lines_are_the_recipes_on_the_stage_high_directions(data_bin):
    from fairseq import options as fairseq_options

    import hltmt_plugin  # noqa: F401

    args = options(data_bin, langs="de,fr,gu,hi", high="fr,de", pool_size=2)
    parsed = {}
    for system in bs.TRAIN_SYSTEMS:
        argv = bs.fairseq_train_cmd(args, system, "small", "/tmp/never", 12)
        parsed[system] = fairseq_options.parse_args_and_arch(fairseq_options.get_training_parser(), argv)
    base, hltmt = parsed["baseline"], parsed["hltmt"]
    assert (base.task, base.arch, base.criterion) == (
        "translation_multi_simple_epoch",
        bs.ARCHS["small"][0],
        "label_smoothed_cross_entropy",
    )
    assert (hltmt.task, hltmt.arch, hltmt.criterion) == (
        "hltmt_translation",
        bs.ARCHS["small"][1],
        "hltmt_cross_entropy",
    )
    assert (hltmt.hlt_stage, hltmt.slp_hard_prob, hltmt.slp_pool_size, hltmt.high_resource_langs) == (
        "high",
        1.0,
        2,
        "fr,de",
    )
    for run in parsed.values():  # the same data, batch, updates and seed: the same batches
        assert run.lang_pairs == "en-fr,en-de,fr-en,de-en" and run.sampling_method == "concat"
        assert (run.max_tokens, run.max_update, run.seed, run.lr) == (1024, 12, 1, [bs.LR])
        assert run.no_save and run.disable_validation and run.cpu


def test_every_system_builds_steps_and_counts_its_arithmetic(data_bin):
    args = options(data_bin, langs="de,fr,gu,hi", high="fr,de", pool_size=2)
    work = {}
    for name in ("baseline", "hltmt", "hltmt+adapters"):
        system = bs.build(args, name)
        assert system["lang_ids"] == (name != "baseline")
        samples = bs.batches(args, system["task"], 2)
        assert len(samples) == 2 and "src_lang_id" in samples[0]["net_input"]
        assert "src_lang_id" not in bs.for_model(system, samples[0])["net_input"] or system["lang_ids"]
        step = bs.train_step_fn(args, system)
        before = [p.detach().clone() for p in system["model"].parameters()][:3]
        work[name] = bs.flops(lambda: step(samples[0], 0))
        assert any((a != b.detach()).any() for a, b in zip(before, system["model"].parameters()))  # it trained
    assert 0 < work["baseline"] < work["hltmt"] < work["hltmt+adapters"]
