"""fairseq's encoder layer built with skills (hltmt_plugin/skills/layers.py): which modules a
skill layer holds (fc1 the identity, fc2 the skill FFN, the language attention), skill
attention alone, and beam search = a full forward pass with skills and adapters."""

import pytest
import torch

from conftest import DIRECTIONS, LANGS, assert_beam_equals_forward, build, mixed_sample, randomize_adapters
from hltmt_plugin.skills import SkillFFN, SkillSelfAttention
from hltmt_plugin.skills.layers import SkillEncoderLayer
from skills_common import SKILLS, randomize_skills, skilled_model

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


def test_beam_search_scores_equal_a_full_forward_pass_with_skills(data_bin):
    _, task, model = build(data_bin, *SKILLS, "--language-adapters", "--shared-adapters")
    randomize_skills(model)
    randomize_adapters(model, scale=0.2)
    model.eval()
    sample = mixed_sample(task, DIRECTIONS, seed=3)
    checked = assert_beam_equals_forward(task, model, sample, beam=3, with_lang_ids=True)
    assert checked == len(DIRECTIONS) * 3


def test_a_skill_layer_is_fairseqs_layer_around_the_skill_modules(data_bin):
    _, _, model = skilled_model(data_bin)
    layer = model.encoder.layers[0]
    assert isinstance(layer, SkillEncoderLayer)
    assert isinstance(layer.self_attn, SkillSelfAttention) and isinstance(layer.skill_ffn, SkillFFN)
    x = torch.randn(3, 2, 128)
    assert layer.fc1(x) is x and layer.fc2 == layer.skill_ffn.forward  # fc1 the identity, fc2 the skill FFN
    assert torch.equal(layer.activation_fn(x), x)  # the skill FFN runs the activation itself
    names = [n for n, _ in layer.named_parameters()]
    assert not any(n.startswith(("fc1.", "fc2.")) for n in names)  # the skill FFN is registered once
    assert "skill_ffn.experts.generic.fc1.weight" in names


def test_skill_attention_alone_keeps_fairseqs_ffn(data_bin):
    _, _, model = build(data_bin, "--skill-attention", "--enable-lang-ids")
    layer = model.encoder.layers[1]
    assert isinstance(layer.self_attn, SkillSelfAttention) and not hasattr(layer, "skill_ffn")
    assert isinstance(layer.fc1, torch.nn.Linear) and isinstance(layer.fc2, torch.nn.Linear)
    assert sorted(layer.self_attn.skills) == sorted(LANGS.split(","))
