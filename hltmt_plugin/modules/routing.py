"""The one routing primitive: rows of a batch choose among sub-modules by a per-row id.

Every language-specific piece of the plugin (SLP pool, universal layer, adapters, skills)
is the same problem: row ``b`` of a batch must go through sub-module ``ids[b]``. ``route``
groups the rows by id, runs each chosen sub-module exactly once on its group and scatters
the results back, so a hard decision costs one sub-module per row, not one per candidate.
``mix`` is the soft form: a per-row weighted sum over all candidates.
"""
from typing import Callable, Sequence

import torch
from torch import Tensor

RowFn = Callable[..., Tensor]


def route(x: Tensor, ids: Tensor, fns: Sequence[RowFn], *row_args: Tensor, dim: int = 0) -> Tensor:
    """Send each row of ``x`` through ``fns[ids[row]]``.

    Args:
        x: input with the batch along ``dim`` (``B x T x C`` with dim=0, ``T x B x C`` with dim=1).
        ids: ``LongTensor`` of shape ``(B,)``, values in ``[0, len(fns))``.
        fns: sub-modules (or callables); ``fns[k](x_k, *row_args_k)`` gets only its rows.
        row_args: further per-row tensors (batch along dim 0) handed to the callables,
            restricted to the same rows (e.g. mixing weights).
        dim: the batch dimension of ``x``.

    Each callable must keep the batch dimension and return a tensor of one shape per row.
    """
    if ids.dim() != 1 or ids.numel() != x.size(dim):
        raise ValueError(f"route: ids must have shape ({x.size(dim)},), got {tuple(ids.shape)}")
    if ids.numel() == 0:
        return x
    if int(ids.min()) < 0 or int(ids.max()) >= len(fns):
        raise ValueError(f"route: ids must lie in [0, {len(fns)}), got {ids.unique().tolist()}")
    counts = torch.bincount(ids, minlength=len(fns)).tolist()
    used = [k for k, c in enumerate(counts) if c > 0]
    if len(used) == 1:  # the whole batch takes one path: no gather, no scatter
        return fns[used[0]](x, *row_args)
    order = torch.argsort(ids, stable=True)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=order.device)
    xs = x.index_select(dim, order).split(counts, dim=dim)
    args = [a.index_select(0, order).split(counts, dim=0) for a in row_args]
    outs = [fns[k](xs[k], *(a[k] for a in args)) for k in used]
    return torch.cat(outs, dim=dim).index_select(dim, inverse)


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
