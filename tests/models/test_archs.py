"""The architectures of ``hltmt_transformer`` (hltmt_plugin/models/archs.py): each registered
arch's sizes and the SLP options' defaults, as fairseq's own parser gives them; an option given
on the command line wins over the arch's default."""

import pytest
from fairseq import options
from fairseq.models import ARCH_MODEL_REGISTRY

from conftest import LANGS, PAIRS, PLUGIN
from hltmt_plugin.models.hltmt_transformer import HltmtTransformerModel

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

SIZES = ("encoder_embed_dim", "encoder_ffn_embed_dim", "encoder_layers", "encoder_attention_heads")
DECODER = ("decoder_embed_dim", "decoder_ffn_embed_dim", "decoder_layers", "decoder_attention_heads")
EXPECTED = {  # (encoder sizes, decoder sizes, embeddings shared (input-output, all))
    "hltmt_transformer": ((512, 2048, 6, 8), (512, 2048, 6, 8), (False, False)),
    "hltmt_transformer_big": ((1024, 4096, 6, 16), (1024, 4096, 6, 16), (False, False)),
    "hltmt_transformer_xlmr_base": ((768, 3072, 12, 12), (768, 3072, 6, 12), (False, True)),
    "hltmt_transformer_tiny": ((128, 256, 2, 4), (128, 256, 2, 4), (True, False)),
    "hltmt_transformer_small": ((256, 1024, 4, 4), (256, 1024, 3, 4), (True, False)),
}


def parse(arch, *extra):
    """The options fairseq-train parses for ``--arch arch`` (the data folder is not read)."""
    argv = ["data-bin", "--user-dir", PLUGIN, "--task", "hltmt_translation", "--arch", arch, "--langs", LANGS]
    return options.parse_args_and_arch(
        options.get_training_parser(), [*argv, "--lang-pairs", PAIRS, "--encoder-langtok", "tgt", *extra]
    )


def test_every_registered_hltmt_arch_is_listed_here():
    assert sorted(a for a, model in ARCH_MODEL_REGISTRY.items() if model is HltmtTransformerModel) == sorted(EXPECTED)


@pytest.mark.parametrize("arch", sorted(EXPECTED))
def test_each_arch_parses_with_its_sizes_and_the_slp_defaults(arch):
    args = parse(arch)
    encoder, decoder, (share_io, share_all) = EXPECTED[arch]
    assert args.arch == arch
    assert tuple(getattr(args, k) for k in SIZES) == encoder
    assert tuple(getattr(args, k) for k in DECODER) == decoder
    assert bool(args.share_decoder_input_output_embed) == share_io and bool(args.share_all_embeddings) == share_all
    assert args.high_resource_langs is None and args.slp_pool_size == 3 and args.slp_hidden_dim is None
    assert args.slp_hard_prob == 0.5 and not args.slp_language_specific


def test_the_xlmr_recipe_is_xlmr_base_shaped():
    args = parse("hltmt_transformer_xlmr_base")
    assert args.encoder_learned_pos and args.decoder_learned_pos and args.layernorm_embedding
    assert args.no_scale_embedding and args.activation_fn == "gelu"
    assert args.max_source_positions == args.max_target_positions == 512


@pytest.mark.parametrize("arch", ["hltmt_transformer_tiny", "hltmt_transformer_small", "hltmt_transformer_xlmr_base"])
def test_an_option_on_the_command_line_wins_over_the_archs_default(arch):
    args = parse(arch, "--encoder-layers", "3", "--decoder-attention-heads", "2", "--activation-fn", "tanh")
    assert (args.encoder_layers, args.decoder_attention_heads, args.activation_fn) == (3, 2, "tanh")
    assert args.encoder_embed_dim == EXPECTED[arch][0][0]  # the rest stays the arch's
