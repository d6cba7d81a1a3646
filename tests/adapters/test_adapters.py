"""Adapters in the model: placement (each adapter sees the tensor the papers say), identity at
addition to a trained model, routing per row in mixed batches, invertibility, gradients,
beam search = full forward, the parameter report, and the errors a user gets."""

import pytest
import torch
from torch import nn

from fairseq import checkpoint_utils

from conftest import (
    DIRECTIONS,
    HIGH,
    LANGS,
    MADX,
    PAIRS,
    PLUGIN,
    assert_beam_equals_forward,
    build,
    cli,
    generate,
    make_sample,
    mixed_sample,
    randomize_adapters,
    run,
)
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.languages import ROWS, SRC
from hltmt_plugin.adapters import (
    AdapterDecoderLayer,
    AdapterEncoderLayer,
    Bottleneck,
    InvertibleAdapter,
    bottleneck_parameters,
    format_parameter_report,
    parameter_report,
)
from hltmt_plugin.modules.routing import route


@pytest.fixture(scope="module")
def madx(data_bin):
    args, task, model = build(data_bin, *MADX)
    randomize_adapters(model)
    model.eval()
    return args, task, model


# ---------------------------------------------------------------------------------------
# the modules


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


# ---------------------------------------------------------------------------------------
# placement: what each adapter sees


class Capture:
    """Forward hooks that record a module's input and output."""

    def __init__(self):
        self.seen, self.handles = {}, []

    def on(self, name, module):
        def hook(m, inputs, kwargs, output):
            first = inputs[0] if inputs else kwargs["query"]  # fairseq calls attention with query=...
            out = output[0] if isinstance(output, tuple) else output
            self.seen.setdefault(name, []).append((first.detach().clone(), out.detach().clone()))

        self.handles.append(module.register_forward_hook(hook, with_kwargs=True))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()


def run_encoder(model, task, directions=("en-de", "de-en")):
    sample = mixed_sample(task, list(directions))
    net = sample["net_input"]
    with torch.no_grad():
        model.encoder(net["src_tokens"], net["src_lengths"], src_lang_id=net["src_lang_id"])


@pytest.mark.parametrize("normalize_before", [False, True])
def test_houlsby_adapters_see_each_sublayer_output_before_the_residual_add(data_bin, normalize_before):
    extra = ["--encoder-normalize-before"] if normalize_before else []
    _, task, model = build(data_bin, "--shared-adapters", "--adapter-placement", "houlsby", *extra)
    randomize_adapters(model)
    model.eval()
    layer = model.encoder.layers[1]
    assert isinstance(layer, AdapterEncoderLayer) and set(layer.adapters.keys()) == {"self_attn", "ffn"}
    with Capture() as cap:
        cap.on("attn", layer.self_attn)
        cap.on("fc2", layer.fc2)
        cap.on("attn_adapter", layer.adapters["self_attn"].shared_adapter)
        cap.on("ffn_adapter", layer.adapters["ffn"].shared_adapter)
        cap.on("layer", layer)
        cap.on("attn_ln", layer.self_attn_layer_norm)
        cap.on("final_ln", layer.final_layer_norm)
        run_encoder(model, task)
    attn_out, fc2_out = cap.seen["attn"][0][1], cap.seen["fc2"][0][1]
    torch.testing.assert_close(cap.seen["attn_adapter"][0][0], attn_out)  # after the attention projection
    torch.testing.assert_close(cap.seen["ffn_adapter"][0][0], fc2_out)  # after the FFN
    layer_in, layer_out = cap.seen["layer"][0]
    delta = cap.seen["ffn_adapter"][0][1]
    if normalize_before:  # x + A(sublayer(LN(x))), no layer norm after
        ffn_in = cap.seen["final_ln"][0][0]
        torch.testing.assert_close(layer_out, ffn_in + fc2_out + delta, rtol=0, atol=1e-5)
    else:  # LN(res + A(sublayer)) with A(s) = s + delta(s)
        ffn_res = cap.seen["attn_ln"][0][1]
        torch.testing.assert_close(layer_out, layer.final_layer_norm(ffn_res + fc2_out + delta), rtol=0, atol=1e-5)
        attn_delta = cap.seen["attn_adapter"][0][1]
        torch.testing.assert_close(
            ffn_res, layer.self_attn_layer_norm(layer_in + attn_out + attn_delta), rtol=0, atol=1e-5
        )


def test_pfeiffer_adapter_sees_the_normed_ffn_output_and_madx_stacks_on_the_ffn_residual(data_bin):
    _, task, model = build(data_bin, "--language-adapters", "--shared-adapters", "--enable-lang-ids")
    randomize_adapters(model)
    model.eval()
    layer = model.encoder.layers[0]
    assert set(layer.adapters.keys()) == {"ffn"}  # pfeiffer: after the FFN only
    stack = layer.adapters["ffn"]
    with Capture() as cap:
        cap.on("attn_ln", layer.self_attn_layer_norm)
        cap.on("fc2", layer.fc2)
        cap.on("lang_en", stack.language_adapters["en"])
        cap.on("shared", stack.shared_adapter)
        cap.on("layer", layer)
        run_encoder(model, task, ["en-de", "en-fr"])  # every row has source en
    r = cap.seen["attn_ln"][0][1] + cap.seen["fc2"][0][1]  # the FFN block's output (its residual)
    h = layer.final_layer_norm(r)  # ... after its layer norm
    torch.testing.assert_close(cap.seen["lang_en"][0][0], h, rtol=0, atol=1e-5)  # MAD-X eq. 1: LA(h, r)
    la = cap.seen["lang_en"][0][1] + r
    torch.testing.assert_close(cap.seen["shared"][0][0], la, rtol=0, atol=1e-5)  # eq. 2: TA(LA, r)
    ta = cap.seen["shared"][0][1] + r
    torch.testing.assert_close(cap.seen["layer"][0][1], layer.final_layer_norm(ta), rtol=0, atol=1e-5)


def test_decoder_houlsby_adapters_skip_cross_attention_and_invertible_runs_on_the_first_layer_input(data_bin):
    _, task, model = build(
        data_bin,
        "--shared-adapters",
        "--decoder-adapters",
        "--adapter-placement",
        "houlsby",
        "--invertible-adapters",
        "--enable-lang-ids",
    )
    randomize_adapters(model)
    model.eval()
    layer = model.decoder.layers[0]
    assert isinstance(layer, AdapterDecoderLayer) and set(layer.adapters.keys()) == {"self_attn", "ffn"}
    sample = mixed_sample(task, ["en-de", "en-de"])
    with Capture() as cap:
        cap.on("self_attn", layer.self_attn)
        cap.on("cross_attn", layer.encoder_attn)
        cap.on("attn_adapter", layer.adapters["self_attn"].shared_adapter)
        cap.on("ffn_adapter", layer.adapters["ffn"].shared_adapter)
        cap.on("inv_de", model.decoder.invertible_adapters.adapters["de"])
        cap.on("layer", layer)
        cap.on("fc2", layer.fc2)
        with torch.no_grad():
            model(**sample["net_input"])
    torch.testing.assert_close(cap.seen["attn_adapter"][0][0], cap.seen["self_attn"][0][1])
    torch.testing.assert_close(cap.seen["ffn_adapter"][0][0], cap.seen["fc2"][0][1])
    assert len(cap.seen["attn_adapter"]) == 1  # none after the cross-attention
    # the first layer computes on A_de(embedding layer output): its self-attention (post-norm) sees it
    torch.testing.assert_close(cap.seen["self_attn"][0][0], cap.seen["inv_de"][0][1])
    assert not torch.allclose(cap.seen["inv_de"][0][0], cap.seen["inv_de"][0][1])


def test_the_target_languages_inverse_runs_between_the_slp_and_the_tied_output_projection(madx):
    _, task, model = madx
    assert model.decoder.output_projection.weight is model.decoder.embed_tokens.weight
    sample = mixed_sample(task)
    with Capture() as cap:
        cap.on("slp", model.decoder.slp)
        cap.on("projection", model.decoder.output_projection)
        with torch.no_grad():
            model(**sample["net_input"])
    slp_out, projected_in = cap.seen["slp"][0][1], cap.seen["projection"][0][0]  # B x T x C
    adapters = model.decoder.invertible_adapters.adapters
    for b, i in enumerate(sample["id"].tolist()):
        tgt = DIRECTIONS[i].split("-")[1]
        torch.testing.assert_close(projected_in[b], adapters[tgt].inverse(slp_out[b]), rtol=1e-5, atol=1e-5)
        assert not torch.allclose(projected_in[b], slp_out[b], atol=1e-3)


def test_only_the_chosen_layers_get_adapters(data_bin):
    _, _, model = build(
        data_bin, "--shared-adapters", "--adapter-layers", "1", "--decoder-adapters", "--decoder-adapter-layers", "0"
    )
    assert len(model.encoder.layers[0].adapters) == 0 and len(model.encoder.layers[1].adapters) == 1
    assert len(model.decoder.layers[0].adapters) == 1 and len(model.decoder.layers[1].adapters) == 0


# ---------------------------------------------------------------------------------------
# identity when added, routing per row


def test_a_trained_model_gives_the_same_outputs_right_after_adapters_are_added(data_bin, trained):
    ckpt, _ = trained
    state = checkpoint_utils.load_checkpoint_to_cpu(ckpt)["model"]
    _, task, base = build(data_bin)
    base.load_state_dict(state)
    args, _, model = build(data_bin, *MADX)
    model.load_state_dict(state, strict=True, model_cfg=args)  # the missing adapter weights start at identity
    base.eval()
    model.eval()
    sample = mixed_sample(task)
    with torch.no_grad():
        expected = base(**sample["net_input"])[0]
        got = model(**sample["net_input"])[0]
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


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


# ---------------------------------------------------------------------------------------
# generation


@pytest.mark.parametrize(
    "extra", [[], ["--encoder-normalize-before", "--decoder-normalize-before", "--adapter-placement", "houlsby"]]
)
def test_beam_search_scores_equal_a_full_forward_pass_with_adapters(data_bin, extra):
    _, task, model = build(data_bin, *MADX, *extra)
    randomize_adapters(model, scale=0.2)
    model.eval()
    sample = mixed_sample(task, seed=3)
    checked = assert_beam_equals_forward(task, model, sample, beam=4, with_lang_ids=True)
    assert checked == len(DIRECTIONS) * 4


def test_beam_search_makes_each_routing_plan_once_per_search(data_bin, monkeypatch):
    """Source adapters: one plan per encoder pass; target adapters and the SLP: one plan each
    for the whole search, carried with the beams (not one per layer and token)."""
    import hltmt_plugin.modules.routing as routing

    _, task, model = build(data_bin, *MADX)
    model.eval()
    made = []
    init = routing.RoutePlan.__init__
    monkeypatch.setattr(routing.RoutePlan, "__init__", lambda self, ids: made.append(ids.tolist()) or init(self, ids))
    sample = mixed_sample(task, ["en-de"] * 4)
    hypos = generate(task, model, sample, beam=4)
    assert len(hypos) == 4
    en, de = task.langs.index("en"), task.langs.index("de")
    assert sorted(made) == sorted([[en] * 4, [de] * 16, [model.routing_map()["de"]] * 16])


def test_decoding_a_single_source_language_needs_no_lang_ids(data_bin):
    _, task, model = build(data_bin, "--language-adapters", "-s", "de", "-t", "en")  # as fairseq-generate builds it
    randomize_adapters(model)
    model.eval()
    sample = make_sample(task, ["de-en", "de-en"])  # no src_lang_id, as fairseq-interactive batches
    net = sample["net_input"]
    with torch.no_grad():
        out = model.encoder(net["src_tokens"], net["src_lengths"])
        explicit = model.encoder(
            net["src_tokens"],
            net["src_lengths"],
            src_lang_id=torch.full((2, 1), task.data_manager.lang_dict.index("de")),
        )
    assert out[ROWS][0][:, SRC].tolist() == [task.langs.index("de")] * 2
    assert torch.equal(out["encoder_out"][0], explicit["encoder_out"][0])


# ---------------------------------------------------------------------------------------
# the report and the errors


def test_parameter_report_counts_what_each_language_adds(madx):
    _, task, model = madx
    report = parameter_report(model)
    d, layers = 128, 2
    lang = bottleneck_parameters(d, d // 2) * layers  # pfeiffer: one per layer
    inv = 2 * bottleneck_parameters(d // 2, d // 4)
    for counts in report["per_language"].values():
        assert counts == {
            "encoder language": lang,
            "decoder language": lang,
            "encoder invertible": inv,
            "decoder invertible": inv,
        }
    assert report["shared"] == 2 * layers * bottleneck_parameters(d, d // 16)
    assert report["base"] == sum(p.numel() for n, p in model.named_parameters() if "adapter" not in n)
    lines = format_parameter_report(report)
    per = 2 * lang + 2 * inv
    assert f"per language ({','.join(task.langs)}): +{per:,} ({100.0 * per / report['base']:.2f}%)" in lines[1]


def test_a_sentence_without_a_source_language_is_an_error(madx):
    _, task, model = madx
    sample = make_sample(task, ["en-de", "gu-en"])  # no src_lang_id
    with pytest.raises(HltmtInputError, match="--enable-lang-ids"):
        model(**sample["net_input"])


@pytest.mark.parametrize("direction", ["en-gu", "gu-en"])
def test_a_language_without_adapters_is_an_error_naming_it(data_bin, direction):
    _, task, model = build(data_bin, *MADX, "--adapter-langs", "en,de,fr")
    sample = mixed_sample(task, ["en-de", direction])
    with pytest.raises(HltmtInputError, match="language 'gu' .* no (language|invertible) adapter for 'gu'"):
        model(**sample["net_input"])
    generate_sample = mixed_sample(task, [direction])
    with pytest.raises(HltmtInputError, match="'gu'"):
        generate(task, model, generate_sample, beam=2)


SMALL_BASE = [
    "--arch",
    "hltmt_transformer",
    "--encoder-layers",
    "1",
    "--decoder-layers",
    "1",
    "--encoder-embed-dim",
    "32",
    "--decoder-embed-dim",
    "32",
    "--encoder-ffn-embed-dim",
    "32",
    "--decoder-ffn-embed-dim",
    "32",
    "--encoder-attention-heads",
    "2",
    "--decoder-attention-heads",
    "2",
]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--language-adapters"], "add --enable-lang-ids"),
        (["--invertible-adapters", "--enable-lang-ids", *SMALL_BASE], "add --share-decoder-input-output-embed"),
        (["--shared-adapters", "--adapter-layers", "0,2"], r"names layer\(s\) 2; this model has layers 0..1"),
        (["--shared-adapters", "--adapter-langs", "en,xx"], "--adapter-langs names xx"),
        (["--decoder-adapters"], "add --language-adapters and/or --shared-adapters"),
        (["--shared-adapters", "--checkpoint-activations"], "drop --checkpoint-activations"),
        (["--shared-adapters", "--shared-adapter-reduction-factor", "0"], "must be positive"),
        (["--shared-adapters", "--adapter-placement", "foo"], "must be houlsby or pfeiffer, got foo"),
    ],
)
def test_bad_adapter_options_are_refused_before_training(data_bin, extra, message):
    with pytest.raises(HltmtConfigError, match=message):
        build(data_bin, *extra)


def test_a_language_of_the_pairs_without_adapters_is_refused_before_the_first_update(data_bin, tmp_path):
    """Stage high trains en-de,en-fr,de-en; gu (a source of stage all) has no adapter: refused
    at the start, not after stage high (issue 14)."""
    done = run(
        [
            cli("fairseq-train"),
            data_bin,
            "--user-dir",
            PLUGIN,
            "--task",
            "hltmt_translation",
            "--arch",
            "hltmt_transformer_tiny",
            "--langs",
            LANGS,
            "--lang-pairs",
            PAIRS,
            "--encoder-langtok",
            "tgt",
            "--high-resource-langs",
            HIGH,
            "--slp-pool-size",
            "2",
            "--cpu",
            "--language-adapters",
            "--enable-lang-ids",
            "--adapter-langs",
            "en,de,fr",
            "--high-stage-updates",
            "3",
            "--max-update",
            "6",
            "--optimizer",
            "adam",
            "--lr",
            "1e-3",
            "--max-tokens",
            "1000",
            "--save-dir",
            str(tmp_path / "s"),
        ]
    )
    assert done.returncode != 0
    assert "hltmt_plugin: error: --adapter-langs (en,de,fr) leaves out gu" in done.stderr, done.stderr[-1500:]
    assert "num_updates" not in done.stdout + done.stderr


def test_adapters_off_leave_the_model_as_it_was(data_bin):
    _, _, model = build(data_bin)
    assert not any("adapter" in n for n in model.state_dict())
    assert type(model.encoder.layers[0]).__name__ == "TransformerEncoderLayerBase"
    assert type(model.decoder).__name__ == "HltmtTransformerDecoder"
