"""The SLP's router: the decision of a hard and of a soft step, the hard / soft draws, the gate,
the routing map (fixing it; how it is stored, checked and loaded); then the map of a trained
checkpoint through the real fairseq-generate (by language name; out of range)."""

import pytest
import torch
from torch import nn

from conftest import decode_as
from hltmt_plugin.errors import HltmtInputError
from hltmt_plugin.modules.language_pool import SelectiveLanguagePool
from hltmt_plugin.modules.language_router import HARD, SOFT, LanguageRouter, disparity
from hltmt_plugin.modules.routing import RoutePlan


HIGH = ["h0", "h1", "h2", "h3"]
LANGS = HIGH + ["low"]  # the record's language indices: h0..h3 = 0..3, low = 4


def router(T=3, H=4, emb=None, **kw):
    """A router alone: its tensors on a bare module; ``emb``: the language tokens' rows (H x 16)."""
    torch.manual_seed(0)
    made = LanguageRouter(nn.Module(), 16, T, H, **kw)
    emb = torch.randn(H, 16) if emb is None else emb
    made.set_languages(LANGS, HIGH[:H], lambda: emb)
    return made


def tgt(high_idx):
    """The target language (index in LANGS) of rows given by their high-resource index (-1: low)."""
    return torch.tensor([LANGS.index("low") if h < 0 else h for h in high_idx.tolist()])


# ---- the decision of a batch
def test_a_hard_decision_is_a_plan_of_each_rows_module():
    r = router()
    r.owner.train()
    r.mode = HARD
    high_idx = torch.tensor([0, -1, 3, 1, -1, 2])
    decision = r.decide(tgt(high_idx))
    argmax = r.gate_probs().argmax(-1)
    expected = [3 if h < 0 else int(argmax[h]) for h in high_idx.tolist()]
    assert isinstance(decision.plan, RoutePlan) and decision.plan.ids.tolist() == expected
    assert decision.module_ids.tolist() == expected
    assert decision.weights is None and decision.gate_probs is None
    r.fix_map_to(torch.tensor([2, 2, 0, 1]))  # a fixed map decides instead of the gate
    assert r.decide(tgt(high_idx)).plan.ids.tolist() == [2, 3, 1, 2, 3, 0]


def test_a_hard_decision_takes_the_plan_it_is_handed_and_a_soft_one_asks_for_none():
    r = router()
    r.owner.train()
    given = RoutePlan(torch.tensor([1, 3]))  # e.g. the plan a beam search made at its first step
    asked = []
    r.mode = HARD
    assert r.decide(tgt(torch.tensor([0, -1])), plan=lambda: asked.append(1) or given).plan is given
    r.mode = SOFT
    assert r.decide(tgt(torch.tensor([0, -1])), plan=lambda: asked.append(1) or given).plan is None
    assert asked == [1]


def test_a_soft_decision_weighs_the_pool_for_high_rows_and_sends_the_others_to_the_universal_module():
    r = router()
    r.owner.train()
    r.mode = SOFT
    high_idx = torch.tensor([2, -1, 0, 2, -1])
    decision = r.decide(tgt(high_idx))
    p = r.gate_probs()
    torch.testing.assert_close(decision.gate_probs, p)
    assert decision.plan is None and decision.weights.shape == (5, 3)
    for b, h in enumerate(high_idx.tolist()):
        if h < 0:
            assert int(decision.module_ids[b]) == 3  # the universal module
        else:
            torch.testing.assert_close(decision.weights[b], p[h])
            torch.testing.assert_close(decision.weights[b].sum(), torch.tensor(1.0))
            assert int(decision.module_ids[b]) == int(p[h].argmax())


def test_eval_is_hard_even_after_a_soft_draw():
    r = router()
    r.owner.eval()
    r.mode = SOFT
    decision = r.decide(torch.tensor([0, 1]))
    assert decision.gate_probs is None and decision.weights is None


def test_gate_steps_count_the_training_decisions_while_the_gate_learns():
    r = router()
    r.owner.train()
    for mode in (HARD, SOFT, HARD):
        r.mode = mode
        r.decide(torch.tensor([0, 4]))
    r.owner.eval()
    r.decide(torch.tensor([0, 4]))
    assert int(r.gate_steps) == 3
    r.owner.train()
    r.fix_map()
    r.decide(torch.tensor([0, 4]))
    assert int(r.gate_steps) == 3


# ---- the per-update draw and the gate
def test_hard_soft_draw_depends_only_on_seed_and_update():
    a, b = router(hard_prob=0.5, seed=7), router(hard_prob=0.5, seed=7)
    modes = []
    for n in range(1, 2001):
        a.set_num_updates(n)
        b.set_num_updates(n)
        assert a.mode == b.mode  # same draw on every worker
        modes.append(a.mode)
    share = modes.count(HARD) / len(modes)
    assert 0.45 < share < 0.55, share
    assert any(modes[i] != modes[i + 1] for i in range(10))  # it really alternates
    c = router(hard_prob=0.5, seed=8)
    other = []
    for n in range(1, 101):
        c.set_num_updates(n)
        other.append(c.mode)
    assert other != modes[:100]  # another seed, another sequence


@pytest.mark.parametrize("p, mode", [(1.0, HARD), (0.0, SOFT)])
def test_hard_prob_extremes(p, mode):
    r = router(hard_prob=p)
    for n in range(50):
        r.set_num_updates(n)
        assert r.mode == mode


def test_the_gate_and_the_disparity_stay_float32_under_mixed_precision():
    emb = torch.randn(4, 16)
    r = router(emb=emb)
    full = r.gate_probs()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = r.gate_probs()
        term = disparity(mixed)
    assert mixed.dtype == torch.float32 and term.dtype == torch.float32
    torch.testing.assert_close(mixed, full, rtol=0, atol=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert r.gate(emb).dtype == torch.bfloat16  # what the gate would be without the guard


# ---- the routing map
def test_fixing_the_map_freezes_the_gate_and_the_map_stays_when_the_gate_moves():
    r = router()
    assert not r.map_is_fixed and r.routing_map() == dict(zip(HIGH, r.gate_probs().argmax(-1).tolist()))
    fixed = r.fix_map().clone()
    assert r.map_is_fixed and not any(p.requires_grad for p in r.gate.parameters())
    with torch.no_grad():
        r.gate.weight.normal_()
    assert torch.equal(r.current_map(), fixed) and r.routing_map() == dict(zip(HIGH, fixed.tolist()))
    assert torch.equal(r.fix_map(), fixed)  # fixed once
    with pytest.raises(HltmtInputError, match=r"\[0, 3, 0, 0\] is out of range"):
        router().fix_map_to(torch.tensor([0, 3, 0, 0]))


def test_the_router_keeps_its_tensors_on_its_owner_under_the_checkpoint_names():
    """decoder.slp.gate.*, decoder.slp.fixed_map_onehot and decoder.slp.gate_steps: beside the
    pool's modules, after them (the order of fresh models and optimizer states before the split)."""
    assert list(router().owner.state_dict()) == ["fixed_map_onehot", "gate_steps", "gate.weight", "gate.bias"]
    torch.manual_seed(0)
    pool = SelectiveLanguagePool(16, 32, 2)
    LanguageRouter(pool, 16, 2, 3)
    names = list(pool.state_dict())
    assert names[:2] == ["fixed_map_onehot", "gate_steps"] and names[-2:] == ["gate.weight", "gate.bias"]
    assert {n.split(".")[0] for n in names[2:-2]} == {"pool", "universal"}
    assert [n for n, _ in pool.named_parameters()][-2:] == ["gate.weight", "gate.bias"]


def test_the_router_reads_its_tensors_where_its_owner_moved_them():
    r = router()
    r.owner.to("meta")  # a move makes new buffers (as .cuda() does)
    assert r.gate.weight.is_meta and r.fixed_map_onehot.is_meta and r.fixed_map.is_meta and r.gate_steps.is_meta
    assert r.high_of_lang.is_meta


# ---- the stored routing map: one-hot rows, so that no average of checkpoints is another map
def with_map(mapping, T=3):
    r = router(T=T, H=len(mapping))
    if any(v >= 0 for v in mapping):
        r.fix_map_to(torch.tensor(mapping))
    return r.owner.state_dict()


def averaged(states, integer_division=True):
    """fairseq's scripts/average_checkpoints.py on the router's tensors: the sum over checkpoints,
    then ``//`` for integer tensors (its current form) or ``/`` (float: older forms, other tools)."""
    total = {k: sum(s[k] for s in states) for k in states[0]}
    return {
        k: (v // len(states) if integer_division else v / len(states)) if not v.is_floating_point() else v / len(states)
        for k, v in total.items()
    }


@pytest.mark.parametrize(
    "maps",
    [
        [[-1, -1, -1, -1], [1, 1, 1, 1]],  # both sides of the stage switch: once [0, 0, 0, 0] with integer indices
        [[0, 1, 2, 0], [2, 1, 0, 0]],  # two stage-all runs with different maps
        [[0, 1, 2, 0], [0, 1, 2, 0], [0, 1, 2, 1]],
        [[-1, -1, -1, -1], [-1, -1, -1, -1], [2, 2, 2, 2]],
    ],
)
@pytest.mark.parametrize("integer_division", [True, False])
def test_an_average_of_checkpoints_with_different_maps_is_refused_on_load(maps, integer_division):
    state = averaged([with_map(m) for m in maps], integer_division)
    with pytest.raises(
        HltmtInputError,
        match=r"routing map \(fixed_map_onehot\) is no map a training stage wrote: "
        r"the row of h\d is \[[0-9., ]+\], not a single 1",
    ):
        router().owner.load_state_dict(state)


@pytest.mark.parametrize("mapping", [[-1, -1, -1, -1], [0, 1, 2, 0], [2, 2, 2, 2]])
@pytest.mark.parametrize("integer_division", [True, False])
def test_an_average_of_checkpoints_with_one_map_keeps_it(mapping, integer_division):
    r = router()
    r.owner.load_state_dict(averaged([with_map(mapping)] * 3, integer_division))
    assert r.fixed_map.tolist() == mapping and r.map_is_fixed == (mapping[0] >= 0)


def test_a_map_fixed_for_some_languages_only_is_refused():
    state = with_map([0, 1, 2, 0])
    state["fixed_map_onehot"][1] = torch.tensor([0, 0, 0, 1])
    with pytest.raises(HltmtInputError, match=r"fixes h0,h2,h3 and leaves h1 open: a stage fixes every language"):
        router().owner.load_state_dict(state)


def test_a_checkpoint_with_the_older_map_of_indices_loads_as_before():
    state = with_map([2, 0, 1, 1])
    del state["fixed_map_onehot"]
    for mapping, fixed in (([2, 0, 1, 1], True), ([-1, -1, -1, -1], False)):
        r = router()
        r.owner.load_state_dict({**state, "fixed_map": torch.tensor(mapping)})
        assert r.fixed_map.tolist() == mapping and r.map_is_fixed == fixed
        assert "fixed_map" not in r.owner.state_dict() and r.owner.state_dict()["fixed_map_onehot"].shape == (4, 4)
    with pytest.raises(HltmtInputError, match=r"fixed_map\) \[0, 5, 0, 0\] is out of range"):
        router().owner.load_state_dict({**state, "fixed_map": torch.tensor([0, 5, 0, 0])})


# ---------------------------------------------------------------------------------------
# the map of a trained checkpoint, through fairseq-generate


def with_fixed_map(trained, tmp_path, mapping):
    state = torch.load(trained[0], map_location="cpu", weights_only=True)
    state["model"]["decoder.slp.fixed_map"] = mapping  # the older stored form: module indices
    del state["model"]["decoder.slp.fixed_map_onehot"]
    path = tmp_path / "fixed.pt"
    torch.save(state, path)
    return path


def test_the_routing_map_follows_language_names_and_other_languages_are_refused(data_bin, trained, tmp_path):
    path = with_fixed_map(trained, tmp_path, torch.tensor([1, 0]))  # trained as de,fr: de->m1, fr->m0
    same = decode_as(data_bin, path)
    assert same.returncode == 0, same.stderr[-2000:]
    assert "routing map (fixed, from the checkpoint): de->m1, fr->m0" in same.stderr
    swapped = decode_as(data_bin, path, high="fr,de")
    assert swapped.returncode == 0, swapped.stderr[-2000:]
    assert "routing map (fixed, from the checkpoint): fr->m0, de->m1" in swapped.stderr  # by name, not position
    hyps = lambda out: [line for line in out.stdout.splitlines() if line.startswith("H-")]  # noqa: E731
    assert hyps(swapped) == hyps(same)
    other = decode_as(data_bin, path, high="fr,gu")
    assert other.returncode != 0
    assert "the checkpoint's pool serves --high-resource-langs de,fr and these options name fr,gu" in other.stderr


def test_a_routing_map_out_of_range_is_refused_on_load(data_bin, trained, tmp_path):
    for bad in (torch.tensor([0, 2]), torch.tensor([0.0, 1.0]), torch.tensor([-1, 0])):
        done = decode_as(data_bin, with_fixed_map(trained, tmp_path, bad))
        assert done.returncode != 0, bad
        assert "hltmt_plugin: error: the checkpoint's routing map (decoder.slp.fixed_map)" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
