"""Import a transformers folder into fairseq: the reverse of :mod:`hltmt_plugin.export.transformers`.

A folder of ``M2M100ForConditionalGeneration`` (an M2M-100-style model with its
``M2M100Tokenizer``, or the pre-norm folders ``hltmt-export --to transformers`` writes) or of
``MarianMTModel`` written by ``hltmt-export --to transformers`` (post-norm) becomes

- ``checkpoint.pt``: fairseq's plain ``transformer`` of ``translation_multi_simple_epoch``
  (pre-norm for M2M100, post-norm for Marian), every option read from the folder's
  ``config.json``; every weight mapped by name and shape; its history names the model read and
  the tokenizer it came with, which an export of the model writes back
  (:mod:`hltmt_plugin.export.tokenizers`);
- a ``dict.<lang>.txt`` per language (one vocabulary in the model's ids, its language tokens
  included), ``spm.model``, ``langs.txt``: the data folder ``fairseq-generate`` /
  ``hltmt-translate`` read, the checkpoint's own.

M2M100 builds its input as ``--encoder-langtok src --decoder-langtok --lang-tok-style
multilingual`` does (``__src__ text </s>``, the target's token forced first, the decoder
started from ``</s>``); an export folder names its own convention in its manifest.

Nothing in the folder runs: the weights are read from ``model.safetensors`` only, the JSON
files through :mod:`hltmt_plugin.records`. Refused, each in one line: a weight the mapping does
not know or one it misses, a shape that does not fit, a configuration or tokenizer fairseq's
model cannot express (learned or shifted positions, an output bias, rows beyond the
vocabulary and language tokens, another decoder start, another tokenizer).
"""

import os
import re
import shutil
from typing import Dict, List

from hltmt_plugin import progress, records
from hltmt_plugin.atomic_files import check_folder_output, write_folder
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.export.tokenizers import IMPORTED_TOKENIZER, imported_record
from hltmt_plugin.export.transformers import ACTIVATIONS, CLASSES
from hltmt_plugin.model_check import activations, check_finite, check_options
from hltmt_plugin.paths import in_folder

KIND = "hltmt-import"
CHECKPOINT = "checkpoint.pt"
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # fairseq's dictionary's first four ids


def activation_of() -> Dict[str, str]:
    """transformers' activation -> fairseq's: the export's table read backwards (its first name
    wins), for the activations fairseq's transformer computes (:func:`model_check.activations`)."""
    found = {}
    for fairseq_name, hf_name in ACTIVATIONS.items():
        if fairseq_name in activations():
            found.setdefault(hf_name, fairseq_name)
    return found


MODEL_TYPES = {model_type: ("post" if norm == "post" else "pre", cls) for norm, (model_type, cls) in CLASSES.items()}

CONFIG = records.Record(
    {
        "model_type": records.Text(choices=sorted(MODEL_TYPES)),
        "vocab_size": records.Int(1, 10_000_000),
        "d_model": records.Int(1, 65536),
        "encoder_layers": records.Int(1, 1000),
        "decoder_layers": records.Int(1, 1000),
        "encoder_attention_heads": records.Int(1, 4096),
        "decoder_attention_heads": records.Int(1, 4096),
        "encoder_ffn_dim": records.Int(1, 1_000_000),
        "decoder_ffn_dim": records.Int(1, 1_000_000),
        "activation_function": records.Text(),
        "max_position_embeddings": records.Int(1, 1_000_000),
        "scale_embedding": bool,
        "pad_token_id": int,
        "eos_token_id": int,
        "decoder_start_token_id": int,
    },
    optional={
        "dropout": (float, int),
        "attention_dropout": (float, int),
        "activation_dropout": (float, int),
        "tie_word_embeddings": bool,
        "decoder_vocab_size": (int, None),
        "share_encoder_decoder_embeddings": bool,
        "normalize_before": bool,
        "static_position_embeddings": bool,
        "add_bias_logits": bool,
        "normalize_embedding": bool,
    },
    extra=True,
)
FILE_NAME = records.Text(1, 200)  # a file a folder's settings name (resolved inside the folder: paths.in_folder)
TOKENIZER_CONFIG = records.Record(
    {"tokenizer_class": records.Text(max_len=100)},
    optional={
        "spm_file": (FILE_NAME, None),
        "language_codes": records.Text(1, 40),
        "num_madeup_words": records.Int(0, 8),
    },
    extra=True,
)
# tokenizers' tokenizer.json as far as the import reads it (the rest is bounded in size and depth
# by the one reader before transformers parses it)
TOKENIZER_JSON = records.Record(
    {
        "added_tokens": records.ListOf(
            records.Record({"id": records.Int(0, 10_000_000), "content": records.Text(1, 1000)}, extra=True),
            max_len=10_000_000,
        ),
        "model": records.Record({}, extra=True),
    },
    extra=True,
)
TOKENIZER_JSON_BYTES = 256 * 1024 * 1024
VOCAB_SIZE = 10_000_000  # entries of a vocabulary (vocab.json)
MADEUP_WORDS = 8  # rows after the language tokens: fairseq pads its dictionary to a multiple of 8


# ---- the folder's records ------------------------------------------------------------------


def _json(folder: str, name: str, schema, what: str, max_bytes: int = records.MAX_BYTES):
    path = in_folder(folder, name, folder)
    if not os.path.isfile(path):
        raise HltmtInputError(f"{folder} has no {name}: a transformers folder holds {what}")
    return records.read_json(path, schema, what, max_bytes)


def read_config(folder: str) -> dict:
    """``config.json``, with what fairseq's transformer cannot express refused in one line."""
    config = _json(folder, "config.json", CONFIG, "the model's configuration (config.json)")
    norm = MODEL_TYPES[config["model_type"]][0]
    where = f"{folder}/config.json"
    if config["activation_function"] not in activation_of():
        raise HltmtConfigError(
            f"{where}: activation_function {config['activation_function'][:40]!r} has no fairseq counterpart "
            f"(fairseq's transformer computes {', '.join(sorted(activation_of()))})"
        )
    if (config["pad_token_id"], config["eos_token_id"], config["decoder_start_token_id"]) != (1, 2, 2):
        raise HltmtConfigError(
            f"{where}: pad_token_id {config['pad_token_id']}, eos_token_id {config['eos_token_id']}, "
            f"decoder_start_token_id {config['decoder_start_token_id']}: fairseq's model pads with 1 and starts "
            "and ends with 2"
        )
    unexpressed = [
        name
        for name, fine in (
            ("normalize_before", False),
            ("static_position_embeddings", False),
            ("add_bias_logits", False),
            ("normalize_embedding", False),
        )
        if config.get(name, fine) != fine
    ]
    if config.get("decoder_vocab_size") not in (None, config["vocab_size"]):
        unexpressed.append("decoder_vocab_size")
    if unexpressed:
        raise HltmtConfigError(
            f"{where}: {unexpressed[0]} {config[unexpressed[0]]!r} is not what fairseq's {norm}-norm transformer "
            "computes"
        )
    return config


def _vocab(folder: str) -> Dict[str, int]:
    schema = records.MapOf(records.Int(0, VOCAB_SIZE), max_len=VOCAB_SIZE)
    return _json(folder, "vocab.json", schema, "the tokenizer's vocabulary (vocab.json)", 512 * 1024 * 1024)


def _by_id(vocab: Dict[str, int], where: str) -> List[str]:
    symbols = [None] * len(vocab)
    for symbol, i in vocab.items():
        if i >= len(vocab) or symbols[i] is not None:
            raise HltmtInputError(f"{where}: the ids are not 0..{len(vocab) - 1}, each once (id {i})")
        symbols[i] = symbol
    return symbols


def read_tokenizer(folder: str) -> dict:
    """The vocabulary in the model's ids, the languages and their tokens, the input's
    convention, the sentencepiece model and the names of the rows after the language tokens:
    from an export's manifest, else from an ``M2M100Tokenizer``'s or ``NllbTokenizer``'s files."""
    from hltmt_plugin.hub import manifest

    if manifest.is_export(folder):
        return _exported_tokenizer(folder, manifest.read(folder))
    pool = _pool_of(folder)
    if pool is not None:  # one model of a pool export: the export's tokenizer, the group's directions
        return _exported_tokenizer(*pool)
    settings = _json(folder, "tokenizer_config.json", TOKENIZER_CONFIG, "the tokenizer's settings")
    name = settings["tokenizer_class"]
    if name not in TOKENIZERS:
        raise HltmtConfigError(
            f"{folder}: tokenizer {name[:60]} is not one hltmt-import reads ({', '.join(TOKENIZERS)}, or a folder "
            "hltmt-export --to transformers wrote)"
        )
    found = TOKENIZERS[name](folder, settings)
    pairs = [f"{a}-{b}" for a in found["langs"] for b in found["langs"] if a != b]
    convention = imported_record(settings, found["langs"])  # what an export of the model writes back
    return dict(found, pairs=pairs, encoder_langtok="src", decoder_langtok=True, convention=convention)


def _m2m100(folder: str, settings: dict) -> dict:
    """``M2M100Tokenizer``: vocab.json (fairseq's ids), then a token ``__xx__`` per language of
    its ``language_codes``, then its ``num_madeup_words`` rows (fairseq's padding of the
    dictionary, ``madeupword0000``...)."""
    from transformers.models.m2m_100.tokenization_m2m_100 import FAIRSEQ_LANGUAGE_CODES

    codes = settings.get("language_codes", "m2m100")  # a string (the settings' schema)
    if codes not in FAIRSEQ_LANGUAGE_CODES:
        raise HltmtConfigError(f"{folder}: language_codes {str(codes)[:40]!r} is not one M2M100Tokenizer knows")
    madeup = settings.get("num_madeup_words", 8)  # M2M100Tokenizer's default
    if not isinstance(madeup, int) or isinstance(madeup, bool) or not 0 <= madeup <= MADEUP_WORDS:
        raise HltmtConfigError(
            f"{folder}/tokenizer_config.json: num_madeup_words {str(madeup)[:20]} is not a count of 0 to {MADEUP_WORDS}"
        )
    langs = list(FAIRSEQ_LANGUAGE_CODES[codes])
    symbols = _by_id(_vocab(folder), f"{folder}/vocab.json") + [f"__{lang}__" for lang in langs]
    spm = in_folder(folder, settings.get("spm_file") or "sentencepiece.bpe.model", f"{folder}/tokenizer_config.json")
    _pieces_cover(spm, symbols[len(SPECIALS) : len(symbols) - len(langs)], f"{folder}/vocab.json")
    extra = [f"madeupword{i:04d}" for i in range(madeup)]
    return dict(symbols=symbols, langs=langs, spm=spm, extra=extra, extra_min=madeup)


def _sentencepiece(spm: str):
    """The sentencepiece model ``spm``, or one line saying it is not one."""
    import sentencepiece

    if not os.path.isfile(spm):
        raise HltmtInputError(f"{os.path.dirname(spm)} has no sentencepiece model {os.path.basename(spm)}")
    try:
        return sentencepiece.SentencePieceProcessor(model_file=spm)
    except (OSError, RuntimeError) as error:
        raise HltmtInputError(f"{spm} is not a sentencepiece model ({str(error).strip()[:200]})") from None


def _pieces_cover(spm: str, symbols: List[str], where: str) -> None:
    """Every symbol of the vocabulary is a piece of the sentencepiece model that makes the
    model's input: a model of another vocabulary (or not a sentencepiece model) is refused."""
    sp = _sentencepiece(spm)
    pieces = {sp.id_to_piece(i) for i in range(sp.get_piece_size())}
    foreign = [s for s in symbols if s not in pieces]
    if foreign:
        raise HltmtConfigError(
            f"{where}: {len(foreign)} of its {len(symbols)} symbols (the first {foreign[0][:40]!r}) are not pieces of "
            f"the sentencepiece model {spm}: the tokenizer's files are not of one vocabulary"
        )


def _tokenizer_json(folder: str):
    """The folder's ``tokenizer.json`` read through the one reader (bounded, its added tokens
    typed) before transformers parses it, and every other JSON file of the folder that
    transformers' tokenizer may open (``special_tokens_map.json``, ``added_tokens.json``...)
    read through it too (bounded in size and depth); None when the folder has no tokenizer.json."""
    path = in_folder(folder, "tokenizer.json", folder)
    if not os.path.lexists(path):
        return None
    for name in sorted(os.listdir(folder)):
        if name.endswith(".json") and name != "tokenizer.json":
            records.read_json(in_folder(folder, name, folder), records.ANYTHING, "the folder's file")
    return records.read_json(path, TOKENIZER_JSON, "the tokenizer's file", TOKENIZER_JSON_BYTES)


def _nllb(folder: str, settings: dict) -> dict:
    """``NllbTokenizer``: fairseq's four symbols, the sentencepiece model's pieces after its own
    ``<unk> <s> </s>`` (fairseq's offset of one), a token ``__xxx_Xxxx__`` per language code (the
    settings' list, else NLLB-200's 202), then ``<mask>`` and at most seven rows of fairseq's
    padding of the dictionary (``madeupword0000``...)."""
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    spm = in_folder(folder, "sentencepiece.bpe.model", folder)  # NllbTokenizer's own name for it
    codes = settings.get("extra_special_tokens") or settings.get("additional_special_tokens") or FAIRSEQ_LANGUAGE_CODES
    if not isinstance(codes, list) or not all(
        isinstance(c, str) and re.fullmatch(r"[a-z]{3}_[A-Za-z]{4}", c) for c in codes
    ):
        raise HltmtConfigError(f"{folder}/tokenizer_config.json: the language codes are not NLLB's (eng_Latn, ...)")
    sp = _sentencepiece(spm)
    if sp.get_piece_size() < 4 or not (sp.is_unknown(0) and sp.is_control(1) and sp.is_control(2)):
        raise HltmtConfigError(
            f"{spm}: its first pieces are not <unk> <s> </s>, whose ids NllbTokenizer offsets by one"
        )
    pieces = [sp.id_to_piece(i) for i in range(3, sp.get_piece_size())]
    symbols = SPECIALS + pieces + [f"__{code}__" for code in codes]
    if _tokenizer_json(folder) is not None:  # the ids the folder's own tokenizer gives
        from transformers import NllbTokenizer

        try:
            tok = NllbTokenizer.from_pretrained(folder)
        except Exception as error:  # transformers' parser of files the one reader has bounded: its failure, one line
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise HltmtInputError(f"{folder}/tokenizer.json is not NllbTokenizer's ({first[:200]})") from None
        ids = tok.convert_tokens_to_ids(list(codes) + ["<mask>"])
        if ids != list(range(len(SPECIALS) + len(pieces), len(symbols) + 1)):
            raise HltmtConfigError(
                f"{folder}/tokenizer.json: the language codes and <mask> have the ids {ids[:3]}..., not the ones after "
                f"the sentencepiece model's pieces ({len(SPECIALS) + len(pieces)}...) that NLLB's dictionary gives them"
            )
    extra = ["<mask>"] + [f"madeupword{i:04d}" for i in range(MADEUP_WORDS - 1)]
    return dict(symbols=symbols, langs=list(codes), spm=spm, extra=extra, extra_min=0)


TOKENIZERS = {"M2M100Tokenizer": _m2m100, "NllbTokenizer": _nllb}


def _pool_of(folder: str):
    """``(export folder, manifest record, group)`` when ``folder`` is one model of a pool export
    (its ``models/<group>/``), else None."""
    from hltmt_plugin.hub import manifest

    here = os.path.abspath(folder)
    for root in (os.path.dirname(here), os.path.dirname(os.path.dirname(here))):
        if root != here and manifest.is_export(root):
            record = manifest.read(root)
            place = os.path.relpath(here, root)
            group = next((g for g, p in record["models"].items() if os.path.normpath(p) == place), None)
            if group is not None and place != ".":
                return root, record, group
    return None


def _exported_tokenizer(folder: str, record: dict, group: str = None) -> dict:
    """The tokenizer of an export folder (``group``: the one model of a pool export imported,
    with the directions into the targets it serves): its dictionary (``dict.txt``, fairseq's
    ids), languages, convention and sentencepiece model."""
    if group is None and list(record["models"].values()) != ["."]:
        place = sorted(record["models"].items())[0]
        served = ", ".join(lang for lang, g in record["targets"].items() if g == place[0])
        raise HltmtConfigError(
            f"{folder} holds one model per group of target languages (a pool): pool folders are not imported; "
            f"import the subfolder that serves your target languages, e.g. --model {os.path.join(folder, place[1])} "
            f"(targets {served})"
        )
    pairs = [p for p in record["lang_pairs"] if group is None or record["targets"][p.split("-", 1)[1]] == group]
    if not pairs:
        raise HltmtConfigError(f"{folder}: the model {record['models'][group]} serves no trained direction")
    text = records.read_text(in_folder(folder, "dict.txt", folder), "the dictionary", 512 * 1024 * 1024)
    symbols = SPECIALS + [line.split(" ", 1)[0] for line in text.splitlines() if line]
    settings = _json(folder, "tokenizer_config.json", TOKENIZER_CONFIG, "the tokenizer's settings")
    return dict(
        symbols=symbols,
        convention=imported_record(settings, list(record["langs"])),
        langs=list(record["langs"]),
        pairs=pairs,
        encoder_langtok=record["encoder_langtok"],
        decoder_langtok=bool(record["decoder_langtok"]),
        spm=in_folder(folder, "source.spm", folder),
        extra=[],
        extra_min=0,
    )


def check_vocabulary(tokenizer: dict, config: dict, where: str) -> None:
    """The rows after the language tokens named (``tokenizer["symbols"]`` then holds one symbol
    per row); refused: fairseq's four first symbols elsewhere, a language token missing, rows of
    the embedding the tokenizer does not name, a symbol fairseq's dictionary cannot hold."""
    symbols = tokenizer["symbols"]
    if symbols[:4] != SPECIALS:
        raise HltmtConfigError(f"{where}: the first ids are {symbols[:4]}, not fairseq's {SPECIALS}")
    tokens = [f"__{lang}__" for lang in tokenizer["langs"]]
    missing = sorted(set(tokens) - set(symbols))
    if missing:
        raise HltmtConfigError(f"{where}: the language token {missing[0]} is not in the vocabulary")
    rows = config["vocab_size"] - len(symbols)
    if not tokenizer["extra_min"] <= rows <= len(tokenizer["extra"]):
        raise HltmtConfigError(
            f"{where}: the model has {config['vocab_size']} embedding rows, the vocabulary and language tokens "
            f"{len(symbols)}, and the tokenizer names {len(tokenizer['extra'])} rows after them: fairseq's "
            "dictionary has one row per symbol"
        )
    symbols = tokenizer["symbols"] = symbols + tokenizer["extra"][:rows]
    odd = next((s for s in symbols[4:] if not s or any(c.isspace() for c in s)), None)
    if odd is not None:
        raise HltmtConfigError(f"{where}: the symbol {odd!r} cannot be a line of fairseq's dict.txt")
    if len(set(symbols)) != len(symbols):
        raise HltmtConfigError(f"{where}: a symbol appears twice in the vocabulary")


# ---- weights -------------------------------------------------------------------------------


WEIGHT_FILES = (  # (one file, the index of a sharded one): safetensors first
    ("model.safetensors", "model.safetensors.index.json"),
    ("pytorch_model.bin", "pytorch_model.bin.index.json"),
)
INDEX = records.Record(
    {"weight_map": records.MapOf(records.Text(1, 200, pattern=r"[\w.-]+"), max_len=1_000_000)},
    optional={"metadata": records.ANYTHING},
)


def _weight_file(path: str) -> dict:
    """One file's tensors: safetensors, or a ``torch.save`` of tensors read weights-only
    through the plugin's one loader (no code runs)."""
    if path.endswith(".safetensors"):
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            tensors = load_file(path)
        except (SafetensorError, OSError, ValueError) as error:
            raise HltmtInputError(f"{path} is not a safetensors file ({str(error).strip()[:200]})") from None
        check_finite(tensors, path)
        return tensors
    import torch

    from hltmt_plugin.compat.safe_loading import load_state

    tensors = load_state(path)
    if not isinstance(tensors, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in tensors.items()
    ):
        raise HltmtInputError(f"{path} is not a map of weight names to tensors")
    return dict(tensors)


def read_weights(folder: str) -> dict:
    """The folder's tensors and the file they were read from: ``model.safetensors``, its shards
    (``model.safetensors.index.json``), else ``pytorch_model.bin`` or its shards, weights-only;
    a shard's tensors are the ones its index names for it, each once."""
    for single, index in WEIGHT_FILES:
        if os.path.isfile(in_folder(folder, single, folder)):
            progress.step(f"reading weights: {single}")
            return _weight_file(in_folder(folder, single, folder)), os.path.join(folder, single)
        if not os.path.isfile(in_folder(folder, index, folder)):
            continue
        where = os.path.join(folder, index)
        weight_map = records.read_json(where, INDEX, "the index of the weight files", 64 * 1024 * 1024)["weight_map"]
        tensors, shards = {}, sorted(set(weight_map.values()))
        for k, shard in enumerate(shards):
            progress.step(f"reading weights: shard {k + 1} of {len(shards)}")
            path = in_folder(folder, shard, where)
            if not os.path.isfile(path):
                raise HltmtInputError(f"{where} names {shard}, which the folder does not hold")
            found = _weight_file(path)
            named = {name for name, file in weight_map.items() if file == shard}
            if set(found) != named:
                odd = sorted(set(found) ^ named)[0]
                raise HltmtInputError(f"{path}: the weight {odd} is not where {index} says")
            tensors.update(found)
        return tensors, where
    raise HltmtInputError(f"{folder} has no weights ({', '.join(n for pair in WEIGHT_FILES for n in pair)})")


LAYER_PARTS = ("self_attn", "self_attn_layer_norm", "fc1", "fc2", "final_layer_norm")
DECODER_PARTS = ("encoder_attn", "encoder_attn_layer_norm")
EMBEDDINGS = ("model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")


def _embeddings(tensors: dict, config: dict, where: str):
    """(encoder's, decoder's, output projection): each stored, or tied to the shared table."""
    shared = tensors.get("model.shared.weight")
    enc = tensors.get("model.encoder.embed_tokens.weight", shared)
    dec = tensors.get("model.decoder.embed_tokens.weight", shared)
    tied = config.get("tie_word_embeddings", True)
    out = tensors.get("lm_head.weight", dec if tied else None)
    for name, tensor in (("the encoder's embedding", enc), ("the decoder's embedding", dec), ("lm_head", out)):
        if tensor is None:
            raise HltmtInputError(f"{where}: {name} is missing")
    return enc, dec, out


def _positions_fit(tensors: dict, where: str) -> None:
    """A stored position table (Marian holds one as weights) is fairseq's sinusoidal one."""
    import torch
    from fairseq.modules import SinusoidalPositionalEmbedding

    for side in ("encoder", "decoder"):
        name = f"model.{side}.embed_positions.weight"
        if name not in tensors:
            continue
        count, dim = tensors[name].shape
        table = SinusoidalPositionalEmbedding.get_embedding(count + 2, dim, 1)[2:]
        if not torch.allclose(tensors[name].float(), table, atol=1e-4):
            raise HltmtConfigError(
                f"{where}: {name} is not fairseq's sinusoidal table (learned or other positions): fairseq's "
                "transformer cannot compute it"
            )


def fairseq_state(tensors: dict, config: dict, norm: str, where: str) -> dict:
    """The fairseq transformer's state dict from the transformers one: every tensor mapped by
    name (shapes are checked by the strict load); a tensor the mapping does not know is refused."""
    import torch

    state, used = {}, set(EMBEDDINGS) | {"lm_head.weight"}
    for side, count in (("encoder", config["encoder_layers"]), ("decoder", config["decoder_layers"])):
        for i in range(count):
            prefix = f"model.{side}.layers.{i}."
            for name in tensors:
                rest = name[len(prefix) :]
                parts = LAYER_PARTS + (DECODER_PARTS if side == "decoder" else ())
                if name.startswith(prefix) and rest.split(".")[0] in parts:
                    state[f"{side}.layers.{i}.{rest}"] = tensors[name]
                    used.add(name)
        if norm == "pre":
            for kind in ("weight", "bias"):
                name = f"model.{side}.layer_norm.{kind}"
                if name in tensors:
                    state[f"{side}.layer_norm.{kind}"] = tensors[name]
                    used.add(name)
        used.add(f"model.{side}.embed_positions.weight")
        used.add(f"model.{side}.embed_positions.weights")
    if "final_logits_bias" in tensors:
        if torch.count_nonzero(tensors["final_logits_bias"]):
            raise HltmtConfigError(f"{where}: final_logits_bias is not zero: fairseq's output has no bias")
        used.add("final_logits_bias")
    unknown = sorted(set(tensors) - used)
    if unknown:
        raise HltmtConfigError(f"{where}: the weight {unknown[0]} has no place in fairseq's transformer")
    _positions_fit(tensors, where)
    enc, dec, out = _embeddings(tensors, config, where)
    state["encoder.embed_tokens.weight"], state["decoder.embed_tokens.weight"] = enc, dec
    state["decoder.output_projection.weight"] = out
    for side in ("encoder", "decoder"):  # fairseq's current form (an older one loses its final norm on load)
        state[f"{side}.version"] = torch.Tensor([3])
    return {k: v.float().contiguous() for k, v in state.items()}


# ---- fairseq's options ---------------------------------------------------------------------


def train_options(data: str, config: dict, tokenizer: dict, norm: str, state: dict) -> List[str]:
    """The fairseq-train command line (without the program's name) of the model: the options a
    run of fairseq's parser turns into the checkpoint's options."""
    import torch

    share_out = torch.equal(state["decoder.embed_tokens.weight"], state["decoder.output_projection.weight"])
    # fairseq's --share-all-embeddings ties the output projection too: with an output of its own,
    # equal encoder and decoder tables stay two tables
    share_all = share_out and torch.equal(state["encoder.embed_tokens.weight"], state["decoder.embed_tokens.weight"])
    words = [data, "--task", "translation_multi_simple_epoch", "--arch", "transformer"]
    words += ["--langs", ",".join(tokenizer["langs"]), "--lang-pairs", ",".join(tokenizer["pairs"])]
    words += ["--lang-tok-style", "multilingual"]
    if tokenizer["encoder_langtok"]:
        words += ["--encoder-langtok", tokenizer["encoder_langtok"]]
    if tokenizer["decoder_langtok"]:
        words.append("--decoder-langtok")
    for side in ("encoder", "decoder"):
        words += [f"--{side}-layers", str(config[f"{side}_layers"]), f"--{side}-embed-dim", str(config["d_model"])]
        words += [f"--{side}-ffn-embed-dim", str(config[f"{side}_ffn_dim"])]
        words += [f"--{side}-attention-heads", str(config[f"{side}_attention_heads"])]
        if norm == "pre":
            words.append(f"--{side}-normalize-before")
    words += ["--activation-fn", activation_of()[config["activation_function"]]]
    for name in ("dropout", "attention_dropout", "activation_dropout"):
        words += ["--" + name.replace("_", "-"), repr(float(config.get(name, 0.0)))]
    positions = str(config["max_position_embeddings"])
    words += ["--max-source-positions", positions, "--max-target-positions", positions]
    if not config["scale_embedding"]:
        words.append("--no-scale-embedding")
    if share_all:
        words.append("--share-all-embeddings")
    if share_out:
        words.append("--share-decoder-input-output-embed")
    return words


IMPORTED_FROM = "hltmt_imported_from"  # the import's entry of optimizer_history: the model it was read from
HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")  # a Hugging Face Hub name (owner/model)


def source_name(folder: str, config: dict) -> str:
    """The name of the model imported from ``folder`` (``config``: its ``config.json``), as a
    model card's ``base_model`` names it: the Hub's name the configuration records
    (``_name_or_path``: ``facebook/m2m100_418M``), else the folder's own name (never the
    machine's path to it)."""
    recorded = config.get("_name_or_path")
    if isinstance(recorded, str) and HUB_ID.fullmatch(recorded) and not os.path.isabs(recorded):
        return recorded
    return os.path.basename(os.path.normpath(os.path.abspath(folder)))


def build_checkpoint(
    words: List[str], state: dict, path: str, where: str, data: str, source: str, tokenizer: dict
) -> None:
    """fairseq's model built from ``words`` by fairseq itself, given ``state`` (strict: every
    weight in place, every shape the same), saved as a checkpoint with its compatibility record
    and ``data`` as its data folder (where the folder being written will lie)."""
    import torch
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from hltmt_plugin.compatibility import RECORD_KEY, VERSION_KEY, build_record

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, words)
    check_options(args, f"{where}/config.json")  # before fairseq's modules assert on them
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as error:
        first = [line.strip() for line in str(error).splitlines() if line.strip()][1:2] or [str(error)[:200]]
        raise HltmtConfigError(f"{where}: the weights do not fit fairseq's transformer ({first[0][:300]})") from None
    record = build_record(
        cfg.model,
        data=args.data,
        symbols=list(task.source_dictionary.symbols),
        languages=list(task.langs),
        spm=os.path.join(args.data, "spm.model"),
    )
    import contextlib
    from argparse import Namespace

    from omegaconf import open_dict

    with open_dict(cfg.model) if not isinstance(cfg.model, Namespace) else contextlib.nullcontext():
        setattr(cfg.model, RECORD_KEY, record)
        setattr(cfg.model, VERSION_KEY, records.plugin_version())
    history = [{"criterion_name": "CrossEntropyCriterion", "optimizer_name": "none", "num_updates": 0}]
    history[0][IMPORTED_FROM] = source  # kept by fairseq in every checkpoint trained from this one
    history[0][IMPORTED_TOKENIZER] = tokenizer  # the tokenizer an export of the model writes back
    history[0]["lr_scheduler_state"] = {}
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)  # as fairseq's trainer saves it
    for part in (cfg["task"], cfg["model"]):  # (fairseq keeps a legacy architecture's options as a Namespace)
        if isinstance(part, Namespace):
            part.data = data
        elif isinstance(part, dict) and "data" in part:
            part["data"] = data
    checkpoint = {"args": None, "cfg": cfg, "model": model.state_dict(), "optimizer_history": history}
    checkpoint.update(extra_state={}, last_optimizer_state=None)
    torch.save(checkpoint, path)


# ---- the folder ----------------------------------------------------------------------------


def write_data(work: str, tokenizer: dict) -> None:
    """A dict.<lang>.txt per language (one file, hard-linked where the file system can), the
    vocabulary in the model's ids with its language tokens; spm.model and langs.txt."""
    first = None
    for lang in tokenizer["langs"]:
        path = os.path.join(work, f"dict.{lang}.txt")
        if first is None:
            with open(path, "w", encoding="utf-8") as f:
                f.writelines(f"{symbol} 1\n" for symbol in tokenizer["symbols"][4:])
            first = path
            continue
        try:
            os.link(first, path)
        except OSError:  # a file system without hard links
            shutil.copyfile(first, path)
    shutil.copyfile(tokenizer["spm"], os.path.join(work, "spm.model"))
    with open(os.path.join(work, "langs.txt"), "w", encoding="utf-8") as f:
        f.writelines(f"{lang}\n" for lang in tokenizer["langs"])


def import_folder(folder: str, out: str, force: bool = False, option: str = "--out") -> dict:
    """The transformers folder ``folder`` as a fairseq checkpoint and its data folder ``out``
    (written whole or not at all); returns what was imported (class, languages, options)."""
    folder = os.fspath(folder)
    inputs = {"--model": folder}
    check_folder_output(out, kind=KIND, force=force, option=option, inputs=inputs)
    tokenizer = read_tokenizer(folder)  # first: an export folder says here what it is (a pool is not imported)
    config = read_config(folder)
    norm, cls = MODEL_TYPES[config["model_type"]]
    _sentencepiece(tokenizer["spm"])
    check_vocabulary(tokenizer, config, folder)
    tensors, where = read_weights(folder)
    progress.step("mapping the weights to fairseq's names")
    state = fairseq_state(tensors, config, norm, where)
    final = os.path.abspath(out)

    def fill(work: str) -> dict:
        progress.step("writing the dictionaries")
        write_data(work, tokenizer)
        words = train_options(work, config, tokenizer, norm, state)
        progress.step(f"building fairseq's model and writing {CHECKPOINT}")
        source = source_name(folder, config)
        build_checkpoint(words, state, os.path.join(work, CHECKPOINT), folder, final, source, tokenizer["convention"])
        return {"class": cls, "norm": norm, "langs": tokenizer["langs"], "options": words[1:]}

    done = write_folder(out, fill, kind=KIND, force=force, option=option, inputs=inputs)
    done["checkpoint"] = os.path.join(final, CHECKPOINT)
    return done
