"""The SLP's modules: one language module's two forms, rows routed through the pool by a given
decision (hard: each row's module alone; soft: the pool's mix, or the universal module), and
the SLP as the decoder runs it: its router's decision, then the pool."""

import pytest
import torch
from torch import nn

from hltmt_plugin.pool.modules import LanguageModule, RoutingDecision, SelectiveLanguagePool
from hltmt_plugin.pool.router import HARD, SOFT, LanguageRouter
from hltmt_plugin.routing import RoutePlan

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

HIGH = ["h0", "h1", "h2", "h3"]
LANGS = HIGH + ["low"]  # the record's language indices: h0..h3 = 0..3, low = 4


def modules(T=3):
    torch.manual_seed(0)
    return SelectiveLanguagePool(16, 32, T)


def slp(emb, T=3, H=4, **kw):
    """The pool and its router, as the decoder builds them (the router a module beside the pool)."""
    pool = modules(T)
    router = LanguageRouter(16, T, HIGH[:H], **kw)
    router.set_languages(LANGS, range(H))
    return pool, router


def tgt(high_idx):
    """The target language (index in LANGS) of rows given by their high-resource index (-1: low)."""
    return torch.tensor([LANGS.index("low") if h < 0 else h for h in high_idx.tolist()])


def test_language_module_post_and_pre_norm_forms():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 16)
    post = LanguageModule(16, 32, normalize_before=False)
    inner = post.fc2(torch.relu(post.fc1(x)))
    torch.testing.assert_close(post(x), post.layer_norm(x + inner))
    pre = LanguageModule(16, 32, normalize_before=True)
    torch.testing.assert_close(pre(x), x + pre.fc2(torch.relu(pre.fc1(pre.layer_norm(x)))))


# ---- the pool alone: rows routed by a given decision
def test_a_hard_decision_sends_each_row_through_its_module_alone():
    pool = modules().train()
    x = torch.randn(5, 2, 16)
    ids = torch.tensor([0, 3, 2, 0, 3])  # 3: the universal module
    every = list(pool.pool) + [pool.universal]
    for decision in (RoutingDecision(ids, plan=RoutePlan(ids)), RoutingDecision(ids)):  # (no plan: made from the ids)
        out = pool(x, decision)
        for b, k in enumerate(ids.tolist()):
            torch.testing.assert_close(out[b], every[k](x[b]), rtol=0, atol=1e-6)
    out.sum().backward()
    assert pool.pool[1].fc1.weight.grad is None  # a module no row chose does not run


def test_a_soft_decision_mixes_the_pool_for_its_rows_and_sends_the_others_through_the_universal_module():
    pool = modules().train()
    x = torch.randn(4, 2, 16)
    weights = torch.softmax(torch.randn(4, 3), dim=-1)
    ids = torch.tensor([1, 3, 0, 3])  # rows 1 and 3: the universal module (their weights are not read)
    out = pool(x, RoutingDecision(ids, weights=weights))
    for b, k in enumerate(ids.tolist()):
        expected = pool.universal(x[b]) if k == 3 else sum(weights[b, t] * pool.pool[t](x[b]) for t in range(3))
        torch.testing.assert_close(out[b], expected, rtol=0, atol=1e-5)


def test_the_pool_holds_only_its_modules():
    assert {key.split(".")[0] for key in modules().state_dict()} == {"pool", "universal"}


# ---- the SLP: the router's decision, then the pool
def test_hard_rows_use_argmax_module_and_low_rows_the_universal_layer():
    emb = torch.randn(4, 16)
    pool, router = slp(emb)
    pool.train(), router.train()
    router.mode = HARD
    x = torch.randn(5, 2, 16)
    high_idx = torch.tensor([0, -1, 3, 1, -1])
    decision = router(tgt(high_idx), emb)
    out = pool(x, decision)
    argmax = router.gate_probs(emb).argmax(-1)
    for b, h in enumerate(high_idx.tolist()):
        module = pool.universal if h < 0 else pool.pool[int(argmax[h])]
        torch.testing.assert_close(out[b], module(x[b]), rtol=0, atol=1e-6)
        assert int(decision.module_ids[b]) == (3 if h < 0 else int(argmax[h]))
    assert decision.gate_probs is None


def test_soft_rows_are_the_gate_weighted_sum():
    emb = torch.randn(4, 16)
    pool, router = slp(emb)
    pool.train(), router.train()
    router.mode = SOFT
    x = torch.randn(3, 2, 16)
    high_idx = torch.tensor([2, -1, 0])
    decision = router(tgt(high_idx), emb)
    out = pool(x, decision)
    p = router.gate_probs(emb)
    torch.testing.assert_close(decision.gate_probs, p)
    for b, h in enumerate(high_idx.tolist()):
        expected = pool.universal(x[b]) if h < 0 else sum(p[h, t] * pool.pool[t](x[b]) for t in range(3))
        torch.testing.assert_close(out[b], expected, rtol=0, atol=1e-5)


def test_fixed_map_overrides_the_gate_and_stops_soft_steps():
    emb = torch.randn(4, 16)
    pool, router = slp(emb)
    pool.train(), router.train()
    assert not router.map_is_fixed
    router.fix_map(router.map_ids(emb))
    fixed = router.map_ids()
    assert torch.equal(fixed, router.gate_probs(emb).argmax(-1)) and router.map_is_fixed
    with torch.no_grad():
        router.gate.weight.normal_()  # the gate moves; the fixed map must not
    router.mode = SOFT
    decision = router(torch.arange(4), None)
    out = pool(torch.randn(4, 1, 16), decision)
    assert decision.gate_probs is None and torch.equal(decision.module_ids, fixed)
    out.sum().backward()
    assert router.gate.weight.grad is None


def test_the_router_is_a_module_beside_the_pool_and_holds_the_gate():
    pool, router = slp(torch.randn(4, 16))
    assert [type(m) for m in pool.children()] == [nn.ModuleList, LanguageModule]  # pool, universal
    assert [type(m) for m in router.children()] == [nn.Linear]  # the gate
