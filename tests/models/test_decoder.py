"""The HLT-MT decoder (hltmt_plugin/models/decoder.py): where the pre-norm decoder's final layer
norm goes (above the pool), a pool checkpoint refused by options that build none, a plain
fairseq ``transformer`` checkpoint loaded with the pool as the identity on top of its decoder,
and a decoder handed an encoder output without the language record."""

import copy

import pytest
import torch
from fairseq import options, tasks
from fairseq.models.transformer import TransformerModel

from conftest import DIRECTIONS, LANGS, PAIRS, PLUGIN, build, make_sample, side_by_side
from hltmt_plugin.errors import HltmtInputError
from hltmt_plugin.languages import ROWS

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

PRE_NORM = ["--encoder-normalize-before", "--decoder-normalize-before"]


def build_as(data_bin, arch, *extra):
    """Task and model of ``arch`` without --high-resource-langs (no pool), as fairseq-train builds them."""
    argv = [data_bin, "--user-dir", PLUGIN, "--task", "hltmt_translation", "--arch", arch, "--langs", LANGS]
    argv += ["--lang-pairs", PAIRS, "--encoder-langtok", "tgt", "--cpu", "--dropout", "0", *extra]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    task = tasks.setup_task(args)
    torch.manual_seed(1)
    return args, task, task.build_model(args)


def outputs(model, sample):
    model.eval()
    with torch.no_grad():
        return model(**sample["net_input"])[0]


class Seen:
    """The input and output of each hooked module in one forward pass."""

    def __init__(self, **modules):
        self.seen = {}
        self.handles = [m.register_forward_hook(self.hook(name)) for name, m in modules.items()]

    def hook(self, name):
        def record(module, inputs, output):
            self.seen[name] = (inputs[0].detach().clone(), output.detach().clone())

        return record

    def __enter__(self):
        return self.seen

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()


def test_a_pre_norm_decoder_normalises_above_the_pool(data_bin):
    _, task, model = build(data_bin, *PRE_NORM)
    decoder = model.decoder
    assert decoder.layer_norm is None and decoder.slp_output_norm is not None
    torch.nn.init.normal_(decoder.slp_output_norm.weight)  # not the identity, so the placement shows
    with Seen(slp=decoder.slp, norm=decoder.slp_output_norm, projection=decoder.output_projection) as seen:
        outputs(model, make_sample(task, DIRECTIONS))
    torch.testing.assert_close(seen["norm"][0], seen["slp"][1])  # the norm reads the pool's output
    torch.testing.assert_close(seen["projection"][0], seen["norm"][1])  # and the projection reads the norm's


def test_without_a_pool_or_post_norm_the_decoder_keeps_fairseqs_final_layer_norm(data_bin):
    _, _, pre_norm_plain = build_as(data_bin, "hltmt_transformer_tiny", *PRE_NORM)
    assert pre_norm_plain.decoder.slp is None and pre_norm_plain.decoder.slp_output_norm is None
    assert pre_norm_plain.decoder.layer_norm is not None
    _, _, post_norm = build(data_bin)
    assert post_norm.decoder.layer_norm is None and post_norm.decoder.slp_output_norm is None


def test_a_pool_checkpoint_is_refused_by_options_without_high_resource_langs(data_bin):
    _, _, pooled = build(data_bin)
    args, _, plain = build_as(data_bin, "hltmt_transformer_tiny")
    with pytest.raises(HltmtInputError, match="has an HLT-MT pool and these options build none: pass the training"):
        plain.load_state_dict(copy.deepcopy(pooled.state_dict()), strict=True, model_cfg=args)


def test_a_pre_norm_fairseq_transformer_checkpoint_loads_with_the_pool_as_the_identity(data_bin):
    _, task, dense = build_as(data_bin, "transformer_hltmt_tiny", *PRE_NORM)
    assert type(dense) is TransformerModel
    with torch.no_grad():
        for name, p in dense.named_parameters():
            if "layer_norm" in name:  # layer norms away from their initial (1, 0)
                p.add_(torch.randn_like(p) * 0.2)
    args, _, model = build(data_bin, *PRE_NORM)
    model.load_state_dict(copy.deepcopy(dense.state_dict()), strict=True, model_cfg=args)
    state = model.state_dict()
    for suffix in ("weight", "bias"):  # the decoder's final layer norm is now the one above the pool
        assert torch.equal(
            state["decoder.slp_output_norm." + suffix], dense.state_dict()["decoder.layer_norm." + suffix]
        )
    sample = make_sample(task, DIRECTIONS, max_len=9)
    expected = outputs(dense, sample)
    torch.testing.assert_close(outputs(model, sample), expected, rtol=0, atol=1e-5)
    with torch.no_grad():
        model.decoder.slp.universal.fc2.weight.normal_()  # the test can fail: the universal layer moved
    assert (outputs(model, sample) - expected).abs().max() > 1e-3


def test_a_post_norm_transformer_checkpoint_starts_each_pool_module_as_its_top_layer(data_bin):
    _, _, dense = build_as(data_bin, "transformer_hltmt_tiny")
    dense_state = dense.state_dict()
    args, _, model = build(data_bin)
    model.load_state_dict(copy.deepcopy(dense_state), strict=True, model_cfg=args)
    top = f"decoder.layers.{len(model.decoder.layers) - 1}.final_layer_norm."
    modules = [*model.decoder.slp.pool, model.decoder.slp.universal]
    assert len(modules) == 3
    for module in modules:
        assert not module.fc2.weight.any() and not module.fc2.bias.any()  # the residual passes the top through
        assert torch.equal(module.layer_norm.weight, dense_state[top + "weight"])
        assert torch.equal(module.layer_norm.bias, dense_state[top + "bias"])
        assert module.fc1.weight.abs().sum() > 0  # fc1 keeps its fresh initialisation
    assert {k for k in model.state_dict() if not k.startswith("decoder.slp.")} >= set(dense_state)


def test_an_encoder_output_without_the_language_record_is_refused(data_bin):
    _, task, model = build(data_bin)
    model.eval()
    net = make_sample(task, DIRECTIONS)["net_input"]
    with torch.no_grad():
        encoder_out = model.encoder(net["src_tokens"], net["src_lengths"])
        del encoder_out[ROWS]
        with pytest.raises(HltmtInputError, match="the decoder got no target language per sentence"):
            model.decoder(net["prev_output_tokens"], encoder_out=encoder_out)


def test_one_model_serves_two_threads_at_once_each_as_alone(data_bin):
    """Two threads run forward passes of one model together (barriers hold both inside the
    encoder's and the decoder's pass at once), on targets of a pool module and of the universal
    layer: each gets, bit for bit, what it gets alone."""
    _, task, model = build(data_bin)
    model.eval()
    samples = {
        "pool": make_sample(task, ["en-de", "en-fr", "en-de"]),
        "universal": make_sample(task, ["en-gu", "de-en"]),
    }
    alone = {name: outputs(model, sample) for name, sample in samples.items()}

    def wait_for_the_other(barrier):
        def hook(*_):
            barrier.wait()  # (and return None: a pre-hook's result would replace the layer's input)

        return hook

    def hold(new_barrier):
        return [
            side.layers[0].register_forward_pre_hook(wait_for_the_other(new_barrier()))
            for side in (model.encoder, model.decoder)
        ]

    together = side_by_side(list(samples), lambda name: outputs(model, samples[name]), hold)
    assert all(torch.equal(together[name], alone[name]) for name in samples)
