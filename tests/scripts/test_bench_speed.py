"""scripts/bench_speed.py on the session's data slice at its smallest: the in-process measures
of the baseline and HLT-MT (training words/s, mixed against single-direction batches,
generation, memory, the arithmetic) and the table they make."""

import argparse
import os
import sys

import torch

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))

import bench_speed  # noqa: E402


def options(data_bin):
    return argparse.Namespace(
        data=data_bin,
        langs="de,fr,gu,hi",
        high="fr,de",
        pool_size=2,
        size="tiny",
        max_tokens=1024,
        batches=2,
        rounds=1,
        device="cpu",
        dtype="fp32",
        clock="cpu",
        gen_directions="en-de,en-gu",
        gen_sentences=2,
        gen_len=2,
        gen_batch_size=0,
    )


def test_the_measures_of_two_systems_make_the_table(data_bin, capsys):
    names = ["baseline", "hltmt"]
    got = bench_speed.measure(options(data_bin), names)
    assert all(len(v) == 1 and v[0] > 0 for v in got["rates"].values())
    assert 1.0 < got["work"]["hltmt"] / got["work"]["baseline"] < 1.3  # one pool module per target token more
    assert set(got["mix_rates"]) == {"mixed", "single"} and min(got["mix_rates"].values()) > 0
    assert {k for k in got["gen"]} == {(n, d) for n in names for d in ("en-de", "en-gu")}
    assert got["memory"]["hltmt"] > got["memory"]["baseline"] > 0
    figures = bench_speed.print_table(bench_speed.table_rows(names, got))
    out = capsys.readouterr().out
    assert "| train words/s | hltmt |" in out and "| beam-5 tokens/s en-gu | hltmt |" in out
    rows = {f["measure"]: f for f in figures}
    speed = rows["train words/s"]
    assert speed["ratio"] == speed["baseline"] / speed["value"] and speed["ratio_is"].startswith("time")
    assert rows["parameters"]["ratio"] > 1.0


def test_one_direction_relabels_every_row_and_keeps_the_tokens(data_bin):
    from bench_systems import batches, build

    args = options(data_bin)
    task = build(args, "hltmt")["task"]
    sample = batches(args, task, 1)[0]
    langtok = task.data_manager.get_encoder_langtok("en", "gu", "tgt")
    for lang_ids in (False, True):
        one = bench_speed.one_direction(sample, task, "gu", lang_ids=lang_ids)
        src, old = one["net_input"]["src_tokens"], sample["net_input"]["src_tokens"]
        first = src.ne(task.source_dictionary.pad()).long().argmax(dim=1)
        assert (src[torch.arange(src.size(0)), first] == langtok).all()
        assert src.ne(old).sum(dim=1).le(1).all()  # at most the language token changed
        ids, gu = one["net_input"]["tgt_lang_id"], task.data_manager.lang_dict.index("gu")
        assert ids.eq(gu).all() if lang_ids else ids.equal(sample["net_input"]["tgt_lang_id"])
