"""Initialise an ``hltmt_transformer`` from a fairseq RoBERTa-family checkpoint (XLM-R).

``--pretrained-xlmr-checkpoint PATH/model.pt`` (with the checkpoint's ``dict.txt`` beside it)
copies into the encoder:

- the embedding rows of every token the two vocabularies share, matched by the token's
  string (the language tokens ``__xx__`` and any piece unknown to the pretrained model keep
  their initialisation; the counts are logged);
- the learned positions, row for row (a model with more positions keeps its initialisation
  for the rest; one with fewer takes the first rows);
- the embedding layer norm and the layers one to one (the first N pretrained layers for
  an N-layer encoder).

With ``--pretrained-xlmr-decoder`` each decoder layer i also takes pretrained layer i's
self-attention, FFN and their layer norms (the cross-attention stays as initialised), and a
decoder embedding table that is not shared with the encoder takes the same rows, as in
XLM-T-style initialisation. Nothing is downloaded: the user passes the file.

The pretrained encoder is post-norm, with learned positions, a layer norm on the embeddings,
unscaled embeddings and GELU; a model built otherwise is refused with the options to add,
and so is any weight whose shape does not fit (all mismatched keys are listed).
"""

import logging
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
from fairseq.data import Dictionary
from torch import Tensor

from hltmt_plugin.compat.safe_loading import load_state
from hltmt_plugin.config import OptionGroup
from hltmt_plugin.errors import HltmtConfigError

logger = logging.getLogger(__name__)

PREFIXES = ("encoder.sentence_encoder.", "decoder.sentence_encoder.")  # fairseq RoBERTa, old releases
LAYER_PARTS_FOR_DECODER = ("self_attn.", "self_attn_layer_norm.", "fc1.", "fc2.", "final_layer_norm.")


@dataclass
class PretrainedConfig(OptionGroup):
    pretrained_xlmr_checkpoint: Optional[str] = field(
        default=None,
        metadata={
            "help": "initialise the encoder from this fairseq RoBERTa / XLM-R model.pt "
            "(its dict.txt must lie beside it)",
            "path": "read-file",
        },
    )
    pretrained_xlmr_decoder: bool = field(
        default=False,
        metadata={
            "help": "also initialise each decoder layer's self-attention and FFN from the "
            "pretrained layer of the same index"
        },
    )


def _encoder_state(path: str) -> Dict[str, Tensor]:
    if not os.path.isfile(path):
        raise HltmtConfigError(f"--pretrained-xlmr-checkpoint {path} does not exist")
    state = load_state(path).get("model", {})
    for prefix in PREFIXES:
        found = {}
        for key, value in state.items():
            if key.startswith(prefix):
                key = key[len(prefix) :]
                if key.startswith("emb_layer_norm."):  # the name in older releases
                    key = "layernorm_embedding." + key[len("emb_layer_norm.") :]
                found[key] = value
        if found:
            return found
    raise HltmtConfigError(f"{path} holds no RoBERTa encoder (no key starts with {' or '.join(PREFIXES)})")


def _check_settings(model, pretrained: Dict[str, Tensor]):
    enc = model.encoder
    needed = []
    if "embed_positions.weight" in pretrained and not (
        enc.embed_positions is not None and hasattr(enc.embed_positions, "weight")
    ):
        needed.append("--encoder-learned-pos")
    if "layernorm_embedding.weight" in pretrained and enc.layernorm_embedding is None:
        needed.append("--layernorm-embedding")
    if enc.embed_scale != 1.0:
        needed.append("--no-scale-embedding")
    if model.args.activation_fn != "gelu":
        needed.append("--activation-fn gelu")
    if model.args.encoder_normalize_before:
        needed.append("no --encoder-normalize-before (the pretrained encoder is post-norm)")
    if needed:
        raise HltmtConfigError(
            "--pretrained-xlmr-checkpoint: the model must be built like the pretrained encoder: "
            "add " + " ".join(needed) + " (or use --arch hltmt_transformer_xlmr_base)"
        )


def _copy_rows(target: Tensor, source: Tensor, ours: Dictionary, theirs: Dictionary) -> int:
    pairs = [(i, theirs.indices[ours[i]]) for i in range(len(ours)) if ours[i] in theirs.indices]
    rows = torch.tensor([i for i, _ in pairs])
    target.data[rows] = source[torch.tensor([j for _, j in pairs])].to(target.dtype)
    return len(pairs)


def _encoder_copies(model, pretrained: Dict[str, Tensor], problems: List[str]) -> Dict[str, Tensor]:
    """Our encoder key -> the pretrained tensor to copy into it (embeddings apart)."""
    ours = model.encoder.state_dict()
    copies = {}
    for key, value in pretrained.items():
        if key.startswith(("embed_tokens.", "embed_positions.")) or key not in ours:
            continue
        if ours[key].shape != value.shape:
            problems.append(f"encoder.{key}: model {tuple(ours[key].shape)} vs checkpoint {tuple(value.shape)}")
        else:
            copies[key] = value
    return copies


def _decoder_copies(model, pretrained: Dict[str, Tensor], n_pre: int, problems: List[str]) -> Dict[str, Tensor]:
    """Our decoder key -> the pretrained layer tensor (self-attention and FFN of the same index)."""
    ours = model.decoder.state_dict()
    copies = {}
    for key, value in pretrained.items():
        parts = key.split(".", 2)
        if parts[0] != "layers" or int(parts[1]) >= len(model.decoder.layers):
            continue
        if not parts[2].startswith(LAYER_PARTS_FOR_DECODER):
            continue
        if ours[key].shape != value.shape:
            problems.append(f"decoder.{key}: model {tuple(ours[key].shape)} vs checkpoint {tuple(value.shape)}")
        else:
            copies[key] = value
    if len(model.decoder.layers) > n_pre:
        problems.append(f"decoder layers: the decoder has {len(model.decoder.layers)}, the checkpoint {n_pre}")
    return copies


def _copy_positions(model, pretrained: Dict[str, Tensor]) -> None:
    if "embed_positions.weight" not in pretrained:
        return
    ours_pos, their_pos = model.encoder.embed_positions.weight, pretrained["embed_positions.weight"]
    n = min(ours_pos.size(0), their_pos.size(0))
    ours_pos.data[:n] = their_pos[:n]
    if ours_pos.size(0) != their_pos.size(0):
        logger.info(
            f"pretrained positions: {their_pos.size(0)} rows, the model has {ours_pos.size(0)}; copied the first {n}"
        )


def load_pretrained(model, path: str, dictionary: Dictionary, init_decoder: bool) -> None:
    """Copy a RoBERTa-family encoder into ``model`` (see the module docstring)."""
    pretrained = _encoder_state(path)
    dict_path = os.path.join(os.path.dirname(os.path.abspath(path)), "dict.txt")
    if not os.path.isfile(dict_path):
        raise HltmtConfigError(
            f"--pretrained-xlmr-checkpoint: the pretrained vocabulary {dict_path} is missing "
            "(fairseq RoBERTa / XLM-R releases ship it beside model.pt)"
        )
    theirs = Dictionary.load(dict_path)
    _check_settings(model, pretrained)
    n_pre = 1 + max((int(k.split(".")[1]) for k in pretrained if k.startswith("layers.")), default=-1)
    problems: List[str] = []
    if len(model.encoder.layers) > n_pre:
        problems.append(f"layers: the encoder has {len(model.encoder.layers)}, the checkpoint {n_pre}")
    encoder_copies = _encoder_copies(model, pretrained, problems)
    emb = pretrained["embed_tokens.weight"]
    if emb.size(1) != model.encoder.embed_tokens.weight.size(1):
        problems.append(
            f"encoder.embed_tokens.weight: dimension {model.encoder.embed_tokens.weight.size(1)} vs "
            f"checkpoint {emb.size(1)}"
        )
    if len(theirs) > emb.size(0):  # more rows is normal: the pretraining task adds <mask>
        problems.append(f"{dict_path} has {len(theirs)} entries but the checkpoint's embeddings {emb.size(0)} rows")
    decoder_copies = _decoder_copies(model, pretrained, n_pre, problems) if init_decoder else {}
    if problems:
        raise HltmtConfigError(f"--pretrained-xlmr-checkpoint {path} does not fit this model: " + "; ".join(problems))

    with torch.no_grad():
        ours_state = model.encoder.state_dict()
        for key, value in encoder_copies.items():
            ours_state[key].copy_(value)
        shared = _copy_rows(model.encoder.embed_tokens.weight, emb, dictionary, theirs)
        _copy_positions(model, pretrained)
        if init_decoder:
            dec_state = model.decoder.state_dict()
            for key, value in decoder_copies.items():
                dec_state[key].copy_(value)
            if model.decoder.embed_tokens is not model.encoder.embed_tokens:
                _copy_rows(model.decoder.embed_tokens.weight, emb, model.decoder.dictionary, theirs)
    logger.info(
        f"initialised from {path}: {len(encoder_copies)} encoder tensors, {shared} of {len(dictionary)} "
        f"embedding rows (the rest, e.g. language tokens, keep their initialisation)"
        + (f", {len(decoder_copies)} decoder tensors" if init_decoder else "")
    )


# ---- fine-tuning a released checkpoint -----------------------------------------------------

# taken from the checkpoint when not given, and free to change (no weight depends on them)
TAKEN_OPTIONS = (
    "share_decoder_input_output_embed",
    "dropout",
    "attention_dropout",
    "activation_dropout",
    "max_source_positions",
    "max_target_positions",
)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def architecture_from_checkpoint(args) -> None:
    """``--finetune-from-model CKPT`` (a fairseq release such as M2M-100's or NLLB-200's, or any
    fairseq transformer): every architecture option the command line leaves out is CKPT's
    stored one (its ``cfg.model``, or an older release's ``args``), so that only what the run
    changes is typed (the pool, adapters, skills, data). An option given that contradicts CKPT
    (one its weights depend on) is refused, each named, in one line. Called by the
    architectures before their defaults, while ``args`` holds only what was typed; a model's
    stored options (every option present) are left as they are."""
    from hltmt_plugin.compatibility import SHAPE_OPTIONS, stored_options

    path = getattr(args, "finetune_from_model", None)
    if not path or not os.path.isfile(path) or all(hasattr(args, name) for name in SHAPE_OPTIONS):
        return
    stored = vars(stored_options(load_state(path)))
    contradictions = []
    for name in SHAPE_OPTIONS + TAKEN_OPTIONS:
        if name not in stored:
            continue
        if not hasattr(args, name):
            setattr(args, name, stored[name])
        elif name in SHAPE_OPTIONS and str(getattr(args, name)) != str(stored[name]):  # fairseq parses some as text
            contradictions.append(f"{_flag(name)} {getattr(args, name)} (the checkpoint's: {stored[name]})")
    if contradictions:
        raise HltmtConfigError(
            f"--finetune-from-model {path}: the command line contradicts the checkpoint's architecture: "
            + "; ".join(contradictions)
            + " (leave these options out: they are read from the checkpoint)"
        )
