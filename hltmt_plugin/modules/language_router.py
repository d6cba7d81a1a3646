"""The router of the selective language-specific pool (SLP, HLT-MT): which pool module each
sentence goes through, from its target language.

- a high-resource target language goes into the pool of T modules, chosen by a gate over the
  model's own embedding row of the target-language token, ``p = softmax(W_g E[l])``; hard: the
  argmax module only (no gradient reaches the gate), soft: ``sum_t p_t F_t(x)``; while the gate
  learns, each training update draws hard or soft;
- at the stage switch the map ``g(l) = argmax p_l`` is fixed: from then on every step is hard,
  by the map;
- every other target language goes through the universal module ``T``.

:meth:`LanguageRouter.decide` makes a batch's :class:`~hltmt_plugin.modules.language_pool.RoutingDecision`;
the pool (:class:`~hltmt_plugin.modules.language_pool.SelectiveLanguagePool`) carries it out.
"""

from typing import Callable, Dict, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hltmt_plugin.errors import HltmtInputError
from hltmt_plugin.modules.language_pool import RoutingDecision
from hltmt_plugin.modules.routing import RoutePlan

HARD, SOFT = "hard", "soft"


class LanguageRouter:
    """The gate, the routing map and the per-update hard/soft draw; the routing decision of a batch.

    Checkpoints store the router's tensors beside the pool's modules (``decoder.slp.gate.*``,
    ``decoder.slp.fixed_map_onehot``, ``decoder.slp.gate_steps`` next to ``decoder.slp.pool.N.*``),
    so the router is no module of its own: it registers its tensors on the module given as
    ``owner`` (the pool) under those names, checks a stored map when ``owner`` loads one, and
    reads its tensors there (moving ``owner`` to a device or dtype moves them).

    Args:
        owner: the module that holds the router's tensors (the pool); its ``training`` is the router's.
        dim: model dimension d (the gate's input: a language token's embedding row).
        pool_size: T.
        num_high: number of high-resource target languages H (the rows of the gate matrix).
        hard_prob: probability of a hard update while the gate is learning.
        seed: with the update number, decides each update's hard/soft draw, so every worker
            (and a resumed run) makes the same draw.
    """

    def __init__(
        self, owner: nn.Module, dim: int, pool_size: int, num_high: int, hard_prob: float = 0.5, seed: int = 1
    ):
        self.owner = owner
        self.hard_prob = hard_prob
        self.seed = seed
        self.pool_size = pool_size
        owner.gate = nn.Linear(dim, pool_size)
        # g(l) as checkpoints store it: one row per high-resource language, one-hot over T + 1
        # columns: a 1 at the language's pool module, or at column T while the gate learns.
        # Averaging or mixing checkpoints keeps a row one-hot only where they all agree; any
        # other mix is no map and is refused on load (check_map_onehot).
        owner.register_buffer("fixed_map_onehot", encode_map(torch.full((num_high,), -1, dtype=torch.long), pool_size))
        # g(l) as module indices (-1 while the gate learns), derived from the one-hot; not stored.
        owner.register_buffer("fixed_map", torch.full((num_high,), -1, dtype=torch.long), persistent=False)
        # Training forward passes the gate has seen while learning (stage high); stage all
        # refuses a model whose gate never learned.
        owner.register_buffer("gate_steps", torch.zeros((), dtype=torch.long))
        owner.register_load_state_dict_pre_hook(self._check_stored_map)
        owner.register_load_state_dict_post_hook(self._read_stored_map)
        self._map_fixed = False
        self.mode = HARD
        self.num_updates = 0
        self.langs = self.high = None
        self.embeddings: Optional[Callable[[], Tensor]] = None

    # the router's tensors, held by the owner
    @property
    def gate(self) -> nn.Linear:
        return self.owner.gate

    @property
    def fixed_map_onehot(self) -> Tensor:
        return self.owner.fixed_map_onehot

    @property
    def fixed_map(self) -> Tensor:
        return self.owner.fixed_map

    @property
    def gate_steps(self) -> Tensor:
        return self.owner.gate_steps

    @property
    def high_of_lang(self) -> Tensor:
        return self.owner.high_of_lang

    @property
    def training(self) -> bool:
        return self.owner.training

    def set_languages(self, langs: Sequence[str], high: Sequence[str], embeddings: Callable[[], Tensor]) -> None:
        """The languages and the gate's input.

        Args:
            langs: ``--langs`` (a row's target language is an index into it).
            high: the high-resource languages, in the order of the gate's rows and the map's.
            embeddings: returns the (H x d) embedding rows of the high-resource language tokens
                (the model's own: they train with it).

        ``high_of_lang``: each language of ``langs`` -> its index among the high-resource
        languages, -1 for the universal module's."""
        self.langs, self.high = list(langs), list(high)
        self.embeddings = embeddings
        self.owner.register_buffer(
            "high_of_lang",
            torch.tensor([self.high.index(lang) if lang in self.high else -1 for lang in self.langs], dtype=torch.long),
            persistent=False,
        )

    @property
    def map_is_fixed(self) -> bool:
        """Kept on the host (no device synchronisation per step): set when the map is fixed
        and when a checkpoint is loaded."""
        return self._map_fixed

    def _check_stored_map(self, module, state_dict, prefix, *args) -> None:
        """Before ``owner`` loads: a map stored as indices (checkpoints before the one-hot form)
        becomes the one-hot form; the stored map must be one a training stage wrote."""
        key = prefix + "fixed_map_onehot"
        legacy = state_dict.pop(prefix + "fixed_map", None)
        if legacy is not None:
            check_fixed_map(legacy, self.pool_size, self.fixed_map.numel())
            if key in state_dict and not torch.equal(state_dict[key], encode_map(legacy, self.pool_size)):
                raise HltmtInputError(
                    f"the checkpoint holds two routing maps that differ ({prefix}fixed_map "
                    f"{legacy.tolist()} and {key}): it was not written by fairseq-train"
                )
            state_dict[key] = encode_map(legacy, self.pool_size)
        if key in state_dict:
            check_map_onehot(
                state_dict[key], self.pool_size, self.high or [f"row {i}" for i in range(self.fixed_map.numel())], key
            )

    def _read_stored_map(self, module, incompatible_keys) -> None:
        """After ``owner`` loaded: the map as indices, and whether it is fixed."""
        self.fixed_map.copy_(decode_map(self.fixed_map_onehot, self.pool_size))
        self._map_fixed = bool((self.fixed_map >= 0).all())

    def routing_map(self) -> Dict[str, int]:
        """``g(l)`` by language name: the fixed map, or the gate's argmax now."""
        return dict(zip(self.high, self.current_map().tolist()))

    def gate_probs(self) -> Tensor:
        """``P`` (H x T): the gate's distribution over the pool for each high-resource language."""
        high_lang_embeddings = self.embeddings()
        with torch.autocast(device_type=high_lang_embeddings.device.type, enabled=False):  # float32 under amp
            logits = F.linear(high_lang_embeddings.float(), self.gate.weight.float(), self.gate.bias.float())
        return F.softmax(logits, dim=-1)

    def current_map(self) -> Tensor:
        """``g(l)`` for every high-resource language: the fixed map, or the argmax of the gate."""
        if self.map_is_fixed:
            return self.fixed_map
        with torch.no_grad():
            return self.gate_probs().argmax(dim=-1)

    def fix_map(self) -> Tensor:
        """Fix ``g(l) = argmax p_l`` from the current gate (unless fixed already), stop the
        gate from training, and return the map."""
        if not self.map_is_fixed:
            with torch.no_grad():
                self.fix_map_to(self.gate_probs().argmax(dim=-1))
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
        """Draw this update's routing (fairseq hands the model the count before every training step)."""
        self.num_updates = num_updates
        draw = np.random.default_rng([self.seed, num_updates]).random()
        self.mode = HARD if draw < self.hard_prob else SOFT

    def use_soft_routing(self) -> bool:
        return self.training and self.mode == SOFT and not self.map_is_fixed

    def module_ids(self, tgt: Tensor) -> Tensor:
        """(B,) each row's module under hard routing, from its target language (index in
        ``--langs``): ``g(l)`` for a high-resource language, the universal module ``T`` otherwise."""
        high_idx = self.high_of_lang.index_select(0, tgt)
        universal = torch.full_like(high_idx, self.pool_size)
        mapped = self.current_map().index_select(0, high_idx.clamp(min=0))
        return torch.where(high_idx < 0, universal, mapped)

    def decide(self, tgt: Tensor, plan: Optional[Callable[[], RoutePlan]] = None) -> RoutingDecision:
        """The routing of one forward pass over rows whose target languages are ``tgt`` (B,),
        indices in ``--langs``: hard, a :class:`RoutePlan` over :meth:`module_ids`; soft (a soft
        draw in training while the gate learns), each row's weights over the pool.

        Args:
            plan: returns the hard step's plan over :meth:`module_ids` made elsewhere (the
                decoder's, made once per pass or per beam search); asked for only in a hard
                step; without it the plan is made here.
        """
        if self.training and not self.map_is_fixed:
            self.gate_steps.add_(1)
        if self.use_soft_routing():
            high_idx = self.high_of_lang.index_select(0, tgt)
            is_low = high_idx < 0
            probs = self.gate_probs()
            weights = probs.index_select(0, high_idx.clamp(min=0))
            module_ids = torch.where(is_low, torch.full_like(high_idx, self.pool_size), weights.argmax(dim=-1))
            return RoutingDecision(module_ids, weights=weights, gate_probs=probs)
        made = plan() if plan is not None else RoutePlan(self.module_ids(tgt))
        return RoutingDecision(made.ids, plan=made)


def map_text(mapping: Dict[str, int]) -> str:
    """A routing map as the logs and reports write it: ``fr->m2, de->m1``."""
    return ", ".join(f"{lang}->m{int(k)}" for lang, k in mapping.items())


def check_fixed_map(mapping: Tensor, pool_size: int, num_high: int) -> None:
    """A routing map is ``num_high`` integers, all in ``[0, T)`` (fixed) or all -1 (open)."""
    if mapping.dtype != torch.long or mapping.shape != (num_high,):
        raise HltmtInputError(
            f"the checkpoint's routing map (decoder.slp.fixed_map) must hold {num_high} integers, "
            f"got {tuple(mapping.shape)} of {mapping.dtype}"
        )
    values = mapping.tolist()
    if not (all(v == -1 for v in values) or all(0 <= v < pool_size for v in values)):
        raise HltmtInputError(
            f"the checkpoint's routing map (decoder.slp.fixed_map) {values} is out of range: each "
            f"high-resource language needs a pool module in 0..{pool_size - 1} (or -1 while the "
            "gate learns)"
        )


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
        raise HltmtInputError(
            f"the checkpoint's routing map ({name}) must hold {len(high)} x {pool_size + 1} "
            f"integers, got {tuple(onehot.shape)} of {onehot.dtype}"
        )
    for lang, row in zip(high, onehot.tolist()):
        if sorted(row) != [0] * pool_size + [1]:  # (a float 0. / 1. compares equal: the values count)
            raise HltmtInputError(
                f"the checkpoint's routing map ({name}) is no map a training stage wrote: the row of {lang} is {row}, "
                f"not a single 1 (one of pool modules 0..{pool_size - 1}, or the last column while the gate learns); "
                "were checkpoints with different maps averaged (e.g. from both sides of the stage switch)? Average "
                "checkpoints of one stage and one map (hltmt-average-checkpoints checks this)"
            )
    open_rows = onehot[:, pool_size].tolist()
    if 0 < sum(open_rows) < len(open_rows):
        raise HltmtInputError(
            f"the checkpoint's routing map ({name}) fixes "
            f"{','.join(lang for lang, o in zip(high, open_rows) if not o)} and leaves "
            f"{','.join(lang for lang, o in zip(high, open_rows) if o)} open: a stage fixes every language at once, "
            "so this is no map a training stage wrote (checkpoints of both stages mixed?)"
        )


def disparity(probs: Tensor) -> Tensor:
    """HLT-MT's load-balancing term over the H x T gate matrix ``P``:
    ``sum_ij (P P^T)_ij = || sum_i p_i ||^2``, lowest (H^2 / T) when the languages spread
    evenly over the modules, highest (H^2) when they all pick one."""
    return probs.sum(dim=0).pow(2).sum()
