"""The adapter modules (hltmt_plugin/adapters/modules.py): the bottleneck and the invertible
(NICE) adapter, their sizes against MAD-X, and the per-language collections routed per row in
mixed batches (each row alone, the source language choosing the encoder's adapters, one route
call per site, gradients, one routing plan per beam search, a language without adapters)."""

import pytest
import torch
from torch import nn

from adapters_common import madx_model
from conftest import DIRECTIONS, MADX, build, generate, mixed_sample, randomize_adapters
from hltmt_plugin.adapters import Bottleneck, InvertibleAdapter, bottleneck_parameters
from hltmt_plugin.errors import HltmtInputError
from hltmt_plugin.routing import route

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


@pytest.fixture(scope="module")
def madx(data_bin):
    return madx_model(data_bin)


def test_bottleneck_starts_at_zero_and_has_houlsbys_parameter_count():
    adapter = Bottleneck(16, 4)
    assert sum(p.numel() for p in adapter.parameters()) == bottleneck_parameters(16, 4) == 2 * 4 * 16 + 16 + 4
    assert torch.equal(adapter(torch.randn(3, 16)), torch.zeros(3, 16))


def test_invertible_adapter_is_nice_coupling_with_exact_inverse():
    torch.manual_seed(0)
    inv = InvertibleAdapter(8, 2)
    for p in inv.parameters():
        nn.init.normal_(p, std=0.5)
    e = torch.randn(5, 8)
    o = inv(e)
    e1, e2 = e[:, :4], e[:, 4:]
    o1 = e1 + inv.f(e2)
    torch.testing.assert_close(o, torch.cat([o1, e2 + inv.g(o1)], dim=-1))
    assert not torch.allclose(o, e)
    torch.testing.assert_close(inv.inverse(o), e, rtol=0, atol=1e-5)


def test_invertible_adapters_of_the_model_invert_for_every_language(madx):
    _, task, model = madx
    for side in (model.encoder, model.decoder):
        adapters = side.invertible_adapters.adapters
        assert list(adapters.keys()) == task.langs
        for lang, adapter in adapters.items():
            x = torch.randn(4, 3, side.embed_tokens.embedding_dim)  # like an embedding layer output
            y = adapter(x)
            assert (y - x).abs().max() > 0.1, lang  # the adapter does something ...
            torch.testing.assert_close(adapter.inverse(y), x, rtol=0, atol=1e-5)  # ... and undoes it


def test_adapter_sizes_of_xlmr_base_reproduce_madx_table_5():
    """MAD-X table 5 (XLM-R base, d 768, 12 layers; weights without biases): 8.25M per
    language, 7.96M without invertible adapters, 0.88M for the task adapters alone."""
    from hltmt_plugin.adapters import AdapterStack, InvertibleAdapters

    def weights(module):
        return sum(p.numel() for p in module.parameters() if p.dim() == 2)

    language = sum(weights(AdapterStack(768, 384, ["xx"], None)) for _ in range(12))
    shared = sum(weights(AdapterStack(768, None, [], 48)) for _ in range(12))
    invertible = weights(InvertibleAdapters(768, 192, ["xx"]))
    assert abs((language + invertible + shared) / 1e6 - 8.25) < 0.01
    assert abs((language + shared) / 1e6 - 7.96) < 0.01
    assert abs(shared / 1e6 - 0.88) < 0.01


def test_each_row_of_a_mixed_batch_equals_that_row_alone(madx):
    _, task, model = madx
    sample = mixed_sample(task, seed=4)
    net = sample["net_input"]
    with torch.no_grad():
        batch_out = model(**net)[0]
    pad = task.source_dictionary.pad()
    for b in range(len(DIRECTIONS)):
        src = net["src_tokens"][b : b + 1]
        src = src[:, src.ne(pad).any(0)]  # the row without the batch's padding
        with torch.no_grad():
            alone = model(
                src, src.ne(pad).sum(1), net["prev_output_tokens"][b : b + 1], src_lang_id=net["src_lang_id"][b : b + 1]
            )[0]
        torch.testing.assert_close(batch_out[b : b + 1], alone, rtol=0, atol=1e-4)


def test_the_source_language_id_chooses_the_encoder_adapters_of_that_row_only(madx):
    _, task, model = madx
    sample = mixed_sample(task)
    net = dict(sample["net_input"])
    with torch.no_grad():
        out = model.encoder(net["src_tokens"], net["src_lengths"], src_lang_id=net["src_lang_id"])["encoder_out"][0]
        other = net["src_lang_id"].clone()
        other[2] = task.data_manager.lang_dict.index("hi")
        changed = model.encoder(net["src_tokens"], net["src_lengths"], src_lang_id=other)["encoder_out"][0]
    diff = (out - changed).abs().amax(dim=(0, 2))
    assert diff[2] > 1e-3 and torch.all(diff[[0, 1, 3, 4, 5]] == 0)


def test_language_adapters_route_through_the_routing_primitive(madx, monkeypatch):
    _, task, model = madx
    calls = []
    import hltmt_plugin.adapters.modules as adapters

    monkeypatch.setattr(
        adapters,
        "route",
        lambda x, plan, fns, *a, dim=0: calls.append(plan.ids.clone()) or route(x, plan, fns, *a, dim=dim),
    )
    sample = mixed_sample(task)
    with torch.no_grad():
        model(**sample["net_input"])
    langs = task.langs
    src = [langs.index(DIRECTIONS[i].split("-")[0]) for i in sample["id"].tolist()]
    tgt = [langs.index(DIRECTIONS[i].split("-")[1]) for i in sample["id"].tolist()]
    assert [c.tolist() for c in calls] == [src] * 3 + [tgt] * 4  # enc: inv + 2 layers; dec: inv + 2 layers + inverse


def test_gradients_reach_only_the_adapters_of_the_batchs_languages(data_bin):
    _, task, model = build(data_bin, *MADX)
    randomize_adapters(model)  # (at identity, the shared adapter on top passes no gradient down: MAD-X eq. 2)
    model.train()
    sample = mixed_sample(task, ["en-de", "en-fr"])  # sources: en only; targets de, fr
    model.zero_grad(set_to_none=True)
    model(**sample["net_input"])[0].sum().backward()
    for name, p in model.named_parameters():
        if ".language_adapters." in name and name.endswith("up.weight"):
            lang = name.split(".language_adapters.")[1].split(".")[0]
            side = name.split(".")[0]
            expected = lang in ("en",) if side == "encoder" else lang in ("de", "fr")
            assert (p.grad is not None and p.grad.abs().sum() > 0) == expected, name
    assert model.encoder.layers[0].adapters["ffn"].shared_adapter.up.weight.grad.abs().sum() > 0


def test_beam_search_makes_each_routing_plan_once_per_search(data_bin, monkeypatch):
    """Source adapters: one plan per encoder pass; target adapters and the SLP: one plan each
    for the whole search, carried with the beams (not one per layer and token)."""
    import hltmt_plugin.routing as routing

    _, task, model = build(data_bin, *MADX)
    model.eval()
    made = []
    init = routing.RoutePlan.__init__
    monkeypatch.setattr(routing.RoutePlan, "__init__", lambda self, ids: made.append(ids.tolist()) or init(self, ids))
    sample = mixed_sample(task, ["en-de"] * 4)
    hypos = generate(task, model, sample, beam=4)
    assert len(hypos) == 4
    en, de = task.langs.index("en"), task.langs.index("de")
    assert sorted(made) == sorted([[en] * 4, [de] * 16, [model.map_by_language()["de"]] * 16])


@pytest.mark.parametrize("direction", ["en-gu", "gu-en"])
def test_a_language_without_adapters_is_an_error_naming_it(data_bin, direction):
    _, task, model = build(data_bin, *MADX, "--adapter-langs", "en,de,fr")
    sample = mixed_sample(task, ["en-de", direction])
    with pytest.raises(HltmtInputError, match="language 'gu' .* no (language|invertible) adapter for 'gu'"):
        model(**sample["net_input"])
    generate_sample = mixed_sample(task, [direction])
    with pytest.raises(HltmtInputError, match="'gu'"):
        generate(task, model, generate_sample, beam=2)
