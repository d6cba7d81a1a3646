"""The HLT-MT encoder (hltmt_plugin/models/encoder.py): the language record it puts in
``encoder_out`` (each row's target language from its ``__tgt__`` token under
``--encoder-langtok tgt``; the source from fairseq's ``src_lang_id`` under ``--enable-lang-ids``
when a feature needs it; the target from ``tgt_lang_id`` under ``--encoder-langtok src
--decoder-langtok``), handed on to the decoder and reordered with the beams."""

import pytest
import torch

from conftest import DIRECTIONS, build, make_sample, mixed_sample
from hltmt_plugin.languages import ROWS, SRC, TGT, UNKNOWN

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


def encode(model, sample):
    net = sample["net_input"]
    with torch.no_grad():
        return model.encoder(**{k: v for k, v in net.items() if k != "prev_output_tokens"})


def languages(task, sample, side):
    """Each row's language on ``side`` (0: source, 1: target) as its index in --langs."""
    return [task.langs.index(DIRECTIONS[i].split("-")[side]) for i in sample["id"].tolist()]


def test_with_encoder_langtok_tgt_the_record_holds_each_rows_target_and_no_source(data_bin):
    _, task, model = build(data_bin)
    model.eval()
    sample = make_sample(task, DIRECTIONS)
    record = encode(model, sample)[ROWS][0]
    assert record.shape == (len(DIRECTIONS), 2) and record.dtype == torch.long
    assert record[:, TGT].tolist() == languages(task, sample, 1)
    assert record[:, SRC].tolist() == [UNKNOWN] * len(DIRECTIONS)  # nothing chooses by source
    with torch.no_grad():
        _, extra = model(**sample["net_input"])
    assert torch.equal(extra[ROWS], record)  # the decoder routed by the same record


def test_with_enable_lang_ids_the_record_holds_each_rows_source_from_fairseqs_language_ids(data_bin):
    _, task, model = build(data_bin, "--language-adapters", "--enable-lang-ids")
    model.eval()
    sample = mixed_sample(task)
    record = encode(model, sample)[ROWS][0]
    assert record[:, SRC].tolist() == languages(task, sample, 0)
    assert record[:, TGT].tolist() == languages(task, sample, 1)
    other = dict(sample["net_input"], src_lang_id=sample["net_input"]["src_lang_id"].flip(0))
    assert encode(model, {"net_input": other})[ROWS][0][:, SRC].tolist() == languages(task, sample, 0)[::-1]


def test_with_encoder_langtok_src_the_target_comes_from_the_target_language_id(data_bin):
    _, task, model = build(data_bin, "--encoder-langtok", "src", "--decoder-langtok", "--enable-lang-ids")
    model.eval()
    sample = make_sample(task, DIRECTIONS)
    net = sample["net_input"]
    tokens, lang_dict = net["src_tokens"].clone(), task.data_manager.lang_dict
    first = tokens.ne(task.source_dictionary.pad()).long().argmax(dim=1)  # the language token (left-padded)
    sources = [DIRECTIONS[i].split("-")[0] for i in sample["id"].tolist()]
    targets = [DIRECTIONS[i].split("-")[1] for i in sample["id"].tolist()]
    for b, src in enumerate(sources):
        tokens[b, first[b]] = task.source_dictionary.index(f"__{src}__")
    tgt_lang_id = torch.tensor([[lang_dict.index(t)] for t in targets])
    with torch.no_grad():
        record = model.encoder(tokens, net["src_lengths"], tgt_lang_id=tgt_lang_id)[ROWS][0]
    assert record[:, TGT].tolist() == [task.langs.index(t) for t in targets]


def test_the_record_is_reordered_with_the_beams(data_bin):
    _, task, model = build(data_bin)
    model.eval()
    sample = make_sample(task, DIRECTIONS)
    out = encode(model, sample)
    order = torch.tensor([2, 2, 0, 5])
    reordered = model.encoder.reorder_encoder_out(out, order)
    assert torch.equal(reordered[ROWS][0], out[ROWS][0].index_select(0, order))
    assert torch.equal(reordered["encoder_out"][0], out["encoder_out"][0].index_select(1, order))
