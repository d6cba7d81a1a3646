"""Export a checkpoint the translator serves to CTranslate2: one CTranslate2 ``TransformerSpec``
per group of target languages that go through the same modules, and the manifest
(:mod:`hltmt_plugin.hub.manifest`) that says which group serves which direction.

The groups: a model without a pool (fairseq's ``transformer`` of
``translation_multi_simple_epoch``, ``hltmt_transformer`` without ``--high-resource-langs``)
is one group, ``main``. An HLT-MT or LS-MNMT model has one group per pool module that its
routing map uses (``m0``, ``m1`` ...) and ``universal`` for the other target languages: the
same encoder and decoder, with the routed module as one more decoder layer on top.

That layer is exactly the plugin's computation where CTranslate2 has the pieces for it: a
CTranslate2 decoder layer is self-attention, optional encoder attention and a feed-forward
sublayer with its layer norm; the pool module is that feed-forward sublayer. Its
self-attention is given zero weights (it adds exactly zero to the residual) and no encoder
attention. Pre-norm, the layer is then ``x + W_u(act(W_d LN(x)))``, the module itself, bit for
bit. Post-norm, the self-attention sublayer still normalizes its output, so the top decoder
layer's final layer norm is split: the top layer normalizes without scale and shift, the new
layer's first norm applies the top layer's scale and shift to that normalized vector again.
Normalizing an already normalized vector changes it by a factor ``1/sqrt(var + eps)`` with
``var = 1 - eps/(s^2 + eps)`` (``s^2`` the variance the top layer saw): a relative change of
at most ``eps/2`` (``5e-6`` with fairseq's ``eps = 1e-5``) of the hidden state, below the
rounding differences of two matrix libraries.

On disk the first group's ``model.bin`` is whole and every other group's a patch of it
(:func:`store_once`), which the serving engine rebuilds; ``whole`` (``--whole-groups``) writes
every group whole, each a folder plain ``ctranslate2.Translator`` opens. The folder's model card
is :mod:`hltmt_plugin.export.model_card`'s.

Refused, each with one line saying why: adapters and skills (modules chosen by the source
language inside the encoder layers, which a CTranslate2 encoder layer has no place for),
``--lang-tok-replacing-bos-eos`` (refused on load already), activations and
positions CTranslate2 does not have, an adaptive softmax.
"""

import os
import shutil
from typing import Dict, List, Optional

import numpy as np

from hltmt_plugin import progress
from hltmt_plugin.atomic_files import check_folder_output, write_folder
from hltmt_plugin.errors import HltmtConfigError
from hltmt_plugin.export import manifest_record, model_card
from hltmt_plugin.hub import loading, manifest  # loading registers the plugin first
from hltmt_plugin.hub.contract import import_ctranslate2
from hltmt_plugin.hub.patches import apply_patch, make_patch
from hltmt_plugin.models.hltmt_transformer import pool_model

QUANTIZATIONS = manifest.QUANTIZATIONS
ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "gelu_accurate": "GELUTanh", "gelu_fast": "GELUTanh", "swish": "SWISH"}
PAD_LOGIT = -1e9  # the output bias of the padding token: fairseq's beam search never picks it
KIND = "hltmt-export"  # the writer named in an export folder's marker


def export(
    checkpoint: str,
    out: str,
    quantization: str = "float32",
    spm: Optional[str] = None,
    data: Optional[str] = None,
    force: bool = False,
    option: str = "--out",
    whole: bool = False,
    card: Optional[dict] = None,
) -> dict:
    """Export ``checkpoint`` to the folder ``out``, written whole or not at all by
    :func:`hltmt_plugin.atomic_files.write_folder` (an earlier export replaced only with
    ``force``; never a folder of the checkpoint's inputs); returns the manifest. ``whole``: every
    group's model whole (each one a folder plain ``ctranslate2.Translator`` opens), not the first
    whole and the others as patches of it; ``card``: the model card's fields
    (:data:`hltmt_plugin.export.model_card.OPTIONS`)."""
    ct2 = import_ctranslate2()
    if quantization not in QUANTIZATIONS:
        raise HltmtConfigError(f"--quantization {quantization}: choose one of {', '.join(QUANTIZATIONS)}")
    read = model_card.read_options(card or {})
    inputs = {"--checkpoint": checkpoint, "--spm": spm, "--data": data}
    check_folder_output(out, kind=KIND, force=force, option=option, inputs=inputs)
    progress.step("reading the checkpoint")
    loaded, _ = loading.load_for_translation(checkpoint, spm, data)
    check_exportable(loaded)
    targets = group_targets(loaded)
    data_folders = str(loaded.task.args.data).split(os.pathsep)
    inputs.update({"the sentencepiece model": loaded.spm})
    inputs.update({f"the data folder ({i})" if i else "the data folder": f for i, f in enumerate(data_folders)})

    def fill(work: str) -> dict:
        models, groups = {}, sorted(set(targets.values()))
        for k, group in enumerate(groups):
            progress.step(f"writing group {group}", k + 1, len(groups))
            models[group] = f"models/{group}"
            spec = build_spec(ct2, loaded.model, None if group == "main" else group)
            vocab = vocabulary(loaded.dictionary)
            spec.register_source_vocabulary(vocab)
            spec.register_target_vocabulary(vocab)
            spec.config.decoder_start_token = "</s>"  # fairseq's decoder starts from the end-of-sentence token
            spec.config.add_source_eos = False  # the serving side gives the source exactly as fairseq builds it
            spec.validate()
            spec.optimize(quantization=quantization)
            os.makedirs(os.path.join(work, models[group]))
            spec.save(os.path.join(work, models[group]))
        patches = {} if whole else store_once(work, models)
        shutil.copyfile(loaded.spm, os.path.join(work, "spm.model"))
        loaded.dictionary.save(os.path.join(work, "dict.txt"))
        record = describe(loaded, targets, models, quantization, checkpoint, ct2.__version__)
        record["patches"] = patches
        model_card.write(work, record, loaded, checkpoint, None, read)
        progress.step("writing the manifest (every file's SHA-256)")
        manifest.write(work, record)  # its files, their digests and the record's own digest
        manifest.read(work)  # what serving will check
        return record

    return write_folder(out, fill, kind=KIND, force=force, option=option, inputs=inputs)


def store_once(work: str, models: Dict[str, str]) -> Dict[str, str]:
    """Keep the first group's model.bin whole and replace every other group's by a patch of it
    (the byte ranges that differ: the routed layer), checked to rebuild the file exactly; a
    group whose file does not line up with the first's stays whole. Returns group -> base group."""
    groups = sorted(models)
    base = groups[0]
    with open(os.path.join(work, models[base], "model.bin"), "rb") as f:
        base_bytes = f.read()
    patches = {}
    for group in groups[1:]:
        path = os.path.join(work, models[group], "model.bin")
        with open(path, "rb") as f:
            other = f.read()
        patch = make_patch(base_bytes, other)
        if patch is None or apply_patch(base_bytes, patch, path) != other:
            continue
        with open(os.path.join(work, models[group], "model.patch"), "wb") as f:
            f.write(patch)
        os.remove(path)
        patches[group] = base
    return patches


def refuse_language_modules(model, target: str, layers: str) -> None:
    """One HltmtConfigError for modules chosen by each sentence's language inside the layers
    (adapters, skills, invertible adapters), which ``layers`` (the layers of ``target``, the
    export's engine) have no place for."""
    encoder, decoder = model.encoder, model.decoder
    if getattr(encoder, "adapter_layout", None) is not None or getattr(decoder, "adapter_layout", None) is not None:
        raise HltmtConfigError(
            f"cannot export adapters to {target}: an adapter transforms a sublayer's output before its "
            f"residual connection (x + U relu(D x)), with modules chosen by each sentence's language, a step "
            f"{layers} do not have"
        )
    if getattr(encoder, "skill_layout", None) is not None:
        raise HltmtConfigError(
            f"cannot export skills to {target}: the encoder's skill modules are chosen and mixed per direction "
            f"inside its layers, which {layers} cannot do (one attention and one feed-forward sublayer)"
        )
    if getattr(decoder, "invertible_adapters", None) is not None:
        raise HltmtConfigError(
            f"cannot export invertible adapters to {target}: {layers} have no per-language embedding map"
        )


def check_exportable(loaded) -> None:
    """One HltmtConfigError naming what cannot be exported, and why."""
    model = loaded.model
    encoder, decoder = model.encoder, model.decoder
    refuse_language_modules(model, "CTranslate2", "CTranslate2's layers")
    activation = getattr(loaded.cfg.model, "activation_fn", "relu")
    if activation not in ACTIVATIONS:
        raise HltmtConfigError(f"cannot export --activation-fn {activation}: CTranslate2 has {', '.join(ACTIVATIONS)}")
    for side in (encoder, decoder):
        if side.embed_positions is None:
            raise HltmtConfigError(
                "cannot export --no-token-positional-embeddings: a CTranslate2 Transformer always adds positions"
            )
    if getattr(decoder, "adaptive_softmax", None) is not None:
        raise HltmtConfigError("cannot export an adaptive softmax: CTranslate2 has one output projection")
    if getattr(loaded.cfg.model, "cross_self_attention", False):
        raise HltmtConfigError("cannot export --cross-self-attention: CTranslate2 has no such decoder layer")


def group_targets(loaded) -> Dict[str, str]:
    """Target language -> the group (CTranslate2 model) that serves it: ``main`` without a pool,
    else its entry of the router's table, ``m<k>`` (the pool module of the routing map) or
    ``universal``."""
    model = pool_model(loaded.model)
    if model is None:
        return {lang: "main" for lang in loaded.langs}
    routes = model.slp_routes()  # the router's table by name
    return {lang: routes[lang] for lang in loaded.langs}


def vocabulary(dictionary) -> List[str]:
    """The dictionary's symbols in order (its padding symbol as CTranslate2 names padding)."""
    return ["<blank>" if i == dictionary.pad() else symbol for i, symbol in enumerate(dictionary.symbols)]


def describe(loaded, targets, models, quantization, checkpoint, version) -> dict:
    """The manifest record (without the file digests and the patches)."""
    return manifest_record.describe(
        loaded, targets, models, "ctranslate2", quantization, checkpoint, {"ctranslate2": version}
    )


def notes(written: dict) -> List[str]:
    """hltmt-export's advice on a folder written (``written``: its manifest)."""
    if len(written["models"]) > 1 and written["quantization"] == "float32":
        return [
            f"CTranslate2 holds each of the {len(written['models'])} models whole in memory (no weights shared); a "
            "pool model's recommended export is --quantization int8, about a quarter of the memory (docs/deploying.md)"
        ]
    return []


# ---- weights -> CTranslate2 specs ----------------------------------------------------------


def _array(tensor) -> np.ndarray:
    return tensor.detach().float().cpu().numpy().copy()


def _set_linear(spec, layer) -> None:
    spec.weight = _array(layer.weight)
    if layer.bias is not None:
        spec.bias = _array(layer.bias)


def _set_stacked(spec, layers) -> None:
    """One linear spec from several linears of the same input, their outputs stacked."""
    spec.weight = np.concatenate([_array(x.weight) for x in layers])
    if any(x.bias is not None for x in layers):
        spec.bias = np.concatenate(
            [_array(x.bias) if x.bias is not None else np.zeros(x.weight.shape[0], np.float32) for x in layers]
        )


def _set_norm(spec, norm, plain: bool = False) -> None:
    spec.gamma = np.ones(norm.weight.shape, np.float32) if plain else _array(norm.weight)
    spec.beta = np.zeros(norm.weight.shape, np.float32) if plain else _array(norm.bias)


def _set_attention(spec, attn, self_attention: bool) -> None:
    if self_attention:
        _set_stacked(spec.linear[0], [attn.q_proj, attn.k_proj, attn.v_proj])
    else:
        _set_linear(spec.linear[0], attn.q_proj)
        _set_stacked(spec.linear[1], [attn.k_proj, attn.v_proj])
    _set_linear(spec.linear[-1], attn.out_proj)


def _set_ffn(spec, fc1, fc2, norm) -> None:
    _set_linear(spec.linear_0, fc1)
    _set_linear(spec.linear_1, fc2)
    _set_norm(spec.layer_norm, norm)


def _positions(module, count: int) -> np.ndarray:
    """fairseq's position vectors of positions 1..count (fairseq counts from padding + 1)."""
    from fairseq.modules import SinusoidalPositionalEmbedding

    pad = module.padding_idx
    if isinstance(module, SinusoidalPositionalEmbedding):
        table = SinusoidalPositionalEmbedding.get_embedding(count + pad + 1, module.embedding_dim, pad)
    else:
        table = module.weight
    return _array(table)[pad + 1 : pad + 1 + count]


def _set_inputs(spec, side, count: int) -> None:
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = _array(side.embed_tokens.weight)
    spec.scale_embeddings = float(side.embed_scale)
    spec.position_encodings.encodings = _positions(side.embed_positions, count)
    if side.layernorm_embedding is not None:
        _set_norm(spec.layernorm_embedding, side.layernorm_embedding)


def _encoder_spec(ct2, encoder, cfg):
    from ctranslate2.specs import common_spec, transformer_spec

    pre_norm = bool(encoder.cfg.encoder.normalize_before) if hasattr(encoder, "cfg") else False
    spec = transformer_spec.TransformerEncoderSpec(
        len(encoder.layers),
        encoder.layers[0].self_attn.num_heads,
        pre_norm=pre_norm,
        activation=getattr(common_spec.Activation, ACTIVATIONS[cfg.activation_fn]),
        layernorm_embedding=encoder.layernorm_embedding is not None,
        no_final_norm=encoder.layer_norm is None,
    )
    _set_inputs(spec, encoder, encoder.max_source_positions)
    for layer_spec, layer in zip(spec.layer, encoder.layers):
        _set_attention(layer_spec.self_attention, layer.self_attn, True)
        _set_norm(layer_spec.self_attention.layer_norm, layer.self_attn_layer_norm)
        _set_ffn(layer_spec.ffn, layer.fc1, layer.fc2, layer.final_layer_norm)
    if encoder.layer_norm is not None:
        _set_norm(spec.layer_norm, encoder.layer_norm)
    return spec


def _decoder_layer(layer_spec, layer) -> None:
    _set_attention(layer_spec.self_attention, layer.self_attn, True)
    _set_norm(layer_spec.self_attention.layer_norm, layer.self_attn_layer_norm)
    _set_attention(layer_spec.attention, layer.encoder_attn, False)
    _set_norm(layer_spec.attention.layer_norm, layer.encoder_attn_layer_norm)
    _set_ffn(layer_spec.ffn, layer.fc1, layer.fc2, layer.final_layer_norm)


def _zero_attention(spec, dim: int, self_attention: bool) -> None:
    """Attention whose output projection is zero: it adds exactly zero to the residual."""
    for linear, rows in zip(spec.linear, (3 * dim, dim) if self_attention else (dim, 2 * dim, dim)):
        linear.weight = np.zeros((rows, dim), np.float32)
        linear.bias = np.zeros(rows, np.float32)


def _module_layer(layer_spec, module, top_norm, dim: int) -> None:
    """The pool module as a decoder layer: self- and encoder attention adding exactly zero,
    then the module's feed-forward sublayer. ``top_norm``: post-norm, the top decoder layer's
    final norm (its scale and shift applied by the encoder attention's norm), None pre-norm."""
    plain = type("Plain", (), {"weight": module.layer_norm.weight})
    _zero_attention(layer_spec.self_attention, dim, True)
    _zero_attention(layer_spec.attention, dim, False)
    _set_norm(layer_spec.self_attention.layer_norm, plain, plain=True)
    _set_norm(layer_spec.attention.layer_norm, top_norm if top_norm is not None else plain, plain=top_norm is None)
    _set_ffn(layer_spec.ffn, module.fc1, module.fc2, module.layer_norm)


def _decoder_spec(ct2, decoder, cfg, group: Optional[str]):
    from ctranslate2.specs import common_spec, transformer_spec

    pre_norm = bool(decoder.cfg.decoder.normalize_before)
    count = len(decoder.layers)
    final_norm = getattr(decoder, "slp_output_norm", None) if group is not None and pre_norm else decoder.layer_norm
    spec = transformer_spec.TransformerDecoderSpec(
        count + (group is not None),
        decoder.layers[0].self_attn.num_heads,
        pre_norm=pre_norm,
        activation=getattr(common_spec.Activation, ACTIVATIONS[cfg.activation_fn]),
        layernorm_embedding=decoder.layernorm_embedding is not None,
        no_final_norm=final_norm is None,
        project_in_out=decoder.project_in_dim is not None or decoder.project_out_dim is not None,
        alignment_layer=count - 1,
        alignment_heads=1,
    )
    _set_inputs(spec, decoder, decoder.max_target_positions)
    for layer_spec, layer in zip(spec.layer, decoder.layers):
        _decoder_layer(layer_spec, layer)
    if group is not None:
        module = decoder.slp.module(group)
        top = decoder.layers[-1].final_layer_norm
        if not pre_norm:
            _set_norm(spec.layer[count - 1].ffn.layer_norm, top, plain=True)
        _module_layer(spec.layer[count], module, None if pre_norm else top, decoder.output_embed_dim)
    if final_norm is not None:
        _set_norm(spec.layer_norm, final_norm)
    _set_projection(spec, decoder)
    return spec


def _set_projection(spec, decoder) -> None:
    if decoder.project_in_dim is not None or decoder.project_out_dim is not None:
        raise HltmtConfigError(
            "cannot export a decoder whose input or output dimension differs from its "
            "embedding dimension (--decoder-input-dim / --decoder-output-dim)"
        )
    projection = decoder.output_projection
    spec.projection.weight = _array(projection.weight)
    bias = _array(projection.bias) if projection.bias is not None else np.zeros(projection.weight.shape[0], np.float32)
    bias[decoder.dictionary.pad()] = PAD_LOGIT
    spec.projection.bias = bias


def build_spec(ct2, model, group: Optional[str]):
    """The CTranslate2 ``TransformerSpec`` of ``model`` for one group (None: no pool)."""
    from ctranslate2.specs import transformer_spec

    cfg = model.cfg if hasattr(model, "cfg") else None
    activation = getattr(getattr(cfg, "activation_fn", None), "value", None) or getattr(cfg, "activation_fn", "relu")

    class _Cfg:
        activation_fn = str(activation)

    encoder = _encoder_spec(ct2, model.encoder, _Cfg)
    decoder = _decoder_spec(ct2, model.decoder, _Cfg, group)
    return transformer_spec.TransformerSpec(encoder, decoder)
