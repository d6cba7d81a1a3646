import pytest
import torch
from torch import nn

from hltmt_plugin.modules.routing import mix, route


class Counting(nn.Module):
    """A linear map that records how many rows it was run on."""

    def __init__(self, dim, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.lin = nn.Linear(dim, dim)
        self.rows = []

    def forward(self, x, *extra):
        self.rows.append(x.size(0))
        return self.lin(x)


@pytest.mark.parametrize("dim", [0, 1])
def test_route_equals_each_row_through_its_own_module(dim):
    fns = [Counting(8, k) for k in range(4)]
    ids = torch.tensor([2, 0, 2, 3, 0, 2])
    x = torch.randn(6, 5, 8) if dim == 0 else torch.randn(5, 6, 8)
    out = route(x, ids, fns, dim=dim)
    for b, k in enumerate(ids.tolist()):
        row = x.select(dim, b)
        torch.testing.assert_close(out.select(dim, b), fns[k].lin(row), rtol=0, atol=1e-6)


def test_route_runs_each_chosen_module_once_on_its_rows_only():
    fns = [Counting(8, k) for k in range(4)]
    ids = torch.tensor([2, 0, 2, 2, 0])
    route(torch.randn(5, 3, 8), ids, fns)
    assert [f.rows for f in fns] == [[2], [], [3], []]


def test_route_single_id_takes_the_whole_batch():
    fns = [Counting(8, k) for k in range(2)]
    x = torch.randn(4, 3, 8)
    out = route(x, torch.ones(4, dtype=torch.long), fns)
    assert fns[1].rows == [4] and fns[0].rows == []
    torch.testing.assert_close(out, fns[1].lin(x))


def test_route_hands_row_arguments_restricted_to_the_group():
    seen = {}

    def record(k):
        def fn(x, w):
            seen[k] = w.clone()
            return x * w[:, :1, None]
        return fn

    ids = torch.tensor([1, 0, 1])
    w = torch.tensor([[1.0, 0], [2.0, 0], [3.0, 0]])
    out = route(torch.ones(3, 2, 4), ids, [record(0), record(1)], w)
    assert seen[0].tolist() == [[2.0, 0]] and seen[1].tolist() == [[1.0, 0], [3.0, 0]]
    assert out[:, 0, 0].tolist() == [1.0, 2.0, 3.0]


def test_route_gradient_reaches_only_used_modules():
    fns = [Counting(8, k) for k in range(3)]
    route(torch.randn(4, 2, 8), torch.tensor([0, 2, 2, 0]), fns).sum().backward()
    assert fns[1].lin.weight.grad is None
    assert fns[0].lin.weight.grad.abs().sum() > 0 and fns[2].lin.weight.grad.abs().sum() > 0


def test_route_rejects_bad_ids():
    fns = [Counting(8, 0)]
    with pytest.raises(ValueError, match="ids must lie"):
        route(torch.randn(2, 1, 8), torch.tensor([0, 1]), fns)
    with pytest.raises(ValueError, match="shape"):
        route(torch.randn(2, 1, 8), torch.tensor([0]), fns)


@pytest.mark.parametrize("dim", [0, 1])
def test_mix_is_the_weighted_sum(dim):
    fns = [Counting(8, k) for k in range(3)]
    x = torch.randn(4, 5, 8) if dim == 0 else torch.randn(5, 4, 8)
    w = torch.softmax(torch.randn(4, 3), dim=-1)
    out = mix(x, w, fns, dim=dim)
    for b in range(4):
        row = x.select(dim, b)
        expected = sum(w[b, k] * fns[k].lin(row) for k in range(3))
        torch.testing.assert_close(out.select(dim, b), expected, rtol=0, atol=1e-5)
