"""Adapters installed into ``hltmt_transformer`` (hltmt_plugin/adapters/feature.py): only the
chosen layers get them, the decoder's inverse before the tied output projection, a trained
checkpoint loads with the missing adapter weights at identity (same outputs), a sentence
without a source language, and a model without adapters left as it was."""

import pytest
import torch

from adapters_common import Capture, madx_model
from conftest import DIRECTIONS, MADX, build, make_sample, mixed_sample
from hltmt_plugin.compat.safe_loading import load_checkpoint
from hltmt_plugin.errors import HltmtInputError


@pytest.fixture(scope="module")
def madx(data_bin):
    return madx_model(data_bin)


def test_only_the_chosen_layers_get_adapters(data_bin):
    _, _, model = build(
        data_bin, "--shared-adapters", "--adapter-layers", "1", "--decoder-adapters", "--decoder-adapter-layers", "0"
    )
    assert len(model.encoder.layers[0].adapters) == 0 and len(model.encoder.layers[1].adapters) == 1
    assert len(model.decoder.layers[0].adapters) == 1 and len(model.decoder.layers[1].adapters) == 0


def test_the_target_languages_inverse_runs_between_the_slp_and_the_tied_output_projection(madx):
    _, task, model = madx
    assert model.decoder.output_projection.weight is model.decoder.embed_tokens.weight
    sample = mixed_sample(task)
    with Capture() as cap:
        cap.on("slp", model.decoder.slp)
        cap.on("projection", model.decoder.output_projection)
        with torch.no_grad():
            model(**sample["net_input"])
    slp_out, projected_in = cap.seen["slp"][0][1], cap.seen["projection"][0][0]  # B x T x C
    adapters = model.decoder.invertible_adapters.adapters
    for b, i in enumerate(sample["id"].tolist()):
        tgt = DIRECTIONS[i].split("-")[1]
        torch.testing.assert_close(projected_in[b], adapters[tgt].inverse(slp_out[b]), rtol=1e-5, atol=1e-5)
        assert not torch.allclose(projected_in[b], slp_out[b], atol=1e-3)


def test_a_trained_model_gives_the_same_outputs_right_after_adapters_are_added(data_bin, trained):
    ckpt, _ = trained
    state = load_checkpoint(ckpt)["model"]
    _, task, base = build(data_bin)
    base.load_state_dict(state)
    args, _, model = build(data_bin, *MADX)
    model.load_state_dict(state, strict=True, model_cfg=args)  # the missing adapter weights start at identity
    base.eval()
    model.eval()
    sample = mixed_sample(task)
    with torch.no_grad():
        expected = base(**sample["net_input"])[0]
        got = model(**sample["net_input"])[0]
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


def test_a_sentence_without_a_source_language_is_an_error(madx):
    _, task, model = madx
    sample = make_sample(task, ["en-de", "gu-en"])  # no src_lang_id
    with pytest.raises(HltmtInputError, match="--enable-lang-ids"):
        model(**sample["net_input"])


def test_adapters_off_leave_the_model_as_it_was(data_bin):
    _, _, model = build(data_bin)
    assert not any("adapter" in n for n in model.state_dict())
    assert type(model.encoder.layers[0]).__name__ == "TransformerEncoderLayerBase"
    assert type(model.decoder).__name__ == "HltmtTransformerDecoder"
