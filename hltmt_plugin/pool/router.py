"""The router of the selective language-specific pool (SLP, HLT-MT): which pool module each
sentence goes through, from its target language.

- a high-resource target language goes into the pool of T modules, chosen by a gate over the
  model's own embedding row of the target-language token, ``p = softmax(W_g E[l])``; hard: the
  argmax module only (no gradient reaches the gate), soft: ``sum_t p_t F_t(x)``; while the gate
  learns, each training update draws hard or soft;
- at the stage switch the map ``g(l) = argmax p_l`` is fixed: from then on every step is hard,
  by the map;
- every other target language goes through the universal module ``T``.

:class:`LanguageRouter` is a module of its own (the decoder's ``slp_router``: the gate, the
routing map, the count of the gate's training steps, the update count and its hard/soft draw).
Called with a batch's target languages and the model's embedding table (the gate reads the rows
of the high-resource language tokens, and only while the map is open), it returns the batch's
:class:`~hltmt_plugin.pool.modules.RoutingDecision`; the pool
(:class:`~hltmt_plugin.pool.modules.SelectiveLanguagePool`) carries it out. It calls
nothing back: the caller (:class:`~hltmt_plugin.pool.head.PoolHead`) hands it what it reads.
Whether the map is fixed is the router's question alone, kept on the host
(:attr:`LanguageRouter.map_is_fixed`) and read once per pass.

The routing map in its forms: ``routing_map``, the stored one-hot rows (one per high-resource
language); :meth:`LanguageRouter.map_ids`, the module of each language as indices (the fixed
map, or the gate's argmax while it learns); :meth:`LanguageRouter.fix_map`, the one way it is
fixed. The high-resource languages are the list ``high_langs``; their names are saved as
``high_lang_names``.

Which module serves a target language is one table, ``target_modules``: one entry per language
of ``--langs`` (``targets``), ``g(l)`` for a high-resource language, ``T`` (the universal module)
for any other, -1 for a high-resource language while the map is open (the gate decides). It is
rebuilt from the map by :meth:`LanguageRouter.rebuild_table`, called where the languages are
set, where the map is fixed and where it is loaded, and nowhere else. Everything that asks which
module serves a target reads it: the forward pass (hard routing is one ``index_select`` of
:meth:`LanguageRouter.table`), the model's route reporting and the exports
(:meth:`LanguageRouter.routes`, :meth:`LanguageRouter.map_by_language`) and the criterion
(each row's entry, ``slp_module``, and the modules' :attr:`LanguageRouter.labels`). While the
map is open, :meth:`LanguageRouter.table` fills the high-resource entries with the gate's argmax
of that moment.

Every older form of its state (keys under ``slp.``, the map as indices or under its older
name, the language names on the decoder or under their older name) is read in one place,
:func:`upgrade_router_state`.
"""

from typing import Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hltmt_plugin import records
from hltmt_plugin.errors import HltmtInputError
from hltmt_plugin.languages import names_of, names_tensor
from hltmt_plugin.pool.keys import GATE, GATE_STEPS, LANG_NAMES, MAP, POOL, ROUTER, ROUTER_MAP
from hltmt_plugin.pool.modules import RoutingDecision, module_label
from hltmt_plugin.routing import PassRows, RoutePlan

HARD, SOFT = "hard", "soft"
PLAN = "slp"  # the name of a hard step's plan among a pass's plans (PassRows)
# the router's entries as older versions saved them (read by upgrade_router_state only)
OLD_MAP, OLD_MAP_IDS, OLD_LANG_NAMES = "fixed_map_onehot", "fixed_map", "high_langs"


class LanguageRouter(nn.Module):
    """The gate, the routing map and the per-update hard/soft draw; the routing decision of a batch.

    Args:
        dim: model dimension d (the gate's input: a language token's embedding row).
        pool_size: T.
        high_langs: the high-resource languages, in the order of the map's rows.
        hard_prob: probability of a hard update while the gate is learning.
        seed: with the update number, decides each update's hard/soft draw, so every worker
            (and a resumed run) makes the same draw.

    State (saved with the weights): ``gate`` (W_g), ``routing_map`` (the routing map
    ``g(l)``: one row per high-resource language, one-hot over T + 1 columns, a 1 at the
    language's pool module or at column T while the gate learns; averaging or mixing
    checkpoints keeps a row one-hot only where they all agree, and any other mix is refused
    on load), ``gate_steps`` (training passes the gate has seen while learning: stage all
    refuses a model whose gate never learned) and ``high_lang_names`` (the map's languages by
    name, as bytes). Not saved: ``target_modules``, the target -> module table (see the module's
    documentation), rebuilt from the map.
    """

    def __init__(self, dim: int, pool_size: int, high_langs: Sequence[str], hard_prob: float = 0.5, seed: int = 1):
        super().__init__()
        self.pool_size, self.hard_prob, self.seed = pool_size, hard_prob, seed
        self.high_langs = list(high_langs)
        self.gate = nn.Linear(dim, pool_size)
        self.register_buffer(MAP, encode_map(torch.full((len(self.high_langs),), -1, dtype=torch.long), pool_size))
        self.register_buffer(GATE_STEPS, torch.zeros((), dtype=torch.long))
        self.register_buffer(LANG_NAMES, names_tensor(self.high_langs))
        self.register_buffer("high_of_lang", torch.empty(0, dtype=torch.long), persistent=False)
        self.register_buffer("high_tokens", torch.empty(0, dtype=torch.long), persistent=False)
        self.register_buffer("target_modules", torch.empty(0, dtype=torch.long), persistent=False)
        self.targets: List[str] = []  # --langs: the table's entries, in order
        self.labels = [module_label(k, pool_size) for k in range(pool_size + 1)]  # module k's label
        self._map_fixed = False  # the map's state kept on the host (no device synchronisation per step)
        self.mode = HARD
        self.num_updates = 0

    def set_languages(self, langs: Sequence[str], token_rows: Sequence[int]) -> None:
        """``--langs`` (a row's target language is an index into it): ``high_of_lang`` maps each
        to its index among the high-resource languages, -1 for the universal module's; and
        ``token_rows``, where each high-resource language's token lies in the embedding table
        (``high_tokens``: the gate's input is those rows); the table rebuilt for them."""
        device = self.gate.weight.device
        self.targets = list(langs)
        high_of_lang = [self.high_langs.index(lang) if lang in self.high_langs else -1 for lang in langs]
        self.high_of_lang = torch.tensor(high_of_lang, dtype=torch.long, device=device)
        self.high_tokens = torch.tensor(list(token_rows), dtype=torch.long, device=device)
        self.rebuild_table()

    # ---- the map
    @property
    def map_is_fixed(self) -> bool:
        """Whether ``g(l)`` is fixed; read on the host, refreshed with the table
        (:meth:`rebuild_table`) by the map's only writers (:meth:`fix_map` and loading a checkpoint)."""
        return self._map_fixed

    def rebuild_table(self) -> None:
        """The table ``target_modules`` and whether the map is fixed, from the stored map: called
        where the languages are set, the map fixed or loaded."""
        ids = decode_map(self.routing_map, self.pool_size)
        self.target_modules = self._table_of(ids)  # first: a pass that reads the map fixed finds its table
        self._map_fixed = bool((ids >= 0).all())

    def _table_of(self, ids: Tensor) -> Tensor:
        """The rule: (L,) each target's module from the map ``ids`` (H,): ``ids`` of its place
        among the high-resource languages, the universal module ``T`` for any other language."""
        universal = torch.full_like(self.high_of_lang, self.pool_size)
        return torch.where(self.high_of_lang < 0, universal, ids.index_select(0, self.high_of_lang.clamp(min=0)))

    def table(self, embeddings: Optional[Tensor] = None, fixed: Optional[bool] = None) -> Tensor:
        """(L,) the module of each target language of ``--langs`` now: ``target_modules`` when
        the map is fixed; while it is open, its high-resource entries are the gate's argmax
        (``embeddings``: the embedding table, the gate's input). ``fixed``: whether the map is
        fixed, as the caller read it for its pass (read here otherwise)."""
        if self._map_fixed if fixed is None else fixed:
            return self.target_modules
        with torch.no_grad():
            return self._table_of(self.gate_probs(embeddings).argmax(dim=-1))

    def routes(self, embeddings: Optional[Tensor] = None) -> Dict[str, str]:
        """The table by name: each target language of ``--langs`` -> its module's label
        (``m<k>`` or ``universal``), as the reports and the exports write it."""
        return {lang: self.labels[k] for lang, k in zip(self.targets, self.table(embeddings).tolist())}

    def gate_probs(self, embeddings: Tensor) -> Tensor:
        """``P`` (H x T): the gate's distribution over the pool for each high-resource language,
        from their tokens' rows of the embedding table ``embeddings`` (V x d)."""
        lang_embeddings = embeddings.index_select(0, self.high_tokens)
        with torch.autocast(device_type=lang_embeddings.device.type, enabled=False):  # float32 under amp
            logits = F.linear(lang_embeddings.float(), self.gate.weight.float(), self.gate.bias.float())
        return F.softmax(logits, dim=-1)

    def map_ids(self, embeddings: Optional[Tensor] = None) -> Tensor:
        """``g(l)`` for every high-resource language as module indices: the fixed map, or the
        argmax of the gate (``embeddings``: the embedding table, not read once the map is fixed)."""
        if self.map_is_fixed:
            return decode_map(self.routing_map, self.pool_size)
        with torch.no_grad():
            return self.gate_probs(embeddings).argmax(dim=-1)

    def map_by_language(self, embeddings: Optional[Tensor] = None) -> Dict[str, int]:
        """``g(l)`` by language name, in the map's order: the table's high-resource entries (the
        fixed map, or the gate's argmax now)."""
        by_target = dict(zip(self.targets, self.table(embeddings).tolist()))
        return {lang: by_target[lang] for lang in self.high_langs}

    def fix_map(self, ids: Tensor) -> None:
        """Fix the map to ``ids`` (each high-resource language's pool module: the gate's argmax
        at the stage switch, see :meth:`map_ids`, or the identity: one module per language,
        LS-MNMT) and stop the gate from training."""
        check_map_ids(ids, self.pool_size, len(self.high_langs))
        self.routing_map.copy_(encode_map(ids.to(self.routing_map.device), self.pool_size))
        self.rebuild_table()
        self.gate.requires_grad_(False)

    # ---- the update count and its draw
    def set_num_updates(self, num_updates: int) -> None:
        """The update count (fairseq hands every module the count before each training step;
        the task hands the count after a step); draws that update's routing."""
        self.num_updates = num_updates
        draw = np.random.default_rng([self.seed, num_updates]).random()
        self.mode = HARD if draw < self.hard_prob else SOFT

    # ---- a batch's decision
    def module_ids(self, tgt: Tensor, embeddings: Optional[Tensor] = None, fixed: Optional[bool] = None) -> Tensor:
        """(B,) each row's module under hard routing, from its target language (index in
        ``--langs``): its entry of :meth:`table`."""
        return self.table(embeddings, fixed).index_select(0, tgt)

    def forward(self, tgt: Tensor, embeddings: Tensor, rows: Optional[PassRows] = None) -> RoutingDecision:
        """The routing of one pass over rows whose target languages are ``tgt`` (B,), indices in
        ``--langs``, with the model's embedding table ``embeddings`` (the gate's input), decided
        here, once, with "is the map fixed?" read once: a training pass while the map is open
        trains the gate, and on a soft draw gives each row's weights over the pool; any other
        pass routes hard by the :class:`RoutePlan` of :meth:`module_ids`, kept as :data:`PLAN` in
        the plans of the pass's ``rows`` (made at the first ask: one per pass, or per beam search)."""
        fixed = self._map_fixed
        learns = self.training and not fixed  # this pass trains the gate
        if learns:
            self.gate_steps.add_(1)
        if learns and self.mode == SOFT:
            high_idx = self.high_of_lang.index_select(0, tgt)
            probs = self.gate_probs(embeddings)
            weights = probs.index_select(0, high_idx.clamp(min=0))
            module_ids = self._table_of(probs.argmax(dim=-1)).index_select(0, tgt)
            return RoutingDecision(module_ids, weights=weights, gate_probs=probs)
        plans = rows.plans if rows is not None else {}
        made = plans.get(PLAN)
        if made is None:
            made = plans[PLAN] = RoutePlan(self.module_ids(tgt, embeddings, fixed))
        return RoutingDecision(made.ids, plan=made)

    # ---- checkpoints
    def upgrade_state_dict_named(self, state_dict, name: str) -> None:
        """Before loading (fairseq calls it for every module): older forms read
        (:func:`upgrade_router_state`), the map's rows reordered to this model's
        ``--high-resource-langs`` (the same languages in another order; others refused)."""
        prefix = f"{name}." if name else ""
        upgrade_router_state(state_dict, name.rsplit(ROUTER, 1)[0])  # the decoder's prefix: "decoder."
        saved = state_dict.get(prefix + LANG_NAMES)
        state_dict[prefix + LANG_NAMES] = self.high_lang_names.clone()
        if saved is None or names_of(saved) == self.high_langs:  # (None: a checkpoint from before the names were saved)
            return
        saved = names_of(saved)
        if sorted(saved) != sorted(self.high_langs):
            raise HltmtInputError(
                f"the checkpoint's pool serves --high-resource-langs {','.join(saved)} and these options name "
                f"{','.join(self.high_langs)}: pass the training run's --high-resource-langs"
            )
        if prefix + MAP in state_dict:
            order = torch.tensor([saved.index(x) for x in self.high_langs])
            state_dict[prefix + MAP] = state_dict[prefix + MAP].index_select(0, order)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        if prefix + MAP in state_dict:  # the stored map must be one a training stage wrote
            check_map_onehot(state_dict[prefix + MAP], self.pool_size, self.high_langs, prefix + MAP)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self.rebuild_table()


def upgrade_router_state(state_dict, prefix: str) -> None:
    """The router's state as this version writes it, from any older form, in place; ``prefix``
    is the decoder's (``"decoder."``).

    - the router's tensors stored on the pool (``slp.gate.*``, ``slp.fixed_map_onehot``,
      ``slp.gate_steps``, ``slp.fixed_map``) and the map's language names on the decoder
      (``high_langs``) move under ``slp_router.``;
    - the routing map's one-hot rows saved as ``fixed_map_onehot`` become ``routing_map``, the
      language names saved as ``high_langs`` become ``high_lang_names``;
    - a map stored as module indices (``fixed_map``, -1 while the gate learns) becomes the
      one-hot rows; a checkpoint holding both forms must hold one map.
    """
    new = prefix + ROUTER + "."
    moves = {prefix + OLD_LANG_NAMES: new + LANG_NAMES, prefix + POOL + "." + OLD_MAP: new + MAP}
    for old in (GATE + ".weight", GATE + ".bias", GATE_STEPS, OLD_MAP_IDS):
        moves[prefix + POOL + "." + old] = new + old
    moves.update({new + OLD_MAP: new + MAP, new + OLD_LANG_NAMES: new + LANG_NAMES})
    for old, renamed in moves.items():
        if old in state_dict and renamed not in state_dict:
            state_dict[renamed] = state_dict.pop(old)
    check_router_state(state_dict, new)
    legacy = state_dict.pop(new + OLD_MAP_IDS, None)
    if legacy is None:
        return
    if new + MAP not in state_dict and new + GATE + ".weight" not in state_dict:
        raise HltmtInputError(
            f"the checkpoint holds a routing map (as module indices) without the gate it belongs to ({new}{GATE}.weight)"
        )
    pool_size = (
        state_dict[new + MAP].shape[-1] - 1 if new + MAP in state_dict else state_dict[new + GATE + ".weight"].shape[0]
    )
    check_map_ids(legacy, pool_size, legacy.numel())
    onehot = encode_map(legacy, pool_size)
    if new + MAP in state_dict and not torch.equal(state_dict[new + MAP], onehot):
        raise HltmtInputError(
            f"the checkpoint holds two routing maps that differ (as module indices {legacy.tolist()} and as "
            f"{new + MAP}): it was not written by fairseq-train"
        )
    state_dict[new + MAP] = onehot


_TENSOR = records.Instance(Tensor, "a tensor")


def check_router_state(state_dict, prefix: str) -> None:
    """The router's stored entries (under ``prefix``, ``"decoder.slp_router."``) are tensors of
    the forms a training run writes: the gate a matrix and a vector, the map a matrix (one-hot)
    or a vector (indices, an older form), the language names a vector of bytes; one
    HltmtInputError line otherwise."""
    dims = {GATE + ".weight": 2, GATE + ".bias": 1, MAP: 2, OLD_MAP_IDS: 1, GATE_STEPS: None, LANG_NAMES: 1}
    for name, dim in dims.items():
        value = state_dict.get(prefix + name)
        if value is None:
            continue
        what = f"routing map as module indices ({prefix + MAP})" if name == OLD_MAP_IDS else prefix + name
        records.check(value, _TENSOR, f"the checkpoint's {what}")
        if (dim is not None and value.dim() != dim) or value.is_complex():
            raise HltmtInputError(
                f"the checkpoint's {what} is {tuple(value.shape)} of {value.dtype}, not the router state "
                "a training run writes"
            )
    names = state_dict.get(prefix + LANG_NAMES)
    if names is not None and (names.is_floating_point() or any(not 0 <= v < 256 for v in names.tolist())):
        raise HltmtInputError(f"the checkpoint's {prefix}{LANG_NAMES} is not a list of language names (UTF-8 bytes)")


def map_text(mapping: Dict[str, int]) -> str:
    """A routing map as the logs and reports write it: ``fr->m2, de->m1``."""
    return ", ".join(f"{lang}->{module_label(k)}" for lang, k in mapping.items())


def check_map_ids(ids: Tensor, pool_size: int, num_high: int) -> None:
    """A routing map as module indices is ``num_high`` integers, all in ``[0, T)`` (fixed) or all
    -1 (open)."""
    if ids.dtype != torch.long or ids.shape != (num_high,):
        raise HltmtInputError(
            f"the checkpoint's routing map ({ROUTER_MAP}) must hold {num_high} integers, "
            f"got {tuple(ids.shape)} of {ids.dtype}"
        )
    values = ids.tolist()
    if not (all(v == -1 for v in values) or all(0 <= v < pool_size for v in values)):
        raise HltmtInputError(
            f"the checkpoint's routing map ({ROUTER_MAP}) {values} is out of range: each "
            f"high-resource language needs a pool module in 0..{pool_size - 1} (or -1 while the "
            "gate learns)"
        )


def encode_map(ids: Tensor, pool_size: int) -> Tensor:
    """Module indices (-1: open) -> the stored one-hot rows (column ``pool_size``: open)."""
    return F.one_hot(torch.where(ids < 0, torch.full_like(ids, pool_size), ids), pool_size + 1)


def decode_map(onehot: Tensor, pool_size: int) -> Tensor:
    """The stored one-hot rows -> module indices (-1: open)."""
    ids = onehot.argmax(dim=-1)
    return torch.where(ids == pool_size, torch.full_like(ids, -1), ids)


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
