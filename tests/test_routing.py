import pytest
import torch
from torch import nn

from hltmt_plugin.routing import RoutePlan, mix, route

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


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


def test_a_plan_routes_like_its_ids_and_reorders_like_them():
    fns = [Counting(8, k) for k in range(3)]
    ids = torch.tensor([2, 0, 2, 1, 0])
    x = torch.randn(5, 3, 8)
    plan = RoutePlan(ids)
    torch.testing.assert_close(route(x, plan, fns), route(x, ids, fns), rtol=0, atol=0)
    new_order = torch.tensor([4, 4, 0, 3])  # beam search: rows repeated, reordered, dropped
    moved = plan.reorder(new_order)
    assert moved.ids.tolist() == ids[new_order].tolist() and moved.counts == RoutePlan(ids[new_order]).counts
    torch.testing.assert_close(route(x[new_order], moved, fns), route(x[new_order], ids[new_order], fns))


def test_a_single_path_plan_stays_single_without_tensor_work(monkeypatch):
    plan = RoutePlan(torch.tensor([1, 1, 1, 1]))
    assert plan.single == 1
    monkeypatch.setattr(torch, "bincount", None)  # reordering must not count again
    moved = plan.reorder(torch.tensor([3, 3, 0]))
    assert moved.single == 1 and moved.rows == 3 and moved.ids.tolist() == [1, 1, 1]
    fns = [Counting(8, 0), Counting(8, 1)]
    route(torch.randn(3, 2, 8), moved, fns)
    assert fns[1].rows == [3] and fns[0].rows == []
    with pytest.raises(ValueError, match="shape"):
        route(torch.randn(4, 2, 8), moved, fns)


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


def test_pass_rows_make_a_plan_once_per_pass_and_keep_given_plans():
    from hltmt_plugin.routing import PassRows

    rows = PassRows("encoder")
    asked = []
    rows.define("ids", lambda record: asked.append(1) or record[:, 1])
    record = torch.tensor([[0, 2], [1, 0], [0, 2]])
    with rows.use(record):
        first = rows.plan("ids")
        assert rows.plan("ids") is first and first.ids.tolist() == [2, 0, 2] and asked == [1]
    given = {"ids": RoutePlan(torch.tensor([0, 0, 1]))}  # a search's plans: kept, not remade
    with rows.use(record, given):
        assert rows.plan("ids") is given["ids"] and asked == [1]
    assert rows.record is None and rows.plans == {}  # the pass's record and plans end with it


def test_pass_rows_without_a_record_name_the_side():
    from hltmt_plugin.errors import HltmtInputError
    from hltmt_plugin.routing import PassRows

    rows = PassRows("decoder")
    rows.define("ids", lambda record: record[:, 1])
    with pytest.raises(HltmtInputError, match="the decoder's language modules got no languages per sentence"):
        rows.plan("ids")


def test_pass_rows_keep_each_threads_pass_apart():
    """Two threads in a pass of one PassRows at once (a barrier holds both inside): each plans
    from its own record, and each pass ends with its own."""
    import threading

    from hltmt_plugin.routing import PassRows

    rows = PassRows("decoder")
    rows.define("ids", lambda record: record[:, 1])
    both_inside = threading.Barrier(2, timeout=30)
    got = {}

    def run(name, record):
        with rows.use(record):
            both_inside.wait()  # the other thread has entered its pass too
            got[name] = (rows.plan("ids").ids.tolist(), rows.record is record)
        got[name] += (rows.record is None and rows.plans == {},)

    threads = [
        threading.Thread(target=run, args=("a", torch.tensor([[0, 1], [0, 1]]))),
        threading.Thread(target=run, args=("b", torch.tensor([[0, 2], [1, 0], [0, 2]]))),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {"a": ([1, 1], True, True), "b": ([2, 0, 2], True, True)}


def test_a_copy_of_pass_rows_keeps_its_definitions_and_no_pass():
    import copy
    import operator
    import pickle

    from hltmt_plugin.routing import PassRows

    rows = PassRows("encoder")
    target = operator.itemgetter((slice(None), 1))  # record[:, 1], a function that pickles
    rows.define("ids", target)
    with rows.use(torch.tensor([[0, 1]])):
        for made in (copy.deepcopy(rows), pickle.loads(pickle.dumps(rows))):
            assert made.side == "encoder" and made.ids_of.keys() == {"ids"} and made.record is None
            with made.use(torch.tensor([[0, 3]])):
                assert made.plan("ids").ids.tolist() == [3] and rows.record.tolist() == [[0, 1]]
