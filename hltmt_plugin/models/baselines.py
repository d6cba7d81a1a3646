"""Plain fairseq ``transformer`` architectures of the same sizes as ours, for baselines that
differ from HLT-MT only by the language-specific decoder top."""

from fairseq.models import register_model_architecture
from fairseq.models.transformer.transformer_legacy import base_architecture

from hltmt_plugin.models.archs import set_sizes


@register_model_architecture("transformer", "transformer_hltmt_tiny")
def transformer_hltmt_tiny(args):
    """fairseq's ``transformer`` with the sizes of ``hltmt_transformer_tiny``."""
    set_sizes(args, "tiny")
    base_architecture(args)


@register_model_architecture("transformer", "transformer_hltmt_small")
def transformer_hltmt_small(args):
    """fairseq's ``transformer`` with the sizes of ``hltmt_transformer_small``."""
    set_sizes(args, "small")
    base_architecture(args)
