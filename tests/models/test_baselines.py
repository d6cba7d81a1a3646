"""The plain-transformer baselines (hltmt_plugin/models/baselines.py): ``transformer_hltmt_tiny``
and ``transformer_hltmt_small`` build fairseq's own ``transformer`` with the sizes of the
``hltmt_transformer`` arch of the same name, so that they differ from HLT-MT only by its
language-specific decoder top: the same weights, of the same shapes, but the pool's."""

import pytest
from fairseq import options, tasks
from fairseq.models.transformer import TransformerModel

from conftest import HIGH, LANGS, PAIRS, PLUGIN

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

SIZES = ("encoder_embed_dim", "encoder_ffn_embed_dim", "encoder_layers", "encoder_attention_heads")
SIZES += ("decoder_embed_dim", "decoder_ffn_embed_dim", "decoder_layers", "decoder_attention_heads")
SIZES += ("share_decoder_input_output_embed",)


def top_of_decoder(key):
    """A decoder weight above its layers: not an embedding, a position or a layer's."""
    return key.startswith("decoder.") and not key.startswith(("decoder.layers.", "decoder.embed_", "decoder.version"))


def build_as(data_bin, task, arch, *extra):
    argv = [data_bin, "--user-dir", PLUGIN, "--task", task, "--arch", arch, "--langs", LANGS]
    argv += ["--lang-pairs", PAIRS, "--encoder-langtok", "tgt", "--cpu", *extra]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    return args, tasks.setup_task(args).build_model(args)


@pytest.mark.parametrize("size", ["tiny", "small"])
def test_the_baseline_is_fairseqs_transformer_with_the_sizes_of_hltmt(data_bin, size):
    args, baseline = build_as(data_bin, "translation_multi_simple_epoch", f"transformer_hltmt_{size}")
    ours_args, ours = build_as(
        data_bin,
        "hltmt_translation",
        f"hltmt_transformer_{size}",
        "--high-resource-langs",
        HIGH,
        "--slp-pool-size",
        "2",
    )
    assert type(baseline) is TransformerModel
    assert {k: getattr(args, k) for k in SIZES} == {k: getattr(ours_args, k) for k in SIZES}
    shapes = {k: tuple(v.shape) for k, v in baseline.state_dict().items()}
    ours_shapes = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    extra = sorted(set(ours_shapes) - set(shapes))
    # what HLT-MT adds: the decoder top (the pool and what routes it) and the encoder's saved language names
    assert all(k.startswith("encoder.languages.") or top_of_decoder(k) for k in extra), extra
    assert any(k.startswith("decoder.slp.") for k in extra) and set(shapes) <= set(ours_shapes)
    assert all(ours_shapes[k] == shape for k, shape in shapes.items())  # every baseline weight, of the same shape


def test_an_option_given_wins_over_the_baselines_size(data_bin):
    args, model = build_as(
        data_bin, "translation_multi_simple_epoch", "transformer_hltmt_tiny", "--encoder-layers", "1"
    )
    assert args.encoder_layers == 1 and len(model.encoder.layers) == 1 and len(model.decoder.layers) == 2
