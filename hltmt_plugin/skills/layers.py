"""fairseq's encoder layer with skills, built through fairseq's own factory methods.

``build_self_attention`` returns the language-specific attention; the FFN is one module
(:class:`~hltmt_plugin.skills.modules.SkillFFN`, registered as ``skill_ffn``) that does
``fc2(dropout(act(fc1(x))))`` per skill, so the layer is built with ``fc1`` the identity,
``fc2`` the skill FFN and a linear activation without dropout (a copy of the layer's config
says so); fairseq's ``forward`` runs unchanged around them.
"""

import copy
from dataclasses import dataclass
from typing import List, Tuple

from fairseq import utils
from fairseq.modules import FairseqDropout
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase

from hltmt_plugin.routing import PassRows
from hltmt_plugin.skills.modules import SkillFFN, SkillSelfAttention


@dataclass
class SkillLayerSpec:
    """What one skill layer holds."""

    ffn: bool
    attention: bool
    skills: List[str]
    combos: List[Tuple[str, ...]]
    langs: List[str]
    rows: PassRows


def _identity(x):
    return x


class SkillLayerMixin:
    def __init__(self, cfg, *args, skills: SkillLayerSpec, **kwargs):
        self.skill_spec = skills  # read by the factory methods that fairseq's __init__ calls
        self.dense_cfg = cfg
        if skills.ffn:  # the skill FFN runs activation and dropout itself
            cfg = copy.deepcopy(cfg)
            cfg.activation_fn, cfg.activation_dropout, cfg.relu_dropout = "linear", 0.0, 0.0
        super().__init__(cfg, *args, **kwargs)

    def build_self_attention(self, embed_dim, cfg):
        dense = super().build_self_attention(embed_dim, cfg)
        spec = self.skill_spec
        return SkillSelfAttention(dense, spec.langs, spec.rows) if spec.attention else dense

    def build_fc1(self, input_dim, output_dim, q_noise, qn_block_size):
        dense = super().build_fc1(input_dim, output_dim, q_noise, qn_block_size)
        if not self.skill_spec.ffn:
            return dense
        self._dense_fc1 = [dense]  # a list: not registered as a submodule
        return _identity

    def build_fc2(self, input_dim, output_dim, q_noise, qn_block_size):
        dense = super().build_fc2(input_dim, output_dim, q_noise, qn_block_size)
        spec = self.skill_spec
        if not spec.ffn:
            return dense
        cfg = self.dense_cfg
        dropout_p = cfg.activation_dropout or getattr(cfg, "relu_dropout", 0) or 0
        self.skill_ffn = SkillFFN(
            self._dense_fc1.pop(),
            dense,
            utils.get_activation_fn(cfg.activation_fn),
            FairseqDropout(float(dropout_p), module_name=type(self).__name__),
            spec.skills,
            spec.combos,
            spec.rows,
        )
        return self.skill_ffn.forward  # a bound method: the module stays registered once, as skill_ffn


class SkillEncoderLayer(SkillLayerMixin, TransformerEncoderLayerBase):
    """fairseq's encoder layer with skill attention and / or skill FFNs."""


def layer_spec(layout, rows: PassRows) -> SkillLayerSpec:
    return SkillLayerSpec(
        ffn=layout.cfg.skill_ffn,
        attention=layout.cfg.skill_attention,
        skills=list(layout.matrix.skills),
        combos=layout.matrix.combos(),
        langs=list(layout.langs),
        rows=rows,
    )
