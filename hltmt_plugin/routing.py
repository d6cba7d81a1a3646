"""The one routing primitive: rows of a batch choose among sub-modules by a per-row id.

Every language-specific piece of the plugin (SLP pool, universal layer, adapters, skills)
is the same problem: row ``b`` of a batch must go through sub-module ``ids[b]``. ``route``
groups the rows by id, runs each chosen sub-module exactly once on its group and scatters
the results back, so a hard decision costs one sub-module per row, not one per candidate.
``mix`` is the soft form: a per-row weighted sum over all candidates.

Grouping needs the group sizes on the host, so a :class:`RoutePlan` is made once from the
ids and reused: by all layers of a forward pass, and (through :class:`SearchPlans` on the
decoder) by every step of a beam search, reordered with the beams. Within an encoder or
decoder pass, :class:`PassRows` holds the batch's language record (:mod:`hltmt_plugin.languages`)
for the layers inside it and makes each consumer's plan once.
"""

import contextlib
import threading
from typing import Callable, Dict, Iterator, Optional, Sequence, Union

import torch
from torch import Tensor

from hltmt_plugin.errors import HltmtInputError

RowFn = Callable[..., Tensor]


class RoutePlan:
    """How the rows of a batch split over sub-modules: made once from the ids (the one host
    synchronisation, to count the groups) and reused by every :func:`route` call over the same
    rows: all layers of one forward pass, and every step of a beam search (see
    :class:`SearchPlans`).

    Args:
        ids: ``LongTensor`` of shape ``(B,)``, each row's sub-module.
    """

    def __init__(self, ids: Tensor):
        if ids.dim() != 1:
            raise ValueError(f"route: ids must have shape (B,), got {tuple(ids.shape)}")
        self.ids = ids
        self.rows = ids.numel()
        self.counts = []
        if self.rows:
            try:  # the one host synchronisation: the group sizes
                self.counts = torch.bincount(ids).tolist()
            except RuntimeError:  # bincount refuses negative ids
                raise ValueError(f"route: ids must not be negative, got {ids.unique().tolist()}") from None
        self.used = [k for k, c in enumerate(self.counts) if c > 0]
        self.order = self.inverse = None
        if len(self.used) > 1:
            self.order = torch.argsort(ids, stable=True)
            self.inverse = torch.empty_like(self.order)
            self.inverse[self.order] = torch.arange(self.rows, device=ids.device)

    @property
    def single(self) -> Optional[int]:
        """The one sub-module every row takes, if there is one."""
        return self.used[0] if len(self.used) == 1 else None

    def reorder(self, new_order: Tensor) -> "RoutePlan":
        """The plan for rows ``new_order`` of this batch (beam search reorders and drops rows).
        A single-path plan stays one: no tensor work, no synchronisation."""
        if self.single is not None and new_order.numel() > 0:
            plan = RoutePlan.__new__(RoutePlan)
            plan.__dict__.update(self.__dict__)
            plan.ids, plan.rows = self.ids[:1].expand(new_order.numel()), new_order.numel()
            plan.counts = [0] * self.single + [plan.rows]
            return plan
        return RoutePlan(self.ids.index_select(0, new_order))


def route(x: Tensor, ids: Union[Tensor, RoutePlan], fns: Sequence[RowFn], *row_args: Tensor, dim: int = 0) -> Tensor:
    """Send each row of ``x`` through ``fns[ids[row]]``.

    Args:
        x: input with the batch along ``dim`` (``B x T x C`` with dim=0, ``T x B x C`` with dim=1).
        ids: ``LongTensor`` of shape ``(B,)``, values in ``[0, len(fns))``, or a
            :class:`RoutePlan` made from such ids.
        fns: sub-modules (or callables); ``fns[k](x_k, *row_args_k)`` gets only its rows.
        row_args: further per-row tensors (batch along dim 0) handed to the callables,
            restricted to the same rows (e.g. mixing weights).
        dim: the batch dimension of ``x``.

    Each callable must keep the batch dimension and return a tensor of one shape per row.
    """
    plan = ids if isinstance(ids, RoutePlan) else RoutePlan(ids)
    if plan.rows != x.size(dim):
        raise ValueError(f"route: ids must have shape ({x.size(dim)},), got ({plan.rows},)")
    if plan.rows == 0:
        return x
    if plan.used[-1] >= len(fns):
        raise ValueError(f"route: ids must lie in [0, {len(fns)}), got {plan.used}")
    if plan.single is not None:  # the whole batch takes one path: no gather, no scatter
        return fns[plan.single](x, *row_args)
    counts = plan.counts + [0] * (len(fns) - len(plan.counts))
    xs = x.index_select(dim, plan.order).split(counts, dim=dim)
    args = [a.index_select(0, plan.order).split(counts, dim=0) for a in row_args]
    outs = [fns[k](xs[k], *(a[k] for a in args)) for k in plan.used]
    return torch.cat(outs, dim=dim).index_select(dim, plan.inverse)


class SearchPlans:
    """Mixin for a fairseq incremental decoder: route plans kept for a whole search.

    A row's languages (and so its modules) cannot change while a sentence is decoded, so a
    plan is made at the first step, stored in the search's ``incremental_state`` and only
    reordered with the beams afterwards (:meth:`search_plans` hands the dict to
    :class:`PassRows`). Without ``incremental_state`` (training,
    scoring, a full forward pass) plans are made per pass.

    fairseq reorders a search's state by walking every submodule of the decoder at every
    step to find those that keep state; with the language modules the decoder has more
    submodules, so the walk is done once per search and its result kept with the plans.
    """

    def reorder_incremental_state_scripting(self, incremental_state, new_order: Tensor):
        found = self.get_incremental_state(incremental_state, "stateful_modules")
        if found is None:
            found = {"modules": [m for m in self.modules() if hasattr(m, "reorder_incremental_state")]}
            self.set_incremental_state(incremental_state, "stateful_modules", found)
        for module in found["modules"]:
            result = module.reorder_incremental_state(incremental_state, new_order)
            if result is not None:
                incremental_state = result

    def search_plans(self, incremental_state) -> Optional[dict]:
        """The plans of this search (filled as they are made), or None outside a search."""
        if incremental_state is None:
            return None
        plans = self.get_incremental_state(incremental_state, "route_plans")
        if plans is None:
            plans = {}
            self.set_incremental_state(incremental_state, "route_plans", plans)
        return plans

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        super().reorder_incremental_state(incremental_state, new_order)
        plans = self.get_incremental_state(incremental_state, "route_plans")
        if plans:
            self.set_incremental_state(
                incremental_state, "route_plans", {name: plan.reorder(new_order) for name, plan in plans.items()}
            )


def mix(x: Tensor, weights: Tensor, fns: Sequence[RowFn], dim: int = 0) -> Tensor:
    """Soft routing: ``sum_k weights[:, k] * fns[k](x)`` per row (all candidates run).

    ``weights`` has shape ``(B, K)`` with the batch along dim 0, whatever ``dim`` is for ``x``.
    """
    if weights.shape != (x.size(dim), len(fns)):
        raise ValueError(f"mix: weights must have shape ({x.size(dim)}, {len(fns)}), got {tuple(weights.shape)}")
    shape = [1] * x.dim()
    shape[dim] = x.size(dim)
    out = None
    for k, fn in enumerate(fns):
        term = weights[:, k].view(shape).to(x.dtype) * fn(x)
        out = term if out is None else out + term
    return out


IdsOf = Callable[[Tensor], Tensor]  # record (B, 2) -> (B,) sub-module ids


class PassRows:
    """The record of the batch an encoder or decoder is computing, for the layers inside it
    (fairseq calls a layer without it), and the route plans made from it.

    A consumer names its ids once (:meth:`define`: a function from the record to sub-module
    ids) and asks for its plan in the pass (:meth:`plan`): made at the first ask, shared by every
    layer of the pass; in a beam search the decoder hands in the search's plans, so they are made
    at the first step and only reordered afterwards. A consumer that has the rows' ids at hand
    (the pool's router, from its own target -> module table) defines nothing: it keeps the plan
    it makes in :attr:`plans` under its name, found there by the pass's later asks and the
    search's later steps. A pass's record and plans are kept per thread (:meth:`use`): one model
    serves passes in several threads at once, each with its own rows; the definitions are the
    model's, made once."""

    def __init__(self, side: str):
        self.side = side
        self.ids_of: Dict[str, IdsOf] = {}
        self._pass = threading.local()

    def __getstate__(self):  # a copy of the model (deepcopy, pickle) is made outside any pass
        return {"side": self.side, "ids_of": self.ids_of}

    def __setstate__(self, state):
        self.__init__(state["side"])
        self.ids_of.update(state["ids_of"])

    @property
    def record(self) -> Optional[Tensor]:
        """This thread's pass's record (None outside a pass)."""
        return getattr(self._pass, "record", None)

    @property
    def plans(self) -> Dict[str, RoutePlan]:
        """This thread's pass's plans (empty outside a pass)."""
        return getattr(self._pass, "plans", {})

    def define(self, name: str, ids_of: IdsOf) -> None:
        self.ids_of[name] = ids_of

    @contextlib.contextmanager
    def use(self, record: Optional[Tensor], plans: Optional[Dict[str, RoutePlan]] = None) -> Iterator[None]:
        """A pass over the rows of ``record`` in this thread, with ``plans`` (a search's, kept
        across its steps) or new ones."""
        previous = self.record, self.plans
        self._pass.record, self._pass.plans = record, ({} if plans is None else plans)
        try:
            yield
        finally:
            self._pass.record, self._pass.plans = previous

    def plan(self, name: str) -> RoutePlan:
        plans = self.plans
        if name not in plans:
            if self.record is None:
                raise HltmtInputError(
                    f"the {self.side}'s language modules got no languages per sentence: run the "
                    f"layer through the hltmt_transformer {self.side}"
                )
            plans[name] = RoutePlan(self.ids_of[name](self.record))
        return plans[name]
