"""Which layer class each encoder and decoder layer is (hltmt_plugin/models/layers.py): fairseq's
own where no feature touches the layer, else the subclass that holds exactly the features the
options give it."""

import pytest
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase

from conftest import build
from hltmt_plugin.adapters import AdapterDecoderLayer, AdapterEncoderLayer
from hltmt_plugin.models.layers import SkillAdapterEncoderLayer
from hltmt_plugin.skills.layers import SkillEncoderLayer, SkillLayerMixin

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

FAIRSEQ_ENC, FAIRSEQ_DEC = TransformerEncoderLayerBase, TransformerDecoderLayerBase
SKILLS = ["--skill-ffn", "--enable-lang-ids"]

LAYOUTS = {  # options -> (classes of the 2 encoder layers, classes of the 2 decoder layers)
    "none": ([], (FAIRSEQ_ENC, FAIRSEQ_ENC), (FAIRSEQ_DEC, FAIRSEQ_DEC)),
    "encoder adapters": (["--shared-adapters"], (AdapterEncoderLayer,) * 2, (FAIRSEQ_DEC,) * 2),
    "decoder adapters": (
        ["--shared-adapters", "--decoder-adapters", "--adapter-layers", "1"],
        (AdapterEncoderLayer,) * 2,  # (every encoder layer calls its stack; layer 0's is empty)
        (AdapterDecoderLayer,) * 2,
    ),
    "invertible only": (
        ["--invertible-adapters", "--enable-lang-ids"],
        (FAIRSEQ_ENC,) * 2,
        (AdapterDecoderLayer,) * 2,  # the first decoder layer runs the invertible adapter on its input
    ),
    "skills in layer 1": ([*SKILLS, "--skill-layers", "1"], (FAIRSEQ_ENC, SkillEncoderLayer), (FAIRSEQ_DEC,) * 2),
    "skills and adapters": (
        [*SKILLS, "--skill-layers", "1", "--shared-adapters"],
        (AdapterEncoderLayer, SkillAdapterEncoderLayer),
        (FAIRSEQ_DEC,) * 2,
    ),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_each_layer_is_the_class_of_exactly_its_features(data_bin, layout):
    extra, encoder, decoder = LAYOUTS[layout]
    _, _, model = build(data_bin, *extra)
    assert tuple(type(layer) for layer in model.encoder.layers) == encoder
    assert tuple(type(layer) for layer in model.decoder.layers) == decoder


def test_a_layer_with_skills_and_adapters_holds_both(data_bin):
    _, _, model = build(data_bin, *SKILLS, "--skill-attention", "--shared-adapters")
    layer = model.encoder.layers[0]
    assert isinstance(layer, SkillLayerMixin) and isinstance(layer, AdapterEncoderLayer)
    assert set(layer.adapters) == {"ffn"} and hasattr(layer, "skill_ffn")
    assert layer.placement == "pfeiffer" and layer.rows is model.encoder.rows
