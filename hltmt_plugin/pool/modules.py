"""The modules of the selective language-specific pool (SLP, HLT-MT): T pool modules and the
universal module, each an FFN sublayer on top of the last decoder layer, and how a batch's rows
go through them by a :class:`RoutingDecision`.

The pool knows nothing of languages or of the gate: its router
(:class:`~hltmt_plugin.pool.router.LanguageRouter`) decides, per batch, which
module each row takes (hard) or how each row mixes the pool (soft), and the pool carries that
out through :func:`hltmt_plugin.routing.route`. Module ids: ``0..T-1`` are the pool,
``T`` is the universal module.
"""

from dataclasses import dataclass
from typing import Optional

from fairseq import utils
from fairseq.modules import FairseqDropout, LayerNorm
from torch import Tensor, nn

from hltmt_plugin.routing import RoutePlan, mix, route


class LanguageModule(nn.Module):
    """One FFN sublayer: ``LN(x + drop(W_u(drop(act(W_d x)))))`` (post-norm) or
    ``x + drop(W_u(drop(act(W_d LN(x)))))`` (pre-norm)."""

    def __init__(
        self,
        dim: int,
        hidden: int,
        activation_fn: str = "relu",
        dropout: float = 0.0,
        activation_dropout: float = 0.0,
        normalize_before: bool = False,
    ):
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


def module_label(k: int, pool_size: Optional[int] = None) -> str:
    """How logs, reports and the export name module ``k``: ``m<k>`` for a pool module,
    ``universal`` for the universal one (``k == pool_size``)."""
    return "universal" if k == pool_size else f"m{k}"


@dataclass
class RoutingDecision:
    """How the rows of one batch go through the pool.

    Attributes:
        module_ids: (B,) each row's module: ``0..T-1`` a pool module, ``T`` the universal one
            (for a soft row, the pool module of its largest weight).
        plan: hard routing: a :class:`RoutePlan` over ``module_ids`` (made from them when not
            given); each row goes through its module alone.
        weights: soft routing: (B, T) mixing weights over the pool; a row whose module is in the
            pool goes through ``sum_t w_t F_t(x)``, a row of the universal module through that
            module alone (its weights are not read).
        gate_probs: soft routing: the gate's distribution ``P`` (H x T) the weights were read
            from (the criterion's disparity term); None for hard routing.
    """

    module_ids: Tensor
    plan: Optional[RoutePlan] = None
    weights: Optional[Tensor] = None
    gate_probs: Optional[Tensor] = None


class SelectiveLanguagePool(nn.Module):
    """T pool modules + 1 universal module, each row through the module(s) a
    :class:`RoutingDecision` names.

    Args:
        dim: model dimension d.
        hidden: module dimension h.
        pool_size: T.
        module_kwargs: :class:`LanguageModule` options (activation, dropouts, pre-norm).
    """

    def __init__(self, dim: int, hidden: int, pool_size: int, **module_kwargs):
        super().__init__()
        self.pool_size = pool_size
        self.pool = nn.ModuleList(LanguageModule(dim, hidden, **module_kwargs) for _ in range(pool_size))
        self.universal = LanguageModule(dim, hidden, **module_kwargs)

    def module(self, label: str) -> LanguageModule:
        """The module that :func:`module_label` names ``label`` (``m<k>`` or ``universal``)."""
        every = list(self.pool) + [self.universal]
        return {module_label(k, self.pool_size): m for k, m in enumerate(every)}[label]

    def forward(self, x: Tensor, decision: RoutingDecision) -> Tensor:
        """Route ``x`` (B x T x C) per row by ``decision``."""
        if decision.weights is None:
            plan = decision.plan if decision.plan is not None else decision.module_ids
            return route(x, plan, list(self.pool) + [self.universal])
        pool = lambda rows, w: mix(rows, w, self.pool)  # noqa: E731
        to_universal = (decision.module_ids == self.pool_size).long()
        return route(x, to_universal, [pool, lambda rows, w: self.universal(rows)], decision.weights)
