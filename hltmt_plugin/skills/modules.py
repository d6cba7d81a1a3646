"""The skill modules (SkillNet-X): skill FFNs, language-specific self-attention, and the table
that turns a row's direction into its set of active skills.

- **Skill FFN**: ``n`` parallel FFNs, one per named skill; the output is the mean of the
  active skills' outputs. Each distinct set of active skills is one routing id, so
  :func:`~hltmt_plugin.routing.route` groups the rows of a mixed batch by their set
  and runs only that set's skills on them: an inactive skill is neither computed nor given a
  gradient. The mean is computed as ``y_1 + sum_k (y_k - y_1) / n``, exactly ``y_1`` while
  the active skills agree (dense-to-skill initialisation).
- **Skill attention**: one set of Q/K/V projections per language, chosen per sentence by its
  source language; the output projection stays shared. Each language's attention is the call
  fairseq's ``MultiheadAttention`` makes (``F.multi_head_attention_forward``) with that
  language's Q/K/V.
"""

import logging
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.languages import SRC, TGT, valid_rows
from hltmt_plugin.routing import PassRows, route
from hltmt_plugin.skills.config import SkillMatrix

logger = logging.getLogger(__name__)

FFN_IDS, ATTENTION_IDS = "skill_ffn", "skill_attention"  # PassRows ids: the direction's skill set, the source


def copy_linear(linear: nn.Linear) -> nn.Linear:
    new = nn.Linear(linear.in_features, linear.out_features, bias=linear.bias is not None)
    new = new.to(linear.weight.device, linear.weight.dtype)
    with torch.no_grad():
        new.weight.copy_(linear.weight)
        if linear.bias is not None:
            new.bias.copy_(linear.bias)
    return new


class SkillDirections(nn.Module):
    """Each direction (source, target) -> the id of its set of active skills (no parameters)."""

    def __init__(self, langs: Sequence[str], matrix: SkillMatrix):
        super().__init__()
        self.langs = list(langs)
        self.combos = matrix.combos()
        table = torch.full((len(self.langs), len(self.langs)), -1, dtype=torch.long)
        for key, active in matrix.directions.items():
            s, t = key.split("-")
            table[self.langs.index(s), self.langs.index(t)] = self.combos.index(tuple(active))
        self.register_buffer("combo_of", table, persistent=False)

    def ffn_ids(self, record: Tensor) -> Tensor:
        src, tgt = record[:, SRC], record[:, TGT]
        combo = self.combo_of[src, tgt]
        if not valid_rows(self, combo >= 0):
            b = int((combo < 0).nonzero()[0, 0])
            raise HltmtInputError(
                f"direction {self.langs[int(src[b])]}-{self.langs[int(tgt[b])]} has no entry in the skill "
                "matrix: add it to the --skill-matrix file with the skills it should combine"
            )
        return combo


def source_ids(record: Tensor) -> Tensor:
    return record[:, SRC]


class SkillFFN(nn.Module):
    """One FFN (fc1, activation, activation dropout, fc2) per skill; output = mean of the
    active skills' outputs, per row by its set of active skills. Every skill starts as a
    copy of the dense ``fc1`` / ``fc2`` given."""

    def __init__(
        self,
        fc1: nn.Linear,
        fc2: nn.Linear,
        activation_fn,
        activation_dropout_module: nn.Module,
        skills: Sequence[str],
        combos,
        rows: PassRows,
    ):
        super().__init__()
        self.activation_fn = activation_fn
        self.activation_dropout_module = activation_dropout_module
        self.combos = list(combos)
        self.rows = rows
        self.experts = nn.ModuleDict()
        for skill in skills:
            expert = nn.Module()
            expert.fc1 = copy_linear(fc1)
            expert.fc2 = copy_linear(fc2)
            self.experts[skill] = expert

    def run_skill(self, skill: str, x: Tensor) -> Tensor:
        expert = self.experts[skill]
        return expert.fc2(self.activation_dropout_module(self.activation_fn(expert.fc1(x))))

    def combo_fn(self, active: Sequence[str]):
        def fn(x: Tensor) -> Tensor:
            first = self.run_skill(active[0], x)
            if len(active) == 1:
                return first
            rest = [self.run_skill(s, x) - first for s in active[1:]]  # exact y_1 while the skills agree
            return first + torch.stack(rest).sum(0) / len(active)

        return fn

    def forward(self, x: Tensor) -> Tensor:  # T x B x C
        return route(x, self.rows.plan(FFN_IDS), [self.combo_fn(c) for c in self.combos], dim=1)

    def upgrade_state_dict_named(self, state_dict, name):
        """A dense checkpoint: copy the layer's fc1 / fc2 into every skill."""
        layer = name.rsplit(".", 1)[0]
        if f"{layer}.fc1.weight" not in state_dict or any(k.startswith(f"{name}.") for k in state_dict):
            return
        for skill in self.experts:
            for fc in ("fc1", "fc2"):
                for p in ("weight", "bias"):
                    state_dict[f"{name}.experts.{skill}.{fc}.{p}"] = state_dict[f"{layer}.{fc}.{p}"].clone()
        for fc in ("fc1", "fc2"):
            for p in ("weight", "bias"):
                del state_dict[f"{layer}.{fc}.{p}"]
        logger.info(f"skills: {layer}: every skill FFN initialised from the checkpoint's dense FFN")


class SkillSelfAttention(nn.Module):
    """Self-attention with one set of Q/K/V per language and the dense output projection.
    Called as fairseq's encoder layer calls ``MultiheadAttention`` (query = key = value)."""

    def __init__(self, dense: nn.Module, langs: Sequence[str], rows: PassRows):
        super().__init__()
        if getattr(dense, "bias_k", None) is not None or dense.add_zero_attn or getattr(dense, "use_xformers", False):
            raise HltmtConfigError("--skill-attention supports fairseq's plain self-attention only")
        self.embed_dim, self.num_heads = dense.embed_dim, dense.num_heads
        self.dropout_module = dense.dropout_module
        self.out_proj = dense.out_proj
        self.rows = rows
        self.langs = list(langs)
        self.skills = nn.ModuleDict()
        for lang in langs:  # dense-to-skill: each language starts with the dense Q/K/V
            qkv = nn.Module()
            qkv.q_proj, qkv.k_proj, qkv.v_proj = (
                copy_linear(dense.q_proj),
                copy_linear(dense.k_proj),
                copy_linear(dense.v_proj),
            )
            self.skills[lang] = qkv

    def attend(self, lang: str, x: Tensor, key_padding_mask: Optional[Tensor], attn_mask: Optional[Tensor]):
        qkv = self.skills[lang]
        out, _ = F.multi_head_attention_forward(  # exactly fairseq's MultiheadAttention fast path
            x,
            x,
            x,
            self.embed_dim,
            self.num_heads,
            torch.empty([0]),
            torch.cat((qkv.q_proj.bias, qkv.k_proj.bias, qkv.v_proj.bias)),
            None,
            None,
            False,
            self.dropout_module.p,
            self.out_proj.weight,
            self.out_proj.bias,
            self.training or self.dropout_module.apply_during_inference,
            key_padding_mask.bool() if key_padding_mask is not None else None,
            False,
            attn_mask,
            use_separate_proj_weight=True,
            q_proj_weight=qkv.q_proj.weight,
            k_proj_weight=qkv.k_proj.weight,
            v_proj_weight=qkv.v_proj.weight,
        )
        return out

    def forward(
        self,
        query: Tensor,
        key=None,
        value=None,
        key_padding_mask: Optional[Tensor] = None,
        need_weights: bool = False,
        attn_mask: Optional[Tensor] = None,
        **unused,
    ):
        plan = self.rows.plan(ATTENTION_IDS)
        if key_padding_mask is None:  # fairseq passes None for a batch without padding: keep it None
            fns = [lambda x, lang=lang: self.attend(lang, x, None, attn_mask) for lang in self.langs]
            return route(query, plan, fns, dim=1), None
        fns = [lambda x, kpm, lang=lang: self.attend(lang, x, kpm, attn_mask) for lang in self.langs]
        return route(query, plan, fns, key_padding_mask, dim=1), None

    def upgrade_state_dict_named(self, state_dict, name):
        """A dense checkpoint: copy the dense Q/K/V into every language."""
        if f"{name}.q_proj.weight" not in state_dict or any(k.startswith(f"{name}.skills.") for k in state_dict):
            return
        for lang in self.skills:
            for proj in ("q_proj", "k_proj", "v_proj"):
                for p in ("weight", "bias"):
                    state_dict[f"{name}.skills.{lang}.{proj}.{p}"] = state_dict[f"{name}.{proj}.{p}"].clone()
        for proj in ("q_proj", "k_proj", "v_proj"):
            for p in ("weight", "bias"):
                del state_dict[f"{name}.{proj}.{p}"]
        logger.info(f"skills: {name}: every language's Q/K/V initialised from the checkpoint's dense ones")
