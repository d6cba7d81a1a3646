"""The SLP on the decoder's top (hltmt_plugin/pool/head.py), on a small host that has what a
fairseq decoder hands it: its modules under the names a checkpoint holds, the pre-norm final
layer norm moved above the pool, the router handed the rows' target languages and the embedding
table, a hard step's plan kept in the pass's rows, and a checkpoint's pool read for the host
(refused without a pool; started as the identity from a plain transformer's)."""

from types import SimpleNamespace

import pytest
import torch
from fairseq.data import Dictionary
from fairseq.modules import LayerNorm
from torch import nn

from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.languages import LanguageTable
from hltmt_plugin.pool.head import PoolHead, upgrade_pool_state
from hltmt_plugin.pool.router import HARD, PLAN, SOFT
from hltmt_plugin.routing import PassRows

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

LANGS = ["en", "de", "fr", "gu"]
HIGH = ["fr", "de"]  # the map's order is not --langs'


class Host(nn.Module):
    """What PoolHead reads of a fairseq decoder."""

    def __init__(self, pre_norm=False, project_out_dim=None):
        super().__init__()
        self.dictionary = Dictionary()
        for word in ["a", "b", *(f"__{lang}__" for lang in LANGS)]:
            self.dictionary.add_symbol(word)
        self.embed_tokens = nn.Embedding(len(self.dictionary), 16)
        self.layers = nn.ModuleList([nn.Identity(), nn.Identity()])
        self.layer_norm = LayerNorm(16) if pre_norm else None
        self.project_out_dim, self.output_embed_dim = project_out_dim, 16
        self.rows = PassRows("decoder")


def install(pre_norm=False, high=HIGH, **host):
    torch.manual_seed(0)
    decoder = Host(pre_norm, **host)
    cfg = SimpleNamespace(
        decoder=SimpleNamespace(normalize_before=pre_norm, ffn_embed_dim=32),
        activation_fn="relu",
        dropout=0.0,
        activation_dropout=0.0,
    )
    slp_cfg = SimpleNamespace(slp_hidden_dim=None, slp_pool_size=2, slp_hard_prob=0.5)
    head = PoolHead.install(decoder, cfg, slp_cfg, high)
    if head is not None:
        head.set_languages(LanguageTable(LANGS, decoder.dictionary, "multilingual"))
    return decoder, head


def record(*targets):
    """A record (source, target) of rows going from en to each of ``targets``."""
    return torch.tensor([[0, LANGS.index(t)] for t in targets])


def test_the_head_installs_its_modules_on_the_decoder_under_the_checkpoints_names():
    decoder, head = install()
    assert decoder.slp is head.pool and decoder.slp_router is head.router and decoder.slp_output_norm is None
    assert {k.split(".")[0] for k in decoder.state_dict()} == {"embed_tokens", "slp", "slp_router"}
    assert decoder.rows.ids_of == {}  # the router keeps its plan in the rows itself: no callback defined there
    fr, de = (decoder.dictionary.index(f"__{lang}__") for lang in HIGH)
    assert head.router.high_tokens.tolist() == [fr, de] and head.router.high_of_lang.tolist() == [-1, 1, 0, -1]


def test_pre_norm_the_decoders_final_layer_norm_moves_above_the_pool():
    decoder, head = install(pre_norm=True)
    assert decoder.layer_norm is None and head.output_norm is decoder.slp_output_norm is not None
    with pytest.raises(HltmtConfigError, match="--decoder-output-dim different from --decoder-embed-dim"):
        install(pre_norm=True, project_out_dim=nn.Linear(16, 8))
    install(pre_norm=False, project_out_dim=nn.Linear(16, 8))  # post-norm: no final layer norm to move


def test_without_high_resource_languages_no_head_and_no_modules():
    decoder, head = install(high=[])
    assert head is None and decoder.slp is None and decoder.slp_router is None and decoder.slp_output_norm is None
    assert list(decoder.state_dict()) == ["embed_tokens.weight"] and decoder.rows.ids_of == {}
    with pytest.raises(HltmtConfigError, match="not supported by the SLP"):  # checked with or without a pool
        install(pre_norm=True, high=[], project_out_dim=nn.Linear(16, 8))


def test_a_hard_pass_routes_each_row_by_its_target_and_keeps_its_plan_in_the_pass():
    decoder, head = install()
    head.router.train()
    head.router.mode = HARD
    x, rows = torch.randn(4, 3, 16), record("de", "gu", "fr", "de")
    with decoder.rows.use(rows):
        out, extra = head(x, rows, decoder.rows)
        assert decoder.rows.plans[PLAN].ids is extra["slp_module"]  # the pass's plan, made once
        again, _ = head(x, rows, decoder.rows)
    by_lang = head.router.map_by_language(decoder.embed_tokens.weight)
    expected = [by_lang["de"], 2, by_lang["fr"], by_lang["de"]]  # gu: the universal module (2)
    assert extra["slp_module"].tolist() == expected and extra["slp_gate"] is None
    every = [*head.pool.pool, head.pool.universal]
    torch.testing.assert_close(out, torch.stack([every[k](x[b]) for b, k in enumerate(expected)]), rtol=0, atol=1e-6)
    assert torch.equal(again, out) and int(head.router.gate_steps) == 2


def test_a_soft_pass_mixes_the_pool_by_the_gate_over_the_target_tokens_rows():
    decoder, head = install(pre_norm=True)
    head.router.train()
    head.router.mode = SOFT
    x, rows = torch.randn(2, 3, 16), record("fr", "en")
    with decoder.rows.use(rows):
        out, extra = head(x, rows, decoder.rows)
        assert decoder.rows.plans == {}  # a soft step makes no plan
    table = decoder.embed_tokens.weight
    probs = torch.softmax(head.router.gate(table[head.router.high_tokens]), dim=-1)
    torch.testing.assert_close(extra["slp_gate"], probs)
    mixed = sum(probs[0, t] * head.pool.pool[t](x[0]) for t in range(2))
    expected = head.output_norm(torch.stack([mixed, head.pool.universal(x[1])]))
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)


def test_fixing_the_map_by_the_gate_and_reading_it_by_language():
    decoder, head = install()
    gate = head.gate_probs()
    assert gate.shape == (2, 2) and head.map_by_language() == dict(zip(HIGH, gate.argmax(-1).tolist()))
    assert head.fix_map() == dict(zip(HIGH, gate.argmax(-1).tolist())) and head.router.map_is_fixed
    with torch.no_grad():
        decoder.embed_tokens.weight.normal_()  # the gate's input moves; the fixed map stays
    assert head.map_by_language() == dict(zip(HIGH, gate.argmax(-1).tolist()))


def test_a_checkpoints_pool_is_refused_by_a_decoder_without_one():
    _, head = install()
    state = {f"decoder.{k}": v for k, v in head.pool.state_dict().items()}
    for key in ("decoder.slp.pool.0.fc1.weight", "decoder.slp_router.gate.weight"):
        with pytest.raises(HltmtInputError, match="has an HLT-MT pool and these options build none"):
            upgrade_pool_state(None, {key: torch.zeros(1)}, "decoder")
    upgrade_pool_state(None, state, "decoder")  # (keys of the pool's own, not under slp.: nothing to refuse)


def test_a_plain_transformers_checkpoint_starts_the_pool_as_the_identity():
    decoder, head = install()
    top = {"decoder.layers.1.final_layer_norm.weight": torch.full((16,), 3.0)}
    top["decoder.layers.1.final_layer_norm.bias"] = torch.full((16,), -1.0)
    state = dict(top)
    upgrade_pool_state(head, state, "decoder")
    for k, module in enumerate([*head.pool.pool, head.pool.universal]):
        name = f"decoder.slp.pool.{k}." if k < 2 else "decoder.slp.universal."
        assert not state[name + "fc2.weight"].any() and not state[name + "fc2.bias"].any()
        assert torch.equal(state[name + "fc1.weight"], module.fc1.weight)
        assert torch.equal(state[name + "layer_norm.weight"], top["decoder.layers.1.final_layer_norm.weight"])
        assert torch.equal(state[name + "layer_norm.bias"], top["decoder.layers.1.final_layer_norm.bias"])
    assert torch.equal(state["decoder.slp_router.gate.weight"], head.router.gate.weight)
    kept = {**state, "decoder.slp.pool.0.fc2.weight": torch.ones(16, 32)}
    upgrade_pool_state(head, kept, "decoder")  # a checkpoint with a pool is its own
    assert kept["decoder.slp.pool.0.fc2.weight"].eq(1).all()
    decoder, head = install(pre_norm=True)
    state = {"layer_norm.weight": torch.full((16,), 2.0), "layer_norm.bias": torch.zeros(16)}
    upgrade_pool_state(head, state, "")
    assert "layer_norm.weight" not in state and state["slp_output_norm.weight"].eq(2).all()
    assert state["slp.universal.layer_norm.weight"].eq(1).all()  # pre-norm: the pool's norms stay fresh
