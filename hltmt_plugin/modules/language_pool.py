"""The selective language-specific pool (SLP), its gate and the universal layer (HLT-MT).

On top of the last decoder layer every sentence goes through one extra FFN sublayer:
- a high-resource target language goes into the pool of T modules, chosen by a gate over
  the model's own embedding row of the target-language token, ``p = softmax(W_g E[l])``;
  hard: the argmax module only (no gradient reaches the gate), soft: ``sum_t p_t F_t(x)``;
- every other target language goes through the universal module.
Rows are routed per sentence through :func:`hltmt_plugin.modules.routing.route`.
"""
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fairseq import utils
from fairseq.modules import FairseqDropout, LayerNorm

from hltmt_plugin.errors import HltmtInputError
from hltmt_plugin.modules.routing import RoutePlan, mix, route

HARD, SOFT = "hard", "soft"


class LanguageModule(nn.Module):
    """One FFN sublayer: ``LN(x + drop(W_u(drop(act(W_d x)))))`` (post-norm) or
    ``x + drop(W_u(drop(act(W_d LN(x)))))`` (pre-norm)."""

    def __init__(self, dim: int, hidden: int, activation_fn: str = "relu", dropout: float = 0.0,
                 activation_dropout: float = 0.0, normalize_before: bool = False):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.activation_fn = utils.get_activation_fn(activation_fn)
        self.activation_dropout = FairseqDropout(activation_dropout, module_name=self.__class__.__name__)
        self.dropout = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.layer_norm = LayerNorm(dim)
        self.normalize_before = normalize_before

    def forward(self, x: Tensor) -> Tensor:
        residual = x
        if self.normalize_before:
            x = self.layer_norm(x)
        x = self.dropout(self.fc2(self.activation_dropout(self.activation_fn(self.fc1(x)))))
        x = residual + x
        if not self.normalize_before:
            x = self.layer_norm(x)
        return x


class SelectiveLanguagePool(nn.Module):
    """T pool modules + 1 universal module + the gate, routed per row.

    Module ids: ``0..T-1`` are the pool, ``T`` is the universal layer.

    Args:
        dim: model dimension d.
        hidden: module dimension h.
        pool_size: T.
        num_high: number of high-resource target languages H (the rows of the gate matrix).
        hard_prob: probability of a hard update while the gate is learning.
        seed: with the update number, decides each update's hard/soft draw, so every worker
            (and a resumed run) makes the same draw.
    """

    def __init__(self, dim: int, hidden: int, pool_size: int, num_high: int, hard_prob: float = 0.5,
                 seed: int = 1, **module_kwargs):
        super().__init__()
        self.hard_prob = hard_prob
        self.seed = seed
        self.pool_size = pool_size
        self.pool = nn.ModuleList(LanguageModule(dim, hidden, **module_kwargs) for _ in range(pool_size))
        self.universal = LanguageModule(dim, hidden, **module_kwargs)
        self.gate = nn.Linear(dim, pool_size)
        # g(l) as checkpoints store it: one row per high-resource language, one-hot over T + 1
        # columns: a 1 at the language's pool module, or at column T while the gate learns.
        # Averaging or mixing checkpoints keeps a row one-hot only where they all agree; any
        # other mix is no map and is refused on load (check_map_onehot).
        self.register_buffer("fixed_map_onehot", encode_map(torch.full((num_high,), -1, dtype=torch.long), pool_size))
        # g(l) as module indices (-1 while the gate learns), derived from the one-hot; not stored.
        self.register_buffer("fixed_map", torch.full((num_high,), -1, dtype=torch.long), persistent=False)
        # Training forward passes the gate has seen while learning (stage high); stage all
        # refuses a model whose gate never learned.
        self.register_buffer("gate_steps", torch.zeros((), dtype=torch.long))
        self._map_fixed = False
        self.mode = HARD
        self.num_updates = 0

    def set_languages(self, langs: Sequence[str], high: Sequence[str]) -> None:
        """``high_of_lang``: each language of ``--langs`` (the record's index) -> its index among
        the high-resource languages, -1 for the universal layer's."""
        self.langs, self.high = list(langs), list(high)
        self.register_buffer("high_of_lang", torch.tensor(
            [self.high.index(lang) if lang in self.high else -1 for lang in self.langs], dtype=torch.long),
            persistent=False)

    @property
    def map_is_fixed(self) -> bool:
        """Kept on the host (no device synchronisation per step): set when the map is fixed
        and when a checkpoint is loaded."""
        return self._map_fixed

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        key = prefix + "fixed_map_onehot"
        legacy = state_dict.pop(prefix + "fixed_map", None)  # checkpoints before the one-hot form: indices
        if legacy is not None:
            check_fixed_map(legacy, self.pool_size, self.fixed_map.numel())
            if key in state_dict and not torch.equal(state_dict[key], encode_map(legacy, self.pool_size)):
                raise HltmtInputError(f"the checkpoint holds two routing maps that differ ({prefix}fixed_map "
                                      f"{legacy.tolist()} and {key}): it was not written by fairseq-train")
            state_dict[key] = encode_map(legacy, self.pool_size)
        if key in state_dict:
            check_map_onehot(state_dict[key], self.pool_size, getattr(self, "high", None) or
                             [f"row {i}" for i in range(self.fixed_map.numel())], key)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self.fixed_map.copy_(decode_map(self.fixed_map_onehot, self.pool_size))
        self._map_fixed = bool((self.fixed_map >= 0).all())

    def routing_map(self, high_lang_embeddings: Tensor) -> Dict[str, int]:
        """``g(l)`` by language name: the fixed map, or the gate's argmax now."""
        return dict(zip(self.high, self.current_map(high_lang_embeddings).tolist()))

    def gate_probs(self, high_lang_embeddings: Tensor) -> Tensor:
        """``P`` (H x T): the gate's distribution over the pool for each high-resource language."""
        with torch.autocast(device_type=high_lang_embeddings.device.type, enabled=False):  # float32 under amp
            logits = F.linear(high_lang_embeddings.float(), self.gate.weight.float(), self.gate.bias.float())
        return F.softmax(logits, dim=-1)

    def current_map(self, high_lang_embeddings: Tensor) -> Tensor:
        """``g(l)`` for every high-resource language: the fixed map, or the argmax of the gate."""
        if self.map_is_fixed:
            return self.fixed_map
        with torch.no_grad():
            return self.gate_probs(high_lang_embeddings).argmax(dim=-1)

    def fix_map(self, high_lang_embeddings: Tensor) -> Tensor:
        """Fix ``g(l) = argmax p_l`` from the current gate (unless fixed already), stop the
        gate from training, and return the map."""
        if not self.map_is_fixed:
            with torch.no_grad():
                self.fix_map_to(self.gate_probs(high_lang_embeddings).argmax(dim=-1))
        self.gate.requires_grad_(False)
        return self.fixed_map

    def fix_map_to(self, mapping: Tensor) -> None:
        """Fix a given map (e.g. the identity: one module per language, LS-MNMT)."""
        check_fixed_map(mapping, self.pool_size, self.fixed_map.numel())
        self.fixed_map.copy_(mapping)
        self.fixed_map_onehot.copy_(encode_map(self.fixed_map, self.pool_size))
        self._map_fixed = True
        self.gate.requires_grad_(False)

    def set_num_updates(self, num_updates: int):
        """Draw this update's routing (fairseq calls this before every training step)."""
        self.num_updates = num_updates
        draw = np.random.default_rng([self.seed, num_updates]).random()
        self.mode = HARD if draw < self.hard_prob else SOFT

    def use_soft_routing(self) -> bool:
        return self.training and self.mode == SOFT and not self.map_is_fixed

    def module_ids(self, tgt: Tensor, high_lang_embeddings: Tensor) -> Tensor:
        """(B,) each row's module under hard routing, from its target language (index in
        ``--langs``): ``g(l)`` for a high-resource language, the universal module ``T`` otherwise."""
        high_idx = self.high_of_lang.index_select(0, tgt)
        universal = torch.full_like(high_idx, self.pool_size)
        mapped = self.current_map(high_lang_embeddings).index_select(0, high_idx.clamp(min=0))
        return torch.where(high_idx < 0, universal, mapped)

    def forward(self, x: Tensor, tgt: Tensor, high_lang_embeddings: Tensor, plan: Optional[RoutePlan] = None
                ) -> Tuple[Tensor, Dict[str, Optional[Tensor]]]:
        """Route ``x`` (B x T x C) per row.

        Args:
            tgt: (B,) each row's target language (index in ``--langs``).
            high_lang_embeddings: (H x C) embedding rows of the high-resource language tokens.
            plan: for hard routing, a :class:`RoutePlan` over :meth:`module_ids` made earlier
                (the decoder makes one per pass or per beam search); made here if not given.

        Returns the routed output and ``{"slp_module": (B,) module id of each row (argmax for
        soft rows), "slp_gate": P (H x T) when the gate took part (soft step), else None}``.
        """
        if self.training and not self.map_is_fixed:
            self.gate_steps += 1
        if self.use_soft_routing():
            high_idx = self.high_of_lang.index_select(0, tgt)
            is_low = high_idx < 0
            probs = self.gate_probs(high_lang_embeddings)
            weights = probs.index_select(0, high_idx.clamp(min=0))
            module = torch.where(is_low, torch.full_like(high_idx, self.pool_size), weights.argmax(dim=-1))
            pool = lambda rows, w: mix(rows, w, self.pool)  # noqa: E731
            out = route(x, is_low.long(), [pool, lambda rows, w: self.universal(rows)], weights)
            return out, {"slp_module": module, "slp_gate": probs}
        if plan is None:
            plan = RoutePlan(self.module_ids(tgt, high_lang_embeddings))
        return route(x, plan, list(self.pool) + [self.universal]), {"slp_module": plan.ids, "slp_gate": None}


def map_text(mapping: Dict[str, int]) -> str:
    """A routing map as the logs and reports write it: ``fr->m2, de->m1``."""
    return ", ".join(f"{lang}->m{int(k)}" for lang, k in mapping.items())


def check_fixed_map(mapping: Tensor, pool_size: int, num_high: int) -> None:
    """A routing map is ``num_high`` integers, all in ``[0, T)`` (fixed) or all -1 (open)."""
    if mapping.dtype != torch.long or mapping.shape != (num_high,):
        raise HltmtInputError(f"the checkpoint's routing map (decoder.slp.fixed_map) must hold {num_high} integers, "
                             f"got {tuple(mapping.shape)} of {mapping.dtype}")
    values = mapping.tolist()
    if not (all(v == -1 for v in values) or all(0 <= v < pool_size for v in values)):
        raise HltmtInputError(f"the checkpoint's routing map (decoder.slp.fixed_map) {values} is out of range: each "
                             f"high-resource language needs a pool module in 0..{pool_size - 1} (or -1 while the "
                             "gate learns)")


def encode_map(mapping: Tensor, pool_size: int) -> Tensor:
    """Module indices (-1: open) -> the stored one-hot rows (column ``pool_size``: open)."""
    return F.one_hot(torch.where(mapping < 0, torch.full_like(mapping, pool_size), mapping), pool_size + 1)


def decode_map(onehot: Tensor, pool_size: int) -> Tensor:
    """The stored one-hot rows -> module indices (-1: open)."""
    mapping = onehot.argmax(dim=-1)
    return torch.where(mapping == pool_size, torch.full_like(mapping, -1), mapping)


def check_map_onehot(onehot: Tensor, pool_size: int, high: Sequence[str], name: str) -> None:
    """A stored routing map is one row per high-resource language, each a single 1 among 0s over
    the ``pool_size`` modules and the open column, all open or all fixed: what a stage wrote."""
    if onehot.shape != (len(high), pool_size + 1) or onehot.is_complex() or onehot.dtype == torch.bool:
        raise HltmtInputError(f"the checkpoint's routing map ({name}) must hold {len(high)} x {pool_size + 1} "
                              f"integers, got {tuple(onehot.shape)} of {onehot.dtype}")
    for lang, row in zip(high, onehot.tolist()):
        if sorted(row) != [0] * pool_size + [1]:  # (a float 0. / 1. compares equal: the values count)
            raise HltmtInputError(
                f"the checkpoint's routing map ({name}) is no map a training stage wrote: the row of {lang} is {row}, "
                f"not a single 1 (one of pool modules 0..{pool_size - 1}, or the last column while the gate learns); "
                "were checkpoints with different maps averaged (e.g. from both sides of the stage switch)? Average "
                "checkpoints of one stage and one map (hltmt-average-checkpoints checks this)")
    open_rows = onehot[:, pool_size].tolist()
    if 0 < sum(open_rows) < len(open_rows):
        raise HltmtInputError(
            f"the checkpoint's routing map ({name}) fixes "
            f"{','.join(lang for lang, o in zip(high, open_rows) if not o)} and leaves "
            f"{','.join(lang for lang, o in zip(high, open_rows) if o)} open: a stage fixes every language at once, "
            "so this is no map a training stage wrote (checkpoints of both stages mixed?)")


def disparity(probs: Tensor) -> Tensor:
    """HLT-MT's load-balancing term over the H x T gate matrix ``P``:
    ``sum_ij (P P^T)_ij = || sum_i p_i ||^2``, lowest (H^2 / T) when the languages spread
    evenly over the modules, highest (H^2) when they all pick one."""
    return probs.sum(dim=0).pow(2).sum()
