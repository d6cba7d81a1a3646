"""The selective language-specific pool (SLP), its gate and the universal layer: routing, the
hard / soft draws, the routing map and how it loads; then the map of a trained checkpoint
through the real fairseq-generate (by language name; out of range)."""
import pytest
import torch

from conftest import decode_as
from hltmt_plugin.errors import HltmtInputError
from hltmt_plugin.modules.language_pool import HARD, SOFT, LanguageModule, SelectiveLanguagePool


HIGH = ["h0", "h1", "h2", "h3"]
LANGS = HIGH + ["low"]  # the record's language indices: h0..h3 = 0..3, low = 4


def pool(T=3, H=4, **kw):
    torch.manual_seed(0)
    slp = SelectiveLanguagePool(16, 32, T, H, **kw)
    slp.set_languages(LANGS, HIGH[:H])
    return slp


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


def test_hard_rows_use_argmax_module_and_low_rows_the_universal_layer():
    slp = pool().train()
    slp.mode = HARD
    emb = torch.randn(4, 16)
    x = torch.randn(5, 2, 16)
    high_idx = torch.tensor([0, -1, 3, 1, -1])
    out, info = slp(x, tgt(high_idx), emb)
    argmax = slp.gate_probs(emb).argmax(-1)
    for b, h in enumerate(high_idx.tolist()):
        module = slp.universal if h < 0 else slp.pool[int(argmax[h])]
        torch.testing.assert_close(out[b], module(x[b]), rtol=0, atol=1e-6)
        assert int(info["slp_module"][b]) == (3 if h < 0 else int(argmax[h]))
    assert info["slp_gate"] is None


def test_soft_rows_are_the_gate_weighted_sum():
    slp = pool().train()
    slp.mode = SOFT
    emb = torch.randn(4, 16)
    x = torch.randn(3, 2, 16)
    high_idx = torch.tensor([2, -1, 0])
    out, info = slp(x, tgt(high_idx), emb)
    p = slp.gate_probs(emb)
    torch.testing.assert_close(info["slp_gate"], p)
    for b, h in enumerate(high_idx.tolist()):
        expected = slp.universal(x[b]) if h < 0 else sum(p[h, t] * slp.pool[t](x[b]) for t in range(3))
        torch.testing.assert_close(out[b], expected, rtol=0, atol=1e-5)


def test_eval_is_hard_even_after_a_soft_draw():
    slp = pool().eval()
    slp.mode = SOFT
    _, info = slp(torch.randn(2, 1, 16), torch.tensor([0, 1]), torch.randn(4, 16))
    assert info["slp_gate"] is None


def test_fixed_map_overrides_the_gate_and_stops_soft_steps():
    slp = pool().train()
    emb = torch.randn(4, 16)
    assert not slp.map_is_fixed
    fixed = slp.fix_map(emb).clone()
    assert torch.equal(fixed, slp.gate_probs(emb).argmax(-1)) and slp.map_is_fixed
    with torch.no_grad():
        slp.gate.weight.normal_()  # the gate moves; the fixed map must not
    slp.mode = SOFT
    out, info = slp(torch.randn(4, 1, 16), torch.arange(4), emb)
    assert info["slp_gate"] is None and torch.equal(info["slp_module"], fixed)
    out.sum().backward()
    assert slp.gate.weight.grad is None


def test_hard_soft_draw_depends_only_on_seed_and_update():
    a, b = pool(hard_prob=0.5, seed=7), pool(hard_prob=0.5, seed=7)
    modes = []
    for n in range(1, 2001):
        a.set_num_updates(n)
        b.set_num_updates(n)
        assert a.mode == b.mode  # same draw on every worker
        modes.append(a.mode)
    share = modes.count(HARD) / len(modes)
    assert 0.45 < share < 0.55, share
    assert any(modes[i] != modes[i + 1] for i in range(10))  # it really alternates
    c = pool(hard_prob=0.5, seed=8)
    other = []
    for n in range(1, 101):
        c.set_num_updates(n)
        other.append(c.mode)
    assert other != modes[:100]  # another seed, another sequence


@pytest.mark.parametrize("p, mode", [(1.0, HARD), (0.0, SOFT)])
def test_hard_prob_extremes(p, mode):
    slp = pool(hard_prob=p)
    for n in range(50):
        slp.set_num_updates(n)
        assert slp.mode == mode


def test_the_gate_and_the_disparity_stay_float32_under_mixed_precision():
    from hltmt_plugin.modules.language_pool import disparity

    slp = pool()
    emb = torch.randn(4, 16)
    full = slp.gate_probs(emb)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = slp.gate_probs(emb)
        term = disparity(mixed)
    assert mixed.dtype == torch.float32 and term.dtype == torch.float32
    torch.testing.assert_close(mixed, full, rtol=0, atol=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert slp.gate(emb).dtype == torch.bfloat16  # what the gate would be without the guard


# ---- the stored routing map: one-hot rows, so that no average of checkpoints is another map
def with_map(mapping, T=3):
    slp = pool(T=T, H=len(mapping))
    if any(v >= 0 for v in mapping):
        slp.fix_map_to(torch.tensor(mapping))
    return slp.state_dict()


def averaged(states, integer_division=True):
    """fairseq's scripts/average_checkpoints.py on the pool's tensors: the sum over checkpoints,
    then ``//`` for integer tensors (its current form) or ``/`` (float: older forms, other tools)."""
    total = {k: sum(s[k] for s in states) for k in states[0]}
    return {k: (v // len(states) if integer_division else v / len(states)) if not v.is_floating_point()
            else v / len(states) for k, v in total.items()}


@pytest.mark.parametrize("maps", [
    [[-1, -1, -1, -1], [1, 1, 1, 1]],  # both sides of the stage switch: once [0, 0, 0, 0] with integer indices
    [[0, 1, 2, 0], [2, 1, 0, 0]],  # two stage-all runs with different maps
    [[0, 1, 2, 0], [0, 1, 2, 0], [0, 1, 2, 1]],
    [[-1, -1, -1, -1], [-1, -1, -1, -1], [2, 2, 2, 2]],
])
@pytest.mark.parametrize("integer_division", [True, False])
def test_an_average_of_checkpoints_with_different_maps_is_refused_on_load(maps, integer_division):
    state = averaged([with_map(m) for m in maps], integer_division)
    with pytest.raises(HltmtInputError, match=r"routing map \(fixed_map_onehot\) is no map a training stage wrote: "
                                              r"the row of h\d is \[[0-9., ]+\], not a single 1"):
        pool().load_state_dict(state)


@pytest.mark.parametrize("mapping", [[-1, -1, -1, -1], [0, 1, 2, 0], [2, 2, 2, 2]])
@pytest.mark.parametrize("integer_division", [True, False])
def test_an_average_of_checkpoints_with_one_map_keeps_it(mapping, integer_division):
    slp = pool()
    slp.load_state_dict(averaged([with_map(mapping)] * 3, integer_division))
    assert slp.fixed_map.tolist() == mapping and slp.map_is_fixed == (mapping[0] >= 0)


def test_a_map_fixed_for_some_languages_only_is_refused():
    state = with_map([0, 1, 2, 0])
    state["fixed_map_onehot"][1] = torch.tensor([0, 0, 0, 1])
    with pytest.raises(HltmtInputError, match=r"fixes h0,h2,h3 and leaves h1 open: a stage fixes every language"):
        pool().load_state_dict(state)


def test_a_checkpoint_with_the_older_map_of_indices_loads_as_before():
    state = with_map([2, 0, 1, 1])
    del state["fixed_map_onehot"]
    for mapping, fixed in (([2, 0, 1, 1], True), ([-1, -1, -1, -1], False)):
        slp = pool()
        slp.load_state_dict({**state, "fixed_map": torch.tensor(mapping)})
        assert slp.fixed_map.tolist() == mapping and slp.map_is_fixed == fixed
        assert "fixed_map" not in slp.state_dict() and slp.state_dict()["fixed_map_onehot"].shape == (4, 4)
    with pytest.raises(HltmtInputError, match=r"fixed_map\) \[0, 5, 0, 0\] is out of range"):
        pool().load_state_dict({**state, "fixed_map": torch.tensor([0, 5, 0, 0])})


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
