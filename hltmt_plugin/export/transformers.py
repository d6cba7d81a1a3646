"""Export a checkpoint the translator serves to Hugging Face ``transformers``: stock model
classes that ``AutoModelForSeq2SeqLM.from_pretrained`` loads without ``trust_remote_code``,
the tokenizer that builds the input as training did, the search settings of fairseq's
``generate`` in ``generation_config.json``, a model card and the manifest
(:mod:`hltmt_plugin.hub.manifest`, engine ``transformers``).

Which class: fairseq's post-norm transformer (its default; the study's models) computes what
``MarianMTModel`` computes, layer for layer (attention, residual, then layer norm; no final
norm); its pre-norm transformer what ``M2M100ForConditionalGeneration`` computes (layer norm,
sublayer, residual; a final norm on each side). The weights keep their names (``self_attn``,
``encoder_attn``, ``fc1``, ``final_layer_norm`` ...); embeddings, their scaling by
``sqrt(dim)``, the decoder's tied output projection and fairseq's sinusoidal positions
(counted from ``padding_idx + 1``) are mapped exactly: Marian holds its position table as
weights, given fairseq's rows from ``padding_idx + 1`` on; M2M100 computes fairseq's table
itself.

HLT-MT and LS-MNMT: a stock class has no module chosen per target language, so, as for
CTranslate2 (:mod:`hltmt_plugin.export.ctranslate2`), each group of target languages that go
through the same modules gets its own model (``models/<group>/``), the group's pool module
(or the universal layer) as one more decoder layer whose two attention sublayers have zero
weights: exact pre-norm, and post-norm with the top layer's final norm split between the two
layers (a vector normalized again changes by a relative ``eps / 2`` at most). No code is
shipped; the price is one model in memory per group served.

The tokenizer is ``MarianTokenizer``: the sentencepiece model, the fairseq dictionary as its
vocabulary (the same ids), each language token renamed ``>>xx<<`` (Marian's language code), the
end of sentence appended: ``>>de<< text`` is ``--encoder-langtok tgt``'s input; with
``--encoder-langtok src --decoder-langtok`` the source's code goes first and the target's
token is forced first (``forced_bos_token_id``). The decoder starts from the end of sentence
as fairseq's does.

Refused, each with one line saying why: adapters and skills (modules chosen by the sentence's
languages inside the layers), an encoder and decoder of different normalization or width,
learned positions or none, ``--layernorm-embedding``, input or output projections, an
adaptive softmax, activations neither class has.
"""

import json
import os
import shutil
import time
from typing import Dict, Optional

from hltmt_plugin.atomic_files import check_folder_output, write_folder, write_text
from hltmt_plugin.errors import HltmtConfigError
from hltmt_plugin.export import manifest_record, model_card
from hltmt_plugin.export.ctranslate2 import KIND, group_targets, refuse_language_modules
from hltmt_plugin.hub import loading, manifest
from hltmt_plugin.hub.contract import import_transformers

ACTIVATIONS = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_accurate": "gelu_new",
    "gelu_fast": "gelu_new",
    "swish": "swish",
    "tanh": "tanh",
    "linear": "linear",
}
CLASSES = {"post": ("marian", "MarianMTModel"), "pre": ("m2m_100", "M2M100ForConditionalGeneration")}


def language_code(lang: str) -> str:
    """A language's token as the exported tokenizer names it (Marian's language code)."""
    return f">>{lang}<<"


def export(
    checkpoint: str,
    out: str,
    spm: Optional[str] = None,
    data: Optional[str] = None,
    force: bool = False,
    beam: int = 5,
    lenpen: float = 1.0,
    max_len: int = 200,
    card: Optional[dict] = None,
    option: str = "--out",
) -> dict:
    """Export ``checkpoint`` to the folder ``out`` (written whole or not at all); returns the manifest.
    ``beam``, ``lenpen``, ``max_len``: the search ``generate`` runs by default; ``card``: the
    model card's fields (:data:`hltmt_plugin.export.model_card.OPTIONS`)."""
    transformers = import_transformers(writes=True)
    from hltmt_plugin import progress
    from hltmt_plugin.export import tokenizers
    from hltmt_plugin.hub import arguments

    beam, lenpen, max_len = arguments.generation(beam, lenpen, max_len)
    read = model_card.read_options(card or {})
    inputs = {"--checkpoint": checkpoint, "--spm": spm, "--data": data}
    check_folder_output(out, kind=KIND, force=force, option=option, inputs=inputs)
    started = time.perf_counter()
    progress.step("reading the checkpoint")
    loaded, _ = loading.load_for_translation(checkpoint, spm, data)
    norm = check_exportable(loaded)
    targets = group_targets(loaded)
    data_folders = str(loaded.task.args.data).split(os.pathsep)
    inputs.update({"the sentencepiece model": loaded.spm})
    inputs.update({f"the data folder ({i})" if i else "the data folder": f for i, f in enumerate(data_folders)})
    groups = sorted(set(targets.values()))
    models = {"main": "."} if groups == ["main"] else {group: f"models/{group}" for group in groups}
    record = describe(loaded, targets, models, checkpoint, transformers.__version__, norm)
    chosen = tokenizers.choose(loaded, record)  # the tokenizer the model was imported with, where it can be kept
    record["language_codes"] = chosen["codes"]
    record["source"].update(tokenizer=chosen["class"], **({"tokenizer_note": chosen["note"]} if chosen["note"] else {}))
    search = {"beam": beam, "lenpen": lenpen, "max_len": max_len}

    def fill(work: str) -> dict:
        for k, (group, place) in enumerate(models.items()):
            progress.step(f"writing group {group}", k + 1, len(models))
            folder = os.path.join(work, place)
            os.makedirs(folder, exist_ok=True)
            served = sorted(lang for lang, served in targets.items() if served == group)
            codes = [chosen["codes"][lang] for lang in served]
            write_model(transformers, loaded, None if group == "main" else group, norm, folder, search, served, codes)
        if groups != ["main"]:
            write_pointer(work, targets, models)
        progress.step("writing the tokenizer and the model card")
        tokenizers.write(loaded, work, chosen)
        model_card.write(work, record, loaded, checkpoint, search, read)
        progress.step("writing the manifest (every file's SHA-256)")
        record["source"]["export_seconds"] = round(time.perf_counter() - started, 1)
        manifest.write(work, record)  # its files, their digests and the record's own digest
        return manifest.read(work)  # what serving will check

    return write_folder(out, fill, kind=KIND, force=force, option=option, inputs=inputs)


# ---- what can go ---------------------------------------------------------------------------


def check_exportable(loaded) -> str:
    """``"post"`` or ``"pre"`` (the normalization, which picks the class); one
    HltmtConfigError naming what cannot be exported, and why."""
    model = loaded.model
    encoder, decoder = model.encoder, model.decoder
    refuse_language_modules(model, "transformers", "the stock classes' layers")
    cfg = model.cfg if hasattr(model, "cfg") else loaded.cfg.model
    activation = str(
        getattr(getattr(cfg, "activation_fn", None), "value", None) or getattr(cfg, "activation_fn", "relu")
    )
    if activation not in ACTIVATIONS:
        raise HltmtConfigError(
            f"cannot export --activation-fn {activation}: the stock classes have {', '.join(ACTIVATIONS)}"
        )
    pre = {bool(encoder.cfg.encoder.normalize_before), bool(decoder.cfg.decoder.normalize_before)}
    if len(pre) != 1:
        raise HltmtConfigError(
            "cannot export an encoder and decoder of different normalization (pre-norm on one side only): "
            "MarianMTModel is post-norm on both sides, M2M100 pre-norm on both"
        )
    _check_shapes(encoder, decoder, pre == {True})
    return "pre" if pre == {True} else "post"


def _check_shapes(encoder, decoder, pre_norm: bool) -> None:
    from fairseq.modules import SinusoidalPositionalEmbedding

    for side in (encoder, decoder):
        if not isinstance(side.embed_positions, SinusoidalPositionalEmbedding):
            raise HltmtConfigError(
                "cannot export learned positions or none (--encoder-learned-pos, --no-token-positional-embeddings): "
                "MarianMTModel and M2M100 add fairseq's sinusoidal positions"
            )
        if side.layernorm_embedding is not None:
            raise HltmtConfigError(
                "cannot export --layernorm-embedding: neither MarianMTModel nor M2M100 has that norm"
            )
    if encoder.embed_tokens.embedding_dim != decoder.embed_tokens.embedding_dim:
        raise HltmtConfigError(
            "cannot export an encoder and decoder of different widths: the stock classes have one d_model"
        )
    if decoder.project_in_dim is not None or decoder.project_out_dim is not None:
        raise HltmtConfigError(
            "cannot export --decoder-input-dim / --decoder-output-dim: the stock classes have no projection"
        )
    if getattr(decoder, "adaptive_softmax", None) is not None:
        raise HltmtConfigError("cannot export an adaptive softmax: the stock classes have one output projection")
    if pre_norm and encoder.layer_norm is None:
        raise HltmtConfigError("cannot export a pre-norm encoder without its final norm: M2M100 always has one")


def describe(loaded, targets, models, checkpoint, version, norm) -> dict:
    """The manifest record (without the file digests)."""
    source = {"transformers": version, "class": CLASSES[norm][1]}
    record = manifest_record.describe(loaded, targets, models, "transformers", "float32", checkpoint, source)
    record["patches"] = {}
    record["language_codes"] = {lang: language_code(lang) for lang in loaded.langs}
    return record


# ---- weights -------------------------------------------------------------------------------


def _positions(module, count: int):
    """fairseq's position vectors of positions 1..count (fairseq counts from padding + 1)."""
    from fairseq.modules import SinusoidalPositionalEmbedding

    pad = module.padding_idx
    table = SinusoidalPositionalEmbedding.get_embedding(count + pad + 1, module.embedding_dim, pad)
    return table[pad + 1 : pad + 1 + count].float().contiguous()


def _copy(state: dict, prefix: str, module) -> None:
    for name, tensor in module.state_dict().items():
        state[f"{prefix}.{name}"] = tensor.detach().float().clone().contiguous()


def _layer_state(state: dict, prefix: str, layer, decoder: bool) -> None:
    parts = ["self_attn", "self_attn_layer_norm", "fc1", "fc2", "final_layer_norm"]
    if decoder:
        parts += ["encoder_attn", "encoder_attn_layer_norm"]
    for part in parts:
        _copy(state, f"{prefix}.{part}", getattr(layer, part))


def _plain_norm(dim: int):
    """A layer norm's weight and bias that neither scale nor shift."""
    import torch

    return torch.ones(dim), torch.zeros(dim)


def _module_layer(state: dict, prefix: str, module, top_norm, dim: int) -> None:
    """The pool module as a decoder layer: two attention sublayers adding exactly zero, then
    the module's feed-forward sublayer. ``top_norm``: post-norm, the top layer's final norm
    (its scale and shift applied by the encoder attention's norm), None pre-norm."""
    import torch

    for attn in ("self_attn", "encoder_attn"):
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            state[f"{prefix}.{attn}.{proj}.weight"] = torch.zeros(dim, dim)
            state[f"{prefix}.{attn}.{proj}.bias"] = torch.zeros(dim)
    state[f"{prefix}.self_attn_layer_norm.weight"], state[f"{prefix}.self_attn_layer_norm.bias"] = _plain_norm(dim)
    if top_norm is None:
        state[f"{prefix}.encoder_attn_layer_norm.weight"], state[f"{prefix}.encoder_attn_layer_norm.bias"] = (
            _plain_norm(dim)
        )
    else:
        _copy(state, f"{prefix}.encoder_attn_layer_norm", top_norm)
    _copy(state, f"{prefix}.fc1", module.fc1)
    _copy(state, f"{prefix}.fc2", module.fc2)
    _copy(state, f"{prefix}.final_layer_norm", module.layer_norm)


def weights(model, group: Optional[str], norm: str) -> Dict[str, object]:
    """The stock class's state dict for one group (None: no pool)."""
    import torch

    encoder, decoder = model.encoder, model.decoder
    state: Dict[str, object] = {}
    count = len(decoder.layers)
    for i, layer in enumerate(encoder.layers):
        _layer_state(state, f"model.encoder.layers.{i}", layer, False)
    for i, layer in enumerate(decoder.layers):
        _layer_state(state, f"model.decoder.layers.{i}", layer, True)
    shared = encoder.embed_tokens.weight is decoder.embed_tokens.weight
    state["model.encoder.embed_tokens.weight"] = encoder.embed_tokens.weight.detach().float().clone()
    state["model.decoder.embed_tokens.weight"] = decoder.embed_tokens.weight.detach().float().clone()
    if shared or norm == "pre":
        state["model.shared.weight"] = decoder.embed_tokens.weight.detach().float().clone()
    tied = decoder.output_projection.weight is decoder.embed_tokens.weight
    if not tied or (norm == "pre" and not shared):
        state["lm_head.weight"] = decoder.output_projection.weight.detach().float().clone()
    if norm == "post":
        size = max(encoder.max_source_positions, decoder.max_target_positions)
        state["model.encoder.embed_positions.weight"] = _positions(encoder.embed_positions, size)
        state["model.decoder.embed_positions.weight"] = _positions(decoder.embed_positions, size)
        state["final_logits_bias"] = torch.zeros(1, decoder.embed_tokens.weight.shape[0])
    else:
        _copy(state, "model.encoder.layer_norm", encoder.layer_norm)
    if group is not None:
        top = decoder.layers[-1].final_layer_norm
        prefix = f"model.decoder.layers.{count}"
        if norm == "post":
            dim = top.weight.shape[0]
            last = f"model.decoder.layers.{count - 1}.final_layer_norm"
            state[f"{last}.weight"], state[f"{last}.bias"] = _plain_norm(dim)
        _module_layer(state, prefix, decoder.slp.module(group), top if norm == "post" else None, top.weight.shape[0])
    final = getattr(decoder, "slp_output_norm", None) if group is not None else decoder.layer_norm
    if norm == "pre":
        if final is None:
            raise HltmtConfigError("cannot export a pre-norm decoder without its final norm: M2M100 always has one")
        _copy(state, "model.decoder.layer_norm", final)
    return _same_ffn_width(state, model)


def _same_ffn_width(state: dict, model) -> dict:
    """Every feed-forward sublayer of a side at the side's widest (the stock config has one
    width per side): the narrower ones padded with zero rows of fc1 and zero columns of fc2,
    which add exactly zero."""
    import torch

    for side in ("encoder", "decoder"):
        keys = [k for k in state if k.startswith(f"model.{side}.layers.") and k.endswith(".fc1.weight")]
        width = max(state[k].shape[0] for k in keys)
        for key in keys:
            extra = width - state[key].shape[0]
            if extra:
                base = key[: -len(".fc1.weight")]
                state[key] = torch.cat([state[key], torch.zeros(extra, state[key].shape[1])])
                state[f"{base}.fc1.bias"] = torch.cat([state[f"{base}.fc1.bias"], torch.zeros(extra)])
                fc2 = state[f"{base}.fc2.weight"]
                state[f"{base}.fc2.weight"] = torch.cat([fc2, torch.zeros(fc2.shape[0], extra)], dim=1)
    return state


def config_of(transformers, loaded, group: Optional[str], norm: str, state: dict):
    """The stock class's configuration."""
    model, cfg = loaded.model, loaded.cfg.model
    encoder, decoder = model.encoder, model.decoder
    d = loaded.dictionary
    width = lambda side: state[f"model.{side}.layers.0.fc1.weight"].shape[0]  # noqa: E731
    shared = encoder.embed_tokens.weight is decoder.embed_tokens.weight
    tied = decoder.output_projection.weight is decoder.embed_tokens.weight
    options = dict(
        vocab_size=len(d),
        d_model=encoder.embed_tokens.embedding_dim,
        encoder_layers=len(encoder.layers),
        decoder_layers=len(decoder.layers) + (group is not None),
        encoder_attention_heads=encoder.layers[0].self_attn.num_heads,
        decoder_attention_heads=decoder.layers[0].self_attn.num_heads,
        encoder_ffn_dim=width("encoder"),
        decoder_ffn_dim=width("decoder"),
        activation_function=ACTIVATIONS[str(getattr(cfg, "activation_fn", "relu"))],
        dropout=float(getattr(cfg, "dropout", 0.1)),
        attention_dropout=float(getattr(cfg, "attention_dropout", 0.0)),
        activation_dropout=float(getattr(cfg, "activation_dropout", 0.0) or getattr(cfg, "relu_dropout", 0.0) or 0.0),
        scale_embedding=float(encoder.embed_scale) != 1.0,
        pad_token_id=d.pad(),
        eos_token_id=d.eos(),
        bos_token_id=d.bos(),
        decoder_start_token_id=d.eos(),
        forced_eos_token_id=d.eos(),
        tie_word_embeddings=tied and (shared or norm == "post"),
    )
    if norm == "post":
        options.update(
            decoder_vocab_size=len(d),
            max_position_embeddings=max(encoder.max_source_positions, decoder.max_target_positions),
            share_encoder_decoder_embeddings=shared,
        )
        config = transformers.MarianConfig(**options)
    else:
        options["max_position_embeddings"] = max(encoder.max_source_positions, decoder.max_target_positions)
        config = transformers.M2M100Config(**options)
    config.architectures = [CLASSES[norm][1]]
    return config


def generation_config(transformers, loaded, search: dict):
    """fairseq's beam search as ``generate``'s settings: the beam and length penalty, stopping once
    ``beam`` hypotheses are finished, at most ``max_len`` tokens then the end of sentence, no end
    of sentence first, the padding token never chosen, the decoder started from the end of
    sentence."""
    d = loaded.dictionary
    return transformers.GenerationConfig(
        num_beams=search["beam"],
        length_penalty=search["lenpen"],
        early_stopping=True,
        max_new_tokens=search["max_len"] + 1,
        min_new_tokens=1,
        suppress_tokens=[d.pad()],
        decoder_start_token_id=d.eos(),
        bos_token_id=d.bos(),
        eos_token_id=d.eos(),
        pad_token_id=d.pad(),
        forced_eos_token_id=d.eos(),
    )


def write_model(transformers, loaded, group, norm, folder, search, served, codes) -> None:
    """One group's model: config.json (with ``hltmt``: the target languages it serves, ``served``,
    and their codes in the tokenizer, ``codes``), generation_config.json, model.safetensors."""
    from safetensors.torch import save_file

    state = weights(loaded.model, group, norm)
    config = config_of(transformers, loaded, group, norm, state)
    config.hltmt = {"group": group or "main", "targets": served, "codes": codes}
    config.save_pretrained(folder)
    generation_config(transformers, loaded, search).save_pretrained(folder)
    save_file(state, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})


def write_pointer(work: str, targets: dict, models: dict) -> None:
    """A pool model's folder's own config.json, which no library loads as a model: its ``model_type``
    says which subfolder serves which target language, so that ``from_pretrained`` of a model from
    the folder itself fails with that sentence (transformers names the model type it does not
    know). Its ``hltmt`` record (the subfolders and their targets) has the empty model type of
    transformers' base configuration, which ``AutoTokenizer`` reads instead of the sentence: the
    tokenizer loads from the folder without a warning about the model type."""
    served = {place: [lang for lang in targets if targets[lang] == group] for group, place in models.items()}
    sentence = "; ".join(f"subfolder='{place}' for {', '.join(langs)}" for place, langs in served.items())
    pointer = {
        "model_type": f"hltmt-pool: this folder holds one model per group of target languages, load one: {sentence}",
        "hltmt": {"model_type": "", "models": {place: langs for place, langs in served.items()}},
    }
    write_text(os.path.join(work, "config.json"), json.dumps(pointer, ensure_ascii=False, indent=1))


def write_tokenizer(loaded, work: str) -> None:
    """MarianTokenizer's files: the sentencepiece model (source and target), the dictionary as
    its vocabulary with the language tokens as language codes, and its settings, read alike by
    transformers 4 and 5 (the codes as ``additional_special_tokens``: transformers 4 refuses
    ``extra_special_tokens`` as a list)."""
    d = loaded.dictionary
    names = {loaded.languages.token(lang): language_code(lang) for lang in loaded.langs}
    vocab = {}
    for i, symbol in enumerate(d.symbols):
        vocab.setdefault(names.get(symbol, symbol), i)
    with open(os.path.join(work, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, indent=0)
    for name in ("source.spm", "target.spm"):
        shutil.copyfile(loaded.spm, os.path.join(work, name))
    d.save(os.path.join(work, "dict.txt"))  # fairseq's dictionary, as hltmt-translate reads it
    codes = [language_code(lang) for lang in loaded.langs]
    settings = {
        "tokenizer_class": "MarianTokenizer",
        "unk_token": d.unk_word,
        "eos_token": d.eos_word,
        "pad_token": d.pad_word,
        "model_max_length": int(loaded.max_source_positions),
        "separate_vocabs": False,
        "additional_special_tokens": codes,  # transformers 5 reads them as its extra_special_tokens
    }
    with open(os.path.join(work, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(settings, f, ensure_ascii=False, indent=1)
