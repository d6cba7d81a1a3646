"""The model sizes the drivers, the benches and the recipes know by name, written once: each
size's HLT-MT architecture, fairseq's plain ``transformer`` of the same sizes (its baseline), and
the dimensions of the sizes the plugin defines itself (the CPU sizes; the others are fairseq's).

models/archs.py and models/baselines.py register the architectures with these dimensions
(tests/models/test_archs.py checks every pair against fairseq's registry); the experiment
recipe's hyper-parameters name a size (``Hyper.model``). Nothing here imports torch or fairseq:
a command reads it before its options are checked.
"""

from dataclasses import dataclass, field
from typing import Dict


@dataclass(frozen=True)
class ModelSize:
    """One size: HLT-MT's architecture (and LS-MNMT's), the baseline's (MNMT), and the
    dimensions the plugin's architectures of this size set (empty: fairseq's own)."""

    hltmt_arch: str
    baseline_arch: str
    dims: Dict[str, object] = field(default_factory=dict)


MODEL_SIZES: Dict[str, ModelSize] = {
    # for CPU work: tests, demos, the quality study and the benches
    "tiny": ModelSize(
        "hltmt_transformer_tiny",
        "transformer_hltmt_tiny",
        dict(
            encoder_embed_dim=128,
            encoder_ffn_embed_dim=256,
            encoder_layers=2,
            encoder_attention_heads=4,
            decoder_layers=2,
            decoder_attention_heads=4,
            share_decoder_input_output_embed=True,
        ),
    ),
    "small": ModelSize(
        "hltmt_transformer_small",
        "transformer_hltmt_small",
        dict(
            encoder_embed_dim=256,
            encoder_ffn_embed_dim=1024,
            encoder_layers=4,
            encoder_attention_heads=4,
            decoder_layers=3,
            decoder_attention_heads=4,
            share_decoder_input_output_embed=True,
        ),
    ),
    # fairseq's transformer-base and transformer-big
    "base": ModelSize("hltmt_transformer", "transformer"),
    "big": ModelSize("hltmt_transformer_big", "transformer_wmt_en_de_big"),
    # the authors' XLM-R recipe: the baseline is given XLM-R's shape by the recipe's own options
    "xlmr_base": ModelSize("hltmt_transformer_xlmr_base", "transformer"),
}
