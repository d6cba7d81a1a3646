"""The SLP's router: the decision of a hard and of a soft step, the hard / soft draws, the gate,
the routing map (fixing it; how it is stored, checked and loaded, from every older form); then
the map of a trained checkpoint through the real fairseq-generate (by language name; out of
range; the older forms of its state)."""

import pytest
import torch

from conftest import decode_as
from hltmt_plugin.compat.safe_loading import load_state
from hltmt_plugin.errors import HltmtInputError
from hltmt_plugin.pool.router import HARD, SOFT, LanguageRouter, decode_map, disparity, upgrade_router_state
from hltmt_plugin.routing import RoutePlan

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

HIGH = ["h0", "h1", "h2", "h3"]
LANGS = HIGH + ["low"]  # the record's language indices: h0..h3 = 0..3, low = 4


def router(T=3, H=4, emb=None, **kw):
    """A router alone; ``r.emb``: the embedding table it reads, the language tokens' rows first
    (H x 16: the gate's input)."""
    torch.manual_seed(0)
    made = LanguageRouter(16, T, HIGH[:H], **kw)
    made.emb = torch.randn(H, 16) if emb is None else emb
    made.set_languages(LANGS, range(H))
    return made


def decide(r, rows, plan=None):
    return r(rows, r.emb, plan)


def tgt(high_idx):
    """The target language (index in LANGS) of rows given by their high-resource index (-1: low)."""
    return torch.tensor([LANGS.index("low") if h < 0 else h for h in high_idx.tolist()])


# ---- the decision of a batch
def test_a_hard_decision_is_a_plan_of_each_rows_module():
    r = router()
    r.train()
    r.mode = HARD
    high_idx = torch.tensor([0, -1, 3, 1, -1, 2])
    decision = decide(r, tgt(high_idx))
    argmax = r.gate_probs(r.emb).argmax(-1)
    expected = [3 if h < 0 else int(argmax[h]) for h in high_idx.tolist()]
    assert isinstance(decision.plan, RoutePlan) and decision.plan.ids.tolist() == expected
    assert decision.module_ids.tolist() == expected
    assert decision.weights is None and decision.gate_probs is None
    r.fix_map(torch.tensor([2, 2, 0, 1]))  # a fixed map decides instead of the gate
    assert decide(r, tgt(high_idx)).plan.ids.tolist() == [2, 3, 1, 2, 3, 0]


def test_the_router_decides_once_a_hard_step_keeps_its_plan_in_the_pass_and_a_soft_step_makes_none():
    from hltmt_plugin.pool.router import PLAN
    from hltmt_plugin.routing import PassRows

    r = router()
    r.train()
    rows = PassRows("decoder")  # nothing defined in it: the router keeps its plan there itself
    given = RoutePlan(torch.tensor([1, 3]))  # e.g. the plan a beam search made at its first step
    r.mode = HARD
    with rows.use(torch.zeros(2, 2, dtype=torch.long), {PLAN: given}):
        assert decide(r, tgt(torch.tensor([0, -1])), rows).plan is given
    record = torch.stack([torch.zeros(2, dtype=torch.long), tgt(torch.tensor([0, -1]))], dim=1)
    with rows.use(record):  # a new pass: made at its first ask, then kept
        first = decide(r, tgt(torch.tensor([0, -1])), rows).plan
        assert rows.plans == {PLAN: first} and rows.ids_of == {}
        assert first.ids.tolist() == r.module_ids(tgt(torch.tensor([0, -1])), r.emb).tolist()
        assert decide(r, tgt(torch.tensor([0, -1])), rows).plan is first
    r.mode = SOFT  # the router decides soft and makes no plan (no host synchronisation)
    with rows.use(torch.zeros(2, 2, dtype=torch.long)):
        assert decide(r, tgt(torch.tensor([0, -1])), rows).plan is None and not rows.plans
    r.eval()
    assert decide(r, tgt(torch.tensor([0, -1]))).weights is None


def test_a_soft_decision_weighs_the_pool_for_high_rows_and_sends_the_others_to_the_universal_module():
    r = router()
    r.train()
    r.mode = SOFT
    high_idx = torch.tensor([2, -1, 0, 2, -1])
    decision = decide(r, tgt(high_idx))
    p = r.gate_probs(r.emb)
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
    r.eval()
    r.mode = SOFT
    decision = decide(r, torch.tensor([0, 1]))
    assert decision.gate_probs is None and decision.weights is None


def test_gate_steps_count_the_training_decisions_while_the_gate_learns():
    r = router()
    r.train()
    for mode in (HARD, SOFT, HARD):
        r.mode = mode
        decide(r, torch.tensor([0, 4]))
    r.eval()
    decide(r, torch.tensor([0, 4]))
    assert int(r.gate_steps) == 3
    r.train()
    r.fix_map(r.map_ids(r.emb))
    decide(r, torch.tensor([0, 4]))
    assert int(r.gate_steps) == 3


def test_only_a_training_pass_with_the_map_open_trains_the_gate_and_only_such_a_pass_draws_soft():
    """Every case of the decision's conditions (training, map fixed, drawn mode): which passes
    count as gate steps, which mix the pool, and what a pass gets."""
    for training in (True, False):
        for fixed in (False, True):
            for mode in (HARD, SOFT):
                r = router()
                if fixed:
                    r.fix_map(torch.tensor([2, 0, 1, 1]))
                r.train(training)
                r.mode = mode
                learns, soft = training and not fixed, training and not fixed and mode == SOFT
                case = (training, fixed, mode)
                decision = decide(r, tgt(torch.tensor([0, -1, 3])))
                assert int(r.gate_steps) == int(learns), case
                assert (decision.weights is not None, decision.gate_probs is not None) == (soft, soft), case
                assert (decision.plan is None) == soft, case
                if fixed:
                    assert decision.module_ids.tolist() == [2, 3, 1], case  # the map, not the gate


def test_a_new_router_routes_hard_until_its_first_draw():
    r = router(hard_prob=0.0)  # every draw would be soft
    r.train()
    assert r.mode == HARD and r.num_updates == 0 and decide(r, torch.tensor([0, 4])).weights is None
    r.set_num_updates(1)
    assert r.mode == SOFT and decide(r, torch.tensor([0, 4])).weights is not None


@pytest.mark.parametrize("p", [0.3, 0.7])
def test_each_updates_draw_is_the_first_number_of_the_generator_of_seed_and_update(p):
    """The rule itself: hard when numpy's generator seeded with (seed, update) draws below
    --slp-hard-prob; the count kept as handed."""
    import numpy as np

    r = router(hard_prob=p, seed=7)
    for n in (0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144):
        r.set_num_updates(n)
        assert r.num_updates == n
        assert r.mode == (HARD if np.random.default_rng([7, n]).random() < p else SOFT), n
    r = router(hard_prob=np.random.default_rng([7, 3]).random(), seed=7)
    r.set_num_updates(3)
    assert r.mode == SOFT  # hard only strictly below: a draw equal to --slp-hard-prob is soft


def test_the_gate_reads_the_rows_of_the_high_resource_tokens_in_the_table():
    r = router()
    table = torch.randn(9, 16)
    r.set_languages(LANGS, [7, 2, 5, 0])
    assert r.high_tokens.tolist() == [7, 2, 5, 0] and r.high_of_lang.tolist() == [0, 1, 2, 3, -1]
    rows = table[[7, 2, 5, 0]]
    torch.testing.assert_close(r.gate_probs(table), torch.softmax(r.gate(rows), dim=-1), rtol=0, atol=1e-6)
    assert torch.equal(r.map_ids(table), r.gate(rows).argmax(-1))


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
    full = r.gate_probs(r.emb)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = r.gate_probs(r.emb)
        term = disparity(mixed)
    assert mixed.dtype == torch.float32 and term.dtype == torch.float32
    torch.testing.assert_close(mixed, full, rtol=0, atol=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert r.gate(emb).dtype == torch.bfloat16  # what the gate would be without the guard


# ---- the routing map
def test_fixing_the_map_freezes_the_gate_and_the_map_stays_when_the_gate_moves():
    r = router()
    argmax = r.gate_probs(r.emb).argmax(-1)
    assert not r.map_is_fixed and r.map_by_language(r.emb) == dict(zip(HIGH, argmax.tolist()))
    assert torch.equal(r.map_ids(r.emb), argmax) and decode_map(r.routing_map, 3).tolist() == [-1] * 4
    r.fix_map(r.map_ids(r.emb))
    fixed = r.map_ids().clone()
    assert torch.equal(fixed, argmax) and torch.equal(decode_map(r.routing_map, 3), fixed)
    assert r.map_is_fixed and not any(p.requires_grad for p in r.gate.parameters())
    with torch.no_grad():
        r.gate.weight.normal_()
    assert torch.equal(r.map_ids(r.emb), fixed) and r.map_by_language() == dict(zip(HIGH, fixed.tolist()))
    with pytest.raises(HltmtInputError, match=r"\[0, 3, 0, 0\] is out of range"):
        router().fix_map(torch.tensor([0, 3, 0, 0]))


# ---- the target -> module table, which every reader reads
def test_the_table_has_one_entry_per_target_language_from_the_map_and_the_universal_module():
    r = router()
    r.set_languages(["low", "h2", "h0", "h3", "h1"], range(4))  # --langs in another order than the map's
    argmax = r.gate_probs(r.emb).argmax(-1).tolist()
    assert r.targets == ["low", "h2", "h0", "h3", "h1"] and not r.map_is_fixed
    assert r.target_modules.tolist() == [3, -1, -1, -1, -1]  # open: the gate decides each pass
    assert r.table(r.emb).tolist() == [3, argmax[2], argmax[0], argmax[3], argmax[1]]
    r.fix_map(torch.tensor([2, 2, 0, 1]))
    assert r.map_is_fixed and r.target_modules.tolist() == [3, 0, 2, 1, 2] and r.table() is r.target_modules
    assert r.routes() == {"low": "universal", "h2": "m0", "h0": "m2", "h3": "m1", "h1": "m2"}
    assert r.map_by_language() == {"h0": 2, "h1": 2, "h2": 0, "h3": 1}  # in the map's order
    assert r.labels == ["m0", "m1", "m2", "universal"]
    assert r.module_ids(torch.tensor([0, 2, 4, 4, 1])).tolist() == [3, 2, 2, 2, 0]
    assert "target_modules" not in r.state_dict()  # rebuilt from the map, never saved


def test_the_table_is_rebuilt_where_the_map_is_loaded():
    for mapping, table in (([2, 0, 1, 1], [2, 0, 1, 1, 3]), ([-1, -1, -1, -1], [-1, -1, -1, -1, 3])):
        r = router()
        r.fix_map(torch.tensor([0, 0, 0, 0]))
        r.load_state_dict(with_map(mapping))
        assert r.target_modules.tolist() == table and r.map_is_fixed == (mapping[0] >= 0), mapping


def test_every_reader_reads_the_table_not_the_map():
    """A table planted apart from the stored map: the hard pass, the routes by name and the map
    by language all follow it (one table, no second rule)."""
    r = router()
    r.fix_map(torch.tensor([0, 1, 2, 0]))
    r.target_modules = torch.tensor([1, 1, 0, 2, 3])
    r.eval()
    decision = decide(r, torch.tensor([4, 0, 2, 3]))
    assert decision.module_ids.tolist() == decision.plan.ids.tolist() == [3, 1, 0, 2]
    assert r.routes() == {"h0": "m1", "h1": "m1", "h2": "m0", "h3": "m2", "low": "universal"}
    assert r.map_by_language() == {"h0": 1, "h1": 1, "h2": 0, "h3": 2}
    r.train()
    r.mode = SOFT  # a fixed map: hard, by the table
    assert decide(r, torch.tensor([4, 0])).module_ids.tolist() == [3, 1]


def test_a_soft_step_names_each_rows_module_by_the_rule_of_the_table():
    r = router()
    r.train()
    r.mode = SOFT
    decision = decide(r, torch.tensor([4, 0, 1, 2, 3]))
    assert decision.module_ids.tolist() == r.table(r.emb).index_select(0, torch.tensor([4, 0, 1, 2, 3])).tolist()


class CountingRouter(LanguageRouter):
    """A router that counts each read of whether its map is fixed."""

    reads = 0

    @property
    def _map_fixed(self):
        CountingRouter.reads += 1
        return self.__dict__["fixed_on_host"]

    @_map_fixed.setter
    def _map_fixed(self, value):
        self.__dict__["fixed_on_host"] = value


@pytest.mark.parametrize("fixed", [False, True])
@pytest.mark.parametrize("mode", [HARD, SOFT])
@pytest.mark.parametrize("training", [True, False])
def test_whether_the_map_is_fixed_is_read_once_per_pass(fixed, mode, training):
    from hltmt_plugin.routing import PassRows

    torch.manual_seed(0)
    r = CountingRouter(16, 3, HIGH)
    r.emb = torch.randn(4, 16)
    r.set_languages(LANGS, range(4))
    if fixed:
        r.fix_map(torch.tensor([2, 0, 1, 1]))
    r.train(training)
    r.mode = mode
    rows = PassRows("decoder")
    with rows.use(torch.zeros(3, 2, dtype=torch.long)):
        CountingRouter.reads = 0
        decide(r, torch.tensor([0, 4, 3]), rows)
        assert CountingRouter.reads == 1


def test_the_router_is_a_module_with_its_state_under_its_own_names():
    """decoder.slp_router.*: the map, the gate's step count, the map's languages, the gate."""
    r = router()
    assert list(r.state_dict()) == ["routing_map", "gate_steps", "high_lang_names", "gate.weight", "gate.bias"]
    assert [n for n, _ in r.named_parameters()] == ["gate.weight", "gate.bias"]


def test_the_router_moves_with_the_model():
    r = router()
    r.to("meta")  # a move makes new buffers (as .cuda() does)
    assert r.gate.weight.is_meta and r.routing_map.is_meta and r.gate_steps.is_meta
    assert r.high_of_lang.is_meta and r.high_tokens.is_meta and r.high_lang_names.is_meta


def test_every_older_form_of_the_state_is_read_in_one_place():
    """The router's tensors on the pool (decoder.slp.gate.*, ...), the map as indices, the
    map's language names on the decoder, the map's and the names' older names under
    decoder.slp_router: all become this version's keys and form."""
    r = router()
    r.fix_map(torch.tensor([2, 0, 1, 1]))
    new = {f"decoder.slp_router.{k}": v for k, v in r.state_dict().items()}
    old = {
        "decoder.slp.gate.weight": r.gate.weight.detach(),
        "decoder.slp.gate.bias": r.gate.bias.detach(),
        "decoder.slp.gate_steps": r.gate_steps,
        "decoder.slp.fixed_map": torch.tensor([2, 0, 1, 1]),
        "decoder.high_langs": r.high_lang_names,
        "decoder.slp.pool.0.fc1.weight": torch.zeros(1),  # the pool's own keys stay
    }
    upgrade_router_state(old, "decoder.")
    assert sorted(old) == sorted([*new, "decoder.slp.pool.0.fc1.weight"])
    assert all(torch.equal(old[k], v) for k, v in new.items())
    renamed = {"decoder.slp_router.routing_map": "fixed_map_onehot", "decoder.slp_router.high_lang_names": "high_langs"}
    previous = {(f"decoder.slp_router.{renamed[k]}" if k in renamed else k): v for k, v in new.items()}
    assert "decoder.slp_router.fixed_map_onehot" in previous
    upgrade_router_state(previous, "decoder.")
    assert sorted(previous) == sorted(new) and all(torch.equal(previous[k], v) for k, v in new.items())
    both = {**new, "decoder.slp_router.fixed_map": torch.tensor([0, 0, 1, 1])}
    with pytest.raises(HltmtInputError, match="holds two routing maps that differ") as refused:
        upgrade_router_state(both, "decoder.")
    assert "fixed_map" not in str(refused.value)


@pytest.mark.parametrize(
    "entry, value, why",
    [
        ("routing_map", [[0, 1]], r"decoder\.slp_router\.routing_map must be a tensor, got a list"),
        ("fixed_map", 3, r"routing map as module indices \(decoder\.slp_router\.routing_map\) must be a tensor"),
        (
            "fixed_map",
            torch.zeros(2, 2, dtype=torch.long),
            r"routing map as module indices \(decoder\.slp_router\.routing_map\) is \(2, 2\) of torch.int64",
        ),
        ("high_lang_names", "h0,h1", "high_lang_names must be a tensor, got a string"),
        ("high_lang_names", torch.tensor([1000, 3]), "high_lang_names is not a list of language names"),
        ("gate.weight", {"w": 1}, "gate.weight must be a tensor, got a map"),
    ],
)
def test_a_stored_router_entry_of_another_kind_is_one_line(entry, value, why):
    state = {f"decoder.slp_router.{k}": v for k, v in router().state_dict().items()}
    state[f"decoder.slp_router.{entry}"] = value
    with pytest.raises(HltmtInputError, match=why) as refused:
        upgrade_router_state(state, "decoder.")
    assert "\n" not in str(refused.value)
    with pytest.raises(HltmtInputError, match="without the gate it belongs to"):
        upgrade_router_state({"decoder.slp.fixed_map": torch.tensor([0, 1])}, "decoder.")


# ---- the stored routing map: one-hot rows, so that no average of checkpoints is another map
def with_map(mapping, T=3):
    r = router(T=T, H=len(mapping))
    if any(v >= 0 for v in mapping):
        r.fix_map(torch.tensor(mapping))
    return r.state_dict()


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
        match=r"routing map \(routing_map\) is no map a training stage wrote: "
        r"the row of h\d is \[[0-9., ]+\], not a single 1",
    ):
        router().load_state_dict(state)


@pytest.mark.parametrize("mapping", [[-1, -1, -1, -1], [0, 1, 2, 0], [2, 2, 2, 2]])
@pytest.mark.parametrize("integer_division", [True, False])
def test_an_average_of_checkpoints_with_one_map_keeps_it(mapping, integer_division):
    r = router()
    r.load_state_dict(averaged([with_map(mapping)] * 3, integer_division))
    assert decode_map(r.routing_map, 3).tolist() == mapping and r.map_is_fixed == (mapping[0] >= 0)


def test_a_map_fixed_for_some_languages_only_is_refused():
    state = with_map([0, 1, 2, 0])
    state["routing_map"][1] = torch.tensor([0, 0, 0, 1])
    with pytest.raises(HltmtInputError, match=r"fixes h0,h2,h3 and leaves h1 open: a stage fixes every language"):
        router().load_state_dict(state)


def test_a_checkpoint_with_the_older_map_of_indices_loads_as_before():
    state = with_map([2, 0, 1, 1])
    del state["routing_map"]
    for mapping, fixed in (([2, 0, 1, 1], True), ([-1, -1, -1, -1], False)):
        r = router()
        older = {f"slp_router.{k}": v for k, v in {**state, "fixed_map": torch.tensor(mapping)}.items()}
        upgrade_router_state(older, "")
        r.load_state_dict({k[len("slp_router.") :]: v for k, v in older.items()})
        assert decode_map(r.routing_map, 3).tolist() == mapping and r.map_is_fixed == fixed
        assert "fixed_map" not in r.state_dict() and r.state_dict()["routing_map"].shape == (4, 4)
    with pytest.raises(
        HltmtInputError, match=r"routing map \(decoder\.slp_router\.routing_map\) \[0, 5, 0, 0\] is out"
    ):
        upgrade_router_state({"slp_router.fixed_map": torch.tensor([0, 5, 0, 0]), **older}, "")


# ---------------------------------------------------------------------------------------
# the map of a trained checkpoint, through fairseq-generate


def with_fixed_map(trained, tmp_path, mapping):
    """The trained checkpoint with its router's state in the older forms: under decoder.slp.
    (the map's names on the decoder), the map as module indices."""
    state = load_state(trained[0])
    model = state["model"]
    older = {"high_lang_names": "decoder.high_langs", "routing_map": None}  # (the map: as indices below)
    for key in [k for k in model if k.startswith("decoder.slp_router.")]:
        name, value = key[len("decoder.slp_router.") :], model.pop(key)
        if older.get(name, "") is not None:
            model[older.get(name, "decoder.slp." + name)] = value
    model["decoder.slp.fixed_map"] = mapping
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
        assert "hltmt_plugin: error: the checkpoint's routing map (decoder.slp_router.routing_map)" in done.stderr, (
            done.stderr
        )
        assert "Traceback" not in done.stderr
