"""The model in mixed-direction batches: routing per row, gradients, beam search = full
forward, and the errors a user gets for options or batches that cannot work (also under
fairseq's parent task, through fairseq-generate)."""

import pytest
import torch
from fairseq.models.transformer import TransformerDecoderBase

from conftest import assert_beam_equals_forward, assert_one_error_line, build, decode, generate, hypotheses, make_sample
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.pool.router import HARD, SOFT

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

DIRECTIONS = ["en-de", "en-gu", "de-en", "en-fr", "en-hi", "gu-en"]


def row_directions(sample):
    return [DIRECTIONS[i] for i in sample["id"].tolist()]


def expected_module(model, direction):
    tgt = direction.split("-")[1]
    if tgt in model.high_langs:
        return model.map_by_language()[tgt]
    return model.slp.pool_size  # the universal layer


def decoder_features(model, sample):
    """The decoder's output features (after the SLP) and its extra outputs."""
    net = sample["net_input"]
    enc = model.encoder(net["src_tokens"], net["src_lengths"])
    return model.decoder(net["prev_output_tokens"], enc, features_only=True)


def features_before_slp(model, sample):
    net = sample["net_input"]
    enc = model.encoder(net["src_tokens"], net["src_lengths"])
    x, _ = TransformerDecoderBase.extract_features(model.decoder, net["prev_output_tokens"], enc)
    return x


@pytest.fixture(scope="module")
def built(data_bin):
    return build(data_bin)


def test_hard_step_routes_each_row_to_its_module_alone(built):
    _, task, model = built
    model.train()
    model.slp_router.mode = HARD
    sample = make_sample(task, DIRECTIONS)
    out, extra = decoder_features(model, sample)
    pre = features_before_slp(model, sample)
    modules = list(model.slp.pool) + [model.slp.universal]
    for b, direction in enumerate(row_directions(sample)):
        k = expected_module(model, direction)
        assert int(extra["slp_module"][b]) == k, direction
        torch.testing.assert_close(out[b], modules[k](pre[b]), rtol=0, atol=1e-5)


def test_soft_step_is_the_weighted_sum_for_high_rows_and_universal_for_low(built):
    _, task, model = built
    model.train()
    model.slp_router.mode = SOFT
    sample = make_sample(task, DIRECTIONS)
    out, extra = decoder_features(model, sample)
    probs = extra["slp_gate"]
    assert probs.shape == (2, 2)
    pre = features_before_slp(model, sample)
    for b, direction in enumerate(row_directions(sample)):
        tgt = direction.split("-")[1]
        if tgt in model.high_langs:
            p = probs[model.high_langs.index(tgt)]
            expected = sum(p[t] * model.slp.pool[t](pre[b]) for t in range(2))
        else:
            expected = model.slp.universal(pre[b])
            assert int(extra["slp_module"][b]) == 2
        torch.testing.assert_close(out[b], expected, rtol=0, atol=1e-5)


def grads(model):
    model.zero_grad(set_to_none=True)
    return model


def has_grad(module):
    return any(p.grad is not None and p.grad.abs().sum() > 0 for p in module.parameters())


def test_gradient_reaches_exactly_the_selected_module_in_hard_steps(built):
    _, task, model = built
    model.train()
    model.slp_router.mode = HARD
    sample = make_sample(task, ["en-de", "en-gu", "de-en"])
    grads(model)(**sample["net_input"])[0].sum().backward()
    chosen = model.map_by_language()["de"]
    for t, module in enumerate(model.slp.pool):
        assert has_grad(module) == (t == chosen), t
    assert has_grad(model.slp.universal)
    assert not has_grad(model.slp_router.gate)


def test_gradient_reaches_all_pool_modules_and_the_gate_in_soft_steps(built):
    _, task, model = built
    model.train()
    model.slp_router.mode = SOFT
    sample = make_sample(task, ["en-de", "en-gu", "de-en"])
    grads(model)(**sample["net_input"])[0].sum().backward()
    assert all(has_grad(m) for m in model.slp.pool)
    assert has_grad(model.slp_router.gate) and has_grad(model.slp.universal)


def test_low_only_batch_touches_no_pool_module(built):
    _, task, model = built
    model.train()
    model.slp_router.mode = SOFT
    sample = make_sample(task, ["en-gu", "de-en", "en-hi"])
    grads(model)(**sample["net_input"])[0].sum().backward()
    assert not any(has_grad(m) for m in model.slp.pool) and has_grad(model.slp.universal)


def test_validation_routes_low_resource_targets_to_the_universal_layer(built):
    _, task, model = built
    model.eval()
    model.slp_router.mode = SOFT  # a soft draw left over from training must not matter at evaluation
    sample = make_sample(task, DIRECTIONS)
    with torch.no_grad():
        _, extra = model(**sample["net_input"])
    assert extra["slp_gate"] is None
    assert extra["slp_module"].tolist() == [expected_module(model, d) for d in row_directions(sample)]


@pytest.mark.parametrize("extra", [[], ["--decoder-normalize-before", "--encoder-normalize-before"]])
def test_beam_search_scores_equal_a_full_forward_pass(data_bin, extra):
    _, task, model = build(data_bin, *extra)
    if extra:
        assert model.decoder.slp_output_norm is not None and model.decoder.layer_norm is None
    model.eval()
    # a gate that separates the languages, so routing differences would show
    with torch.no_grad():
        model.slp_router.gate.weight.normal_(0, 5)
    sample = make_sample(task, DIRECTIONS, seed=3)
    checked = assert_beam_equals_forward(task, model, sample, beam=5)
    assert checked == len(DIRECTIONS) * 5


def test_generation_routes_each_row_by_its_own_target(built):
    _, task, model = built
    model.eval()
    seen = []
    hook = model.slp.register_forward_hook(lambda m, i, o: seen.append(i[1].module_ids.clone()))  # (x, decision)
    try:
        sample = make_sample(task, DIRECTIONS)
        generate(task, model, sample, beam=2)
    finally:
        hook.remove()
    expected = torch.tensor([expected_module(model, d) for d in row_directions(sample)])
    first_step = seen[0]
    assert torch.equal(first_step, expected.repeat_interleave(2))  # beam 2: rows stay with their language


@pytest.mark.parametrize("direction", ["en-de", "en-gu"])
def test_beam_search_makes_the_routing_plan_once_per_search(built, monkeypatch, direction):
    """A row's module cannot change during a search: the plan (and its host synchronisation)
    is made at the first step and carried with the beams, not remade per token."""
    import hltmt_plugin.routing as routing

    _, task, model = built
    model.eval()
    made, steps = [], []
    init = routing.RoutePlan.__init__
    monkeypatch.setattr(routing.RoutePlan, "__init__", lambda self, ids: made.append(1) or init(self, ids))
    hook = model.slp.register_forward_hook(lambda m, i, o: steps.append(1))
    try:
        hypos = generate(task, model, make_sample(task, [direction] * 4), beam=5)
    finally:
        hook.remove()
    assert len(hypos) == 4 and len(steps) > 3
    assert len(made) == 1


def test_beam_search_looks_for_stateful_modules_once_per_search(built, monkeypatch):
    """fairseq walks all decoder submodules at every step to reorder their state; ours walks
    them once per search (the SLP adds submodules, so the walk would cost more than the SLP)."""
    _, task, model = built
    model.eval()
    walks, steps = [], []
    walk = type(model.decoder).modules
    monkeypatch.setattr(type(model.decoder), "modules", lambda self: walks.append(1) or walk(self))
    hook = model.slp.register_forward_hook(lambda m, i, o: steps.append(1))
    try:
        generate(task, model, make_sample(task, DIRECTIONS), beam=3)
        generate(task, model, make_sample(task, DIRECTIONS, seed=1), beam=3)
    finally:
        hook.remove()
    assert len(steps) > 6 and len(walks) == 2


def test_enable_lang_ids_inputs_are_accepted(built):
    _, task, model = built
    sample = make_sample(task, ["en-de", "en-gu"])
    with torch.no_grad():
        plain = model(**sample["net_input"])[0]
        out = model(
            **sample["net_input"],
            src_lang_id=torch.zeros(2, 1, dtype=torch.long),
            tgt_lang_id=torch.zeros(2, 1, dtype=torch.long),
        )[0]
    # this model has no adapters or skills: the ids are accepted and change nothing
    assert out.shape == plain.shape and torch.equal(out, plain)


def test_a_row_without_target_language_token_is_an_error(built):
    _, task, model = built
    sample = make_sample(task, ["en-de", "en-gu"])
    src = sample["net_input"]["src_tokens"].clone()
    first = src.ne(task.source_dictionary.pad()).long().argmax(1)
    src[1, first[1]] = task.source_dictionary.nspecial + 3  # an ordinary word where __xx__ should be
    with pytest.raises(HltmtInputError, match="encoder-langtok tgt"):
        model(src, sample["net_input"]["src_lengths"], sample["net_input"]["prev_output_tokens"])


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--high-resource-langs", "de,xx"], "names xx, not in the language list"),
        (["--slp-pool-size", "0"], r"must lie in \[1, 2\]"),
        (["--slp-pool-size", "3"], r"must lie in \[1, 2\]"),
        (["--encoder-langtok", "src"], "--encoder-langtok tgt or from --encoder-langtok src --decoder-langtok"),
        (["--slp-hard-prob", "1.5"], "slp-hard-prob"),
    ],
)
def test_bad_options_are_refused_before_training(data_bin, extra, message):
    with pytest.raises(HltmtConfigError, match=message):
        build(data_bin, *extra)


def test_ls_mnmt_gives_each_language_its_own_module_without_a_gate(data_bin):
    _, task, model = build(
        data_bin,
        "--high-resource-langs",
        "en,de,fr,gu,hi",
        "--slp-pool-size",
        "5",
        "--slp-language-specific",
        "--hlt-stage",
        "all",
    )
    assert model.map_by_language() == {"en": 0, "de": 1, "fr": 2, "gu": 3, "hi": 4}
    assert not any(p.requires_grad for p in model.slp_router.gate.parameters())
    task.begin_epoch(1, model)  # stage all accepts the fixed map without a stage-1 gate
    model.train()
    model.slp_router.mode = SOFT  # a fixed map routes hard whatever the draw
    sample = make_sample(task, DIRECTIONS)
    _, extra = model(**sample["net_input"])
    expected = [model.map_by_language()[d.split("-")[1]] for d in row_directions(sample)]
    assert extra["slp_module"].tolist() == expected and extra["slp_gate"] is None
    with pytest.raises(HltmtConfigError, match="set --slp-pool-size 5"):
        build(data_bin, "--high-resource-langs", "en,de,fr,gu,hi", "--slp-pool-size", "3", "--slp-language-specific")


# ---- the plugin's model under fairseq's parent task, through fairseq-generate
def test_the_parent_task_is_refused_naming_hltmt_translation(data_bin, trained):
    done = decode(data_bin, trained[0], "--encoder-langtok", "tgt", task="translation_multi_simple_epoch")
    assert_one_error_line(
        done, "--arch hltmt_transformer needs --task hltmt_translation (got --task translation_multi_simple_epoch)"
    )
    assert not hypotheses(done)


def test_the_plugin_model_and_pool_model_predicates_see_through_wrappers(data_bin, built):
    from types import SimpleNamespace

    from hltmt_plugin.models.hltmt_transformer import plugin_model, pool_model

    _, _, model = built
    wrapped = SimpleNamespace(module=SimpleNamespace(module=model))  # as fairseq's distributed wrappers hold it
    assert plugin_model(wrapped) is model and pool_model(wrapped) is model
    _, _, no_pool = build(data_bin, "--high-resource-langs", "")
    assert plugin_model(no_pool) is no_pool and pool_model(no_pool) is None
    assert plugin_model(SimpleNamespace()) is None and pool_model(None) is None


def test_every_reader_of_the_model_reads_the_routers_table(built):
    """One target -> module table (the router's ``target_modules``): a table planted apart from
    the stored map is what the forward pass, the route reporting, the map by language, the
    criterion's route counts and the export's groups all follow."""
    import copy
    from types import SimpleNamespace

    from hltmt_plugin.criterions.hltmt_cross_entropy import HltmtCrossEntropyCriterion
    from hltmt_plugin.export.ctranslate2 import group_targets

    _, task, model = built
    model = copy.deepcopy(model)
    model.slp_router.fix_map(torch.tensor([0, 0]))
    langs = model.encoder.languages.langs  # en, de, fr, gu, hi; de and fr high-resource
    assert model.slp_router.targets == langs and model.slp_router.target_modules.tolist() == [2, 0, 0, 2, 2]
    model.slp_router.target_modules = torch.tensor([2, 1, 0, 2, 2])  # not the stored map: de -> m1
    planted = {"en": "universal", "de": "m1", "fr": "m0", "gu": "universal", "hi": "universal"}
    assert model.slp_routes() == planted and model.map_by_language() == {"de": 1, "fr": 0}
    assert model.slp_route("de") == "m1" and model.route_of("en", "fr") == {"slp": "m0"}
    assert group_targets(SimpleNamespace(model=model, langs=langs)) == planted
    with pytest.raises(HltmtInputError, match="no target language 'xx'"):
        model.slp_route("xx")
    model.eval()
    sample = make_sample(task, ["en-de", "en-de", "en-fr", "de-en"])
    with torch.no_grad():
        _, extra = decoder_features(model, sample)
        _, _, log = HltmtCrossEntropyCriterion(task, sentence_avg=False, label_smoothing=0.1)(model, sample)
    expected = [{"de": 1, "fr": 0}.get(d.split("-")[1], 2) for d in ["en-de", "en-de", "en-fr", "de-en"]]
    assert extra["slp_module"].tolist() == [expected[i] for i in sample["id"].tolist()]
    assert [int(log[f"route:{k}"]) for k in ("m0", "m1", "universal")] == [1, 2, 1]
