"""The architectures of ``hltmt_transformer`` (sizes; the SLP options' defaults); the CPU sizes'
dimensions, shared with the plain-transformer baselines (:mod:`hltmt_plugin.models.baselines`),
are those of the one size table, :mod:`hltmt_plugin.sizes`."""

from fairseq.models import register_model_architecture
from fairseq.models.transformer.transformer_legacy import base_architecture, transformer_wmt_en_de_big

from hltmt_plugin.pretrained import architecture_from_checkpoint
from hltmt_plugin.sizes import MODEL_SIZES


@register_model_architecture("hltmt_transformer", "hltmt_transformer")
def hltmt_transformer(args):
    """Transformer-base sizes (d 512, FFN 2048, 6+6 layers, 8 heads); with
    ``--finetune-from-model``, the checkpoint's options where none is given."""
    architecture_from_checkpoint(args)
    base_architecture(args)


@register_model_architecture("hltmt_transformer", "hltmt_transformer_big")
def hltmt_transformer_big(args):
    """Transformer-big sizes (d 1024, FFN 4096, 6+6 layers, 16 heads)."""
    transformer_wmt_en_de_big(args)


@register_model_architecture("hltmt_transformer", "hltmt_transformer_xlmr_base")
def hltmt_transformer_xlmr_base(args):
    """The authors' recipe: an XLM-R-base-shaped encoder (12 layers, d 768, FFN 3072, 12 heads,
    learned positions, embedding layer norm, unscaled embeddings, GELU) and a 6-layer decoder
    of the same width, for --pretrained-xlmr-checkpoint."""
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 768)
    args.encoder_ffn_embed_dim = getattr(args, "encoder_ffn_embed_dim", 3072)
    args.encoder_layers = getattr(args, "encoder_layers", 12)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 12)
    args.decoder_layers = getattr(args, "decoder_layers", 6)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 12)
    args.encoder_learned_pos = getattr(args, "encoder_learned_pos", True)
    args.decoder_learned_pos = getattr(args, "decoder_learned_pos", True)
    args.layernorm_embedding = getattr(args, "layernorm_embedding", True)
    args.no_scale_embedding = getattr(args, "no_scale_embedding", True)
    args.activation_fn = getattr(args, "activation_fn", "gelu")
    args.max_source_positions = getattr(args, "max_source_positions", 512)
    args.max_target_positions = getattr(args, "max_target_positions", 512)
    args.share_all_embeddings = getattr(args, "share_all_embeddings", True)
    hltmt_transformer(args)


def set_sizes(args, name: str):
    """Default the model sizes of ``args`` to those of the size ``name`` (hltmt_plugin/sizes.py;
    what is set stays)."""
    for key, value in MODEL_SIZES[name].dims.items():
        setattr(args, key, getattr(args, key, value))


@register_model_architecture("hltmt_transformer", "hltmt_transformer_tiny")
def hltmt_transformer_tiny(args):
    """A small model for tests and CPU demos (d 128, FFN 256, 2+2 layers, 4 heads)."""
    set_sizes(args, "tiny")
    hltmt_transformer(args)


@register_model_architecture("hltmt_transformer", "hltmt_transformer_small")
def hltmt_transformer_small(args):
    """The DebMT-10 CPU benchmark size (d 256, FFN 1024, 4+3 layers, 4 heads)."""
    set_sizes(args, "small")
    hltmt_transformer(args)
