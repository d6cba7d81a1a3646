"""fairseq's layers with adapters after their sublayers (hltmt_plugin/adapters/layers.py): what
each adapter sees under Houlsby and Pfeiffer placement, post- and pre-norm, in the encoder and
the decoder (no adapter after cross-attention; the invertible adapter on the first layer's
input), and beam search = a full forward pass through them."""

import pytest
import torch

from adapters_common import Capture
from conftest import DIRECTIONS, MADX, assert_beam_equals_forward, build, mixed_sample, randomize_adapters, side_by_side
from hltmt_plugin.adapters import AdapterDecoderLayer, AdapterEncoderLayer

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


def run_encoder(model, task, directions=("en-de", "de-en")):
    sample = mixed_sample(task, list(directions))
    net = sample["net_input"]
    with torch.no_grad():
        model.encoder(net["src_tokens"], net["src_lengths"], src_lang_id=net["src_lang_id"])


@pytest.mark.parametrize("normalize_before", [False, True])
def test_houlsby_adapters_see_each_sublayer_output_before_the_residual_add(data_bin, normalize_before):
    extra = ["--encoder-normalize-before"] if normalize_before else []
    _, task, model = build(data_bin, "--shared-adapters", "--adapter-placement", "houlsby", *extra)
    randomize_adapters(model)
    model.eval()
    layer = model.encoder.layers[1]
    assert isinstance(layer, AdapterEncoderLayer) and set(layer.adapters.keys()) == {"self_attn", "ffn"}
    with Capture() as cap:
        cap.on("attn", layer.self_attn)
        cap.on("fc2", layer.fc2)
        cap.on("attn_adapter", layer.adapters["self_attn"].shared_adapter)
        cap.on("ffn_adapter", layer.adapters["ffn"].shared_adapter)
        cap.on("layer", layer)
        cap.on("attn_ln", layer.self_attn_layer_norm)
        cap.on("final_ln", layer.final_layer_norm)
        run_encoder(model, task)
    attn_out, fc2_out = cap.seen["attn"][0][1], cap.seen["fc2"][0][1]
    torch.testing.assert_close(cap.seen["attn_adapter"][0][0], attn_out)  # after the attention projection
    torch.testing.assert_close(cap.seen["ffn_adapter"][0][0], fc2_out)  # after the FFN
    layer_in, layer_out = cap.seen["layer"][0]
    delta = cap.seen["ffn_adapter"][0][1]
    if normalize_before:  # x + A(sublayer(LN(x))), no layer norm after
        ffn_in = cap.seen["final_ln"][0][0]
        torch.testing.assert_close(layer_out, ffn_in + fc2_out + delta, rtol=0, atol=1e-5)
    else:  # LN(res + A(sublayer)) with A(s) = s + delta(s)
        ffn_res = cap.seen["attn_ln"][0][1]
        torch.testing.assert_close(layer_out, layer.final_layer_norm(ffn_res + fc2_out + delta), rtol=0, atol=1e-5)
        attn_delta = cap.seen["attn_adapter"][0][1]
        torch.testing.assert_close(
            ffn_res, layer.self_attn_layer_norm(layer_in + attn_out + attn_delta), rtol=0, atol=1e-5
        )


def test_pfeiffer_adapter_sees_the_normed_ffn_output_and_madx_stacks_on_the_ffn_residual(data_bin):
    _, task, model = build(data_bin, "--language-adapters", "--shared-adapters", "--enable-lang-ids")
    randomize_adapters(model)
    model.eval()
    layer = model.encoder.layers[0]
    assert set(layer.adapters.keys()) == {"ffn"}  # pfeiffer: after the FFN only
    stack = layer.adapters["ffn"]
    with Capture() as cap:
        cap.on("attn_ln", layer.self_attn_layer_norm)
        cap.on("fc2", layer.fc2)
        cap.on("lang_en", stack.language_adapters["en"])
        cap.on("shared", stack.shared_adapter)
        cap.on("layer", layer)
        run_encoder(model, task, ["en-de", "en-fr"])  # every row has source en
    r = cap.seen["attn_ln"][0][1] + cap.seen["fc2"][0][1]  # the FFN block's output (its residual)
    h = layer.final_layer_norm(r)  # ... after its layer norm
    torch.testing.assert_close(cap.seen["lang_en"][0][0], h, rtol=0, atol=1e-5)  # MAD-X eq. 1: LA(h, r)
    la = cap.seen["lang_en"][0][1] + r
    torch.testing.assert_close(cap.seen["shared"][0][0], la, rtol=0, atol=1e-5)  # eq. 2: TA(LA, r)
    ta = cap.seen["shared"][0][1] + r
    torch.testing.assert_close(cap.seen["layer"][0][1], layer.final_layer_norm(ta), rtol=0, atol=1e-5)


def test_decoder_houlsby_adapters_skip_cross_attention_and_invertible_runs_on_the_first_layer_input(data_bin):
    _, task, model = build(
        data_bin,
        "--shared-adapters",
        "--decoder-adapters",
        "--adapter-placement",
        "houlsby",
        "--invertible-adapters",
        "--enable-lang-ids",
    )
    randomize_adapters(model)
    model.eval()
    layer = model.decoder.layers[0]
    assert isinstance(layer, AdapterDecoderLayer) and set(layer.adapters.keys()) == {"self_attn", "ffn"}
    sample = mixed_sample(task, ["en-de", "en-de"])
    with Capture() as cap:
        cap.on("self_attn", layer.self_attn)
        cap.on("cross_attn", layer.encoder_attn)
        cap.on("attn_adapter", layer.adapters["self_attn"].shared_adapter)
        cap.on("ffn_adapter", layer.adapters["ffn"].shared_adapter)
        cap.on("inv_de", model.decoder.invertible_adapters.adapters["de"])
        cap.on("layer", layer)
        cap.on("fc2", layer.fc2)
        with torch.no_grad():
            model(**sample["net_input"])
    torch.testing.assert_close(cap.seen["attn_adapter"][0][0], cap.seen["self_attn"][0][1])
    torch.testing.assert_close(cap.seen["ffn_adapter"][0][0], cap.seen["fc2"][0][1])
    assert len(cap.seen["attn_adapter"]) == 1  # none after the cross-attention
    # the first layer computes on A_de(embedding layer output): its self-attention (post-norm) sees it
    torch.testing.assert_close(cap.seen["self_attn"][0][0], cap.seen["inv_de"][0][1])
    assert not torch.allclose(cap.seen["inv_de"][0][0], cap.seen["inv_de"][0][1])


@pytest.mark.parametrize(
    "extra", [[], ["--encoder-normalize-before", "--decoder-normalize-before", "--adapter-placement", "houlsby"]]
)
def test_beam_search_scores_equal_a_full_forward_pass_with_adapters(data_bin, extra):
    _, task, model = build(data_bin, *MADX, *extra)
    randomize_adapters(model, scale=0.2)
    model.eval()
    sample = mixed_sample(task, seed=3)
    checked = assert_beam_equals_forward(task, model, sample, beam=4, with_lang_ids=True)
    assert checked == len(DIRECTIONS) * 4


@pytest.mark.parametrize("placement", ["houlsby", "pfeiffer"])
def test_one_model_with_adapters_serves_two_threads_at_once_each_as_alone(data_bin, placement):
    """Two threads run forward passes of one model with adapters together, on sentences of other
    source languages (barriers hold both just after the first encoder and decoder layers'
    self-attention, where a layer marks which adapters run next): each gets, bit for bit, what
    it gets alone."""
    _, task, model = build(data_bin, *MADX, "--adapter-placement", placement)
    randomize_adapters(model)
    model.eval()
    samples = {"de": mixed_sample(task, ["de-en", "de-en"]), "en": mixed_sample(task, ["en-fr", "en-gu", "en-de"])}

    def outputs(sample):
        with torch.no_grad():
            return model(**sample["net_input"])[0]

    alone = {name: outputs(sample) for name, sample in samples.items()}

    def wait_for_the_other(barrier):
        def hook(*_):
            barrier.wait()  # (and return None: the attention's output stays)

        return hook

    def hold(new_barrier):  # after the layer's own hook: both threads have marked their self-attention
        return [
            side.layers[0].self_attn.register_forward_hook(wait_for_the_other(new_barrier()))
            for side in (model.encoder, model.decoder)
        ]

    together = side_by_side(list(samples), lambda name: outputs(samples[name]), hold)
    assert all(torch.equal(together[name], alone[name]) for name in samples)
