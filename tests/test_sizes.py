"""The one size table (hltmt_plugin/sizes.py): every architecture the plugin registers is a
size's, and each size's baseline is fairseq's plain transformer of the same sizes. (That the
commands read it before torch and fairseq: tests/cli/test_startup.py, through the drivers'
recipe.)"""

import pytest

from hltmt_plugin.sizes import MODEL_SIZES

DIMS = (
    "encoder_embed_dim",
    "encoder_ffn_embed_dim",
    "encoder_layers",
    "encoder_attention_heads",
    "decoder_embed_dim",
    "decoder_ffn_embed_dim",
    "decoder_layers",
    "decoder_attention_heads",
    "share_decoder_input_output_embed",
)


def arch_args(arch):
    """The options an architecture sets, as fairseq's own registry applies them."""
    import argparse

    from fairseq.models import ARCH_CONFIG_REGISTRY

    import hltmt_plugin.models  # noqa: F401  (registers the architectures)

    args = argparse.Namespace()
    ARCH_CONFIG_REGISTRY[arch](args)
    return args


def test_every_registered_hltmt_architecture_is_a_sizes():
    from fairseq.models import ARCH_MODEL_REGISTRY

    from hltmt_plugin.models.hltmt_transformer import HltmtTransformerModel

    registered = {a for a, model in ARCH_MODEL_REGISTRY.items() if model is HltmtTransformerModel}
    assert registered == {size.hltmt_arch for size in MODEL_SIZES.values()}


@pytest.mark.parametrize("name", sorted(MODEL_SIZES))
def test_each_baseline_is_fairseqs_transformer_of_the_same_sizes(name):
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.models.transformer import TransformerModel

    size = MODEL_SIZES[name]
    assert ARCH_MODEL_REGISTRY[size.baseline_arch] is TransformerModel
    hltmt, baseline = arch_args(size.hltmt_arch), arch_args(size.baseline_arch)
    assert all(getattr(hltmt, k) == v for k, v in size.dims.items())
    if name != "xlmr_base":  # the XLM-R recipe gives its baseline XLM-R's shape in options of its own
        assert [getattr(hltmt, k) for k in DIMS] == [getattr(baseline, k) for k in DIMS]
