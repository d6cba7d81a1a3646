"""The tokenizer of an export to transformers: the one the model was imported with, when it can
be kept, else ``MarianTokenizer``.

``hltmt-import`` records in the checkpoint's history (:data:`IMPORTED_TOKENIZER`, kept by every
checkpoint trained from it) the tokenizer the folder it read came with. An export of that
model writes the same tokenizer back:

- ``M2M100Tokenizer``: ``vocab.json`` (the dictionary up to the language tokens), the
  sentencepiece model as ``sentencepiece.bpe.model``, the settings' ``language_codes`` and
  ``num_madeup_words``; the languages are ``__xx__`` tokens, chosen with ``tok.src_lang`` and
  ``forced_bos_token_id=tok.get_lang_id(...)``;
- ``NllbTokenizer``: the dictionary as a BPE vocabulary (the sentencepiece model's merges, its
  normalization), each language token named by its code (``deu_Latn``), ``<mask>`` after them,
  saved by transformers (``tokenizer.json``);
- otherwise ``MarianTokenizer`` with ``>>xx<<`` codes (:func:`hltmt_plugin.export.transformers.write_tokenizer`).

M2M-100's and NLLB's tokenizers put the source language's token first and leave the target's
to be forced: a model trained with another convention, or whose dictionary is no longer laid
out as the tokenizer's, is exported with ``MarianTokenizer``, and the reason is one line of the
manifest's ``source`` (``tokenizer_note``), the model card and the command's output.
"""

import json
import os
import shutil
from typing import Dict, List, Optional

from hltmt_plugin import records

IMPORTED_TOKENIZER = "hltmt_imported_tokenizer"  # the import's entry of optimizer_history: the tokenizer it read
MARIAN, M2M100, NLLB = "MarianTokenizer", "M2M100Tokenizer", "NllbTokenizer"
MADEUP = "madeupword{:04d}"  # fairseq's padding of a dictionary, as M2M-100's and NLLB's tokenizers name it
_CODE = records.Text(min_len=1, max_len=64)
RECORD = records.Record(  # what imported_record writes, read back from a checkpoint as any record is
    {"tokenizer_class": records.Text(min_len=1, max_len=64)},
    {"language_codes": (_CODE, records.ListOf(_CODE, max_len=10_000)), "num_madeup_words": records.Int(low=0, high=64)},
)


def imported_record(settings: dict, langs: List[str]) -> dict:
    """What the import records of the tokenizer of a folder (``settings``: its
    ``tokenizer_config.json``; ``langs``: the languages read)."""
    name = str(settings.get("tokenizer_class", "")).removesuffix("Fast")
    if name == M2M100:
        return {
            "tokenizer_class": M2M100,
            "language_codes": settings.get("language_codes", "m2m100"),
            "num_madeup_words": settings.get("num_madeup_words", 8),
        }
    if name == NLLB:
        return {"tokenizer_class": NLLB, "language_codes": list(langs)}
    return {"tokenizer_class": name or MARIAN}


def _imported(history: list) -> Optional[dict]:
    """The import's record of its tokenizer; ``{}`` for an imported model without one; None
    for a model that was not imported."""
    from hltmt_plugin.export.importing import IMPORTED_FROM

    for entry in history:
        if isinstance(entry, dict) and entry.get(IMPORTED_FROM):
            found = entry.get(IMPORTED_TOKENIZER)
            return dict(records.check(found, RECORD, "the checkpoint's record of its tokenizer")) if found else {}
    return None


def choose(loaded, record: dict) -> dict:
    """The export's tokenizer: ``class``, ``codes`` (language -> the tokenizer's name for its
    token), ``settings`` (what :func:`write` needs), ``note`` (None, or the one line saying why the
    tokenizer the model was imported with is not kept)."""
    from hltmt_plugin.export.transformers import language_code

    marian = {"class": MARIAN, "codes": {lang: language_code(lang) for lang in loaded.langs}, "note": None}
    imported = _imported(getattr(loaded, "history", []))
    if imported is None or imported.get("tokenizer_class") == MARIAN:
        return marian
    name = imported.get("tokenizer_class")
    if name is None:
        problem = "the checkpoint does not record its import's tokenizer (import the model again to keep it)"
    elif name not in (M2M100, NLLB):
        problem = f"the export writes {M2M100}, {NLLB} or {MARIAN}"
    else:
        problem = _convention_problem(record, name) or _layout_problem(loaded.dictionary.symbols, imported)
    if problem is None:
        return {"class": name, "codes": _codes(name, loaded.langs), "settings": imported, "note": None}
    marian["note"] = (
        f"the tokenizer is {MARIAN} (>>xx<< codes), not the {name or 'one'} the model was imported with: {problem}"
    )
    return marian


def _codes(name: str, langs: List[str]) -> Dict[str, str]:
    return {lang: f"__{lang}__" if name == M2M100 else lang for lang in langs}


def _convention_problem(record: dict, name: str) -> Optional[str]:
    if record["encoder_langtok"] != "src" or not record["decoder_langtok"]:
        given = f"--encoder-langtok {record['encoder_langtok']}" if record["encoder_langtok"] else "no source token"
        return (
            f"the model was trained with {given}{' --decoder-langtok' if record['decoder_langtok'] else ''}, and "
            f"{name} puts the source language's token first and the target's is forced (--encoder-langtok src "
            "--decoder-langtok)"
        )
    odd = next((lang for lang, token in record["language_tokens"].items() if token != f"__{lang}__"), None)
    if odd is not None:
        return f"the language token of {odd} is {record['language_tokens'][odd]}, not __{odd}__"
    return None


def _layout(symbols: List[str], imported: dict):
    """``(pieces, codes, after)``: the dictionary's ids before the language tokens, the language
    codes in the tokenizer's order and the rows it names after them; None when the dictionary
    is not laid out so."""
    if imported["tokenizer_class"] == M2M100:
        from transformers.models.m2m_100.tokenization_m2m_100 import FAIRSEQ_LANGUAGE_CODES

        codes = list(FAIRSEQ_LANGUAGE_CODES.get(str(imported.get("language_codes")), []))
        after = [MADEUP.format(i) for i in range(int(imported.get("num_madeup_words", 8)))]
    else:
        codes = [str(c) for c in imported.get("language_codes") or []]
        after = ["<mask>"] + [MADEUP.format(i) for i in range(7)]  # NLLB's dictionary: at most seven
    tokens = [f"__{code}__" for code in codes]
    if not tokens or tokens[0] not in symbols:
        return None
    start = symbols.index(tokens[0])
    rest = symbols[start + len(tokens) :]
    if symbols[start : start + len(tokens)] != tokens or rest != after[: len(rest)]:
        return None
    if imported["tokenizer_class"] == M2M100 and rest != after:
        return None
    return start, codes, rest


def _layout_problem(symbols: List[str], imported: dict) -> Optional[str]:
    if _layout(symbols, imported) is None:
        return (
            f"the dictionary is not laid out as {imported['tokenizer_class']}'s (its pieces, then the language tokens "
            "in the tokenizer's order, then its rows after them)"
        )
    return None


def write(loaded, work: str, chosen: dict) -> None:
    """The tokenizer's files in ``work``; every export also keeps ``dict.txt`` and the
    sentencepiece model as ``source.spm`` / ``target.spm`` (what ``hltmt-translate`` reads)."""
    from hltmt_plugin.export.transformers import write_tokenizer

    write_tokenizer(loaded, work)  # MarianTokenizer's files, and the dictionary and sentencepiece model
    if chosen["class"] == MARIAN:
        return
    start, codes, _ = _layout(loaded.dictionary.symbols, chosen["settings"])
    pieces = loaded.dictionary.symbols[:start]
    langs = [lang for lang in loaded.langs if lang in codes] or codes
    if chosen["class"] == M2M100:
        _write_m2m100(loaded, work, chosen["settings"], pieces, codes, langs[0])
    else:
        _write_nllb(loaded, work, pieces, codes, langs[0])


def _write_json(path: str, record) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(record, f, ensure_ascii=False, indent=1)


def _specials(d) -> dict:
    return {"bos_token": d.bos_word, "eos_token": d.eos_word, "pad_token": d.pad_word, "unk_token": d.unk_word}


def _write_m2m100(loaded, work: str, settings: dict, pieces: List[str], codes: List[str], first: str) -> None:
    """M2M100Tokenizer's files; its language tokens listed as special tokens, which transformers 5's
    ``skip_special_tokens=True`` then leaves out of the text as transformers 4's does."""
    _write_json(os.path.join(work, "vocab.json"), {symbol: i for i, symbol in enumerate(pieces)})
    shutil.copyfile(loaded.spm, os.path.join(work, "sentencepiece.bpe.model"))
    config = {
        "tokenizer_class": M2M100,
        "language_codes": settings["language_codes"],
        "num_madeup_words": int(settings["num_madeup_words"]),
        "src_lang": first,
        "tgt_lang": None,
        "sep_token": loaded.dictionary.eos_word,
        **_specials(loaded.dictionary),
        "model_max_length": int(loaded.max_source_positions),
        "additional_special_tokens": [f"__{code}__" for code in codes],
    }
    _write_json(os.path.join(work, "tokenizer_config.json"), config)


def _write_nllb(loaded, work: str, pieces: List[str], codes: List[str], first: str) -> None:
    """NllbTokenizer over the dictionary's ids: its pieces, the codes, ``<mask>``; the merges and
    the normalization of the sentencepiece model."""
    import transformers

    vocab = {symbol: i for i, symbol in enumerate(pieces)}
    vocab.update({code: len(pieces) + i for i, code in enumerate(codes)})
    vocab["<mask>"] = len(pieces) + len(codes)
    options = {"_spm_precompiled_charsmap": precompiled_charsmap(loaded.spm)}
    tok = transformers.NllbTokenizer(
        vocab=vocab,
        merges=bpe_merges(loaded.spm, vocab),
        extra_special_tokens=codes,
        src_lang=first,
        model_max_length=int(loaded.max_source_positions),
        **{k: v for k, v in options.items() if v},
        **_specials(loaded.dictionary),
    )
    tok.save_pretrained(work)  # tokenizer.json, and tokenizer_config.json in place of MarianTokenizer's


def bpe_merges(spm: str, vocab: Dict[str, int]) -> List[tuple]:
    """The merges of a BPE sentencepiece model, as a BPE tokenizer over ``vocab`` applies them:
    each piece (in the model's order, which is the order its merges were learned) made of two
    pieces of ``vocab``, every way it splits so, the split of better-ranked parts first."""
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=spm)
    merges = []
    for i in range(sp.get_piece_size()):
        piece = sp.id_to_piece(i)
        if sp.is_control(i) or sp.is_unknown(i) or len(piece) < 2:
            continue
        splits = [(piece[:k], piece[k:]) for k in range(1, len(piece)) if piece[:k] in vocab and piece[k:] in vocab]
        merges += sorted(splits, key=lambda pair: (vocab[pair[0]], vocab[pair[1]]))
    return merges


def _fields(data: bytes):
    """The fields of a protocol buffer message: ``(number, wire type, value)``, a value being an
    integer (varint, fixed) or bytes (length-delimited)."""
    at = 0

    def varint():
        nonlocal at
        value, shift = 0, 0
        while True:
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    while at < len(data):
        key = varint()
        kind = key & 7
        if kind == 0:
            yield key >> 3, kind, varint()
        elif kind == 2:
            size = varint()
            yield key >> 3, kind, data[at : at + size]
            at += size
        elif kind in (1, 5):
            size = 8 if kind == 1 else 4
            yield key >> 3, kind, int.from_bytes(data[at : at + size], "little")
            at += size
        else:
            return


def precompiled_charsmap(spm: str) -> Optional[bytes]:
    """The sentencepiece model's normalization table (its ``normalizer_spec``'s
    ``precompiled_charsmap``), which the tokenizer applies as the model does; None when it has
    none."""
    import sentencepiece

    proto = sentencepiece.SentencePieceProcessor(model_file=spm).serialized_model_proto()
    for number, kind, value in _fields(proto):
        if number == 3 and kind == 2:  # ModelProto.normalizer_spec
            for inner, inner_kind, charsmap in _fields(value):
                if inner == 2 and inner_kind == 2:  # NormalizerSpec.precompiled_charsmap
                    return bytes(charsmap) or None
    return None


def notes(record: dict) -> List[str]:
    """``hltmt-export``'s line on an export to transformers (``record``: its manifest) whose
    tokenizer is not the one the model was imported with: why."""
    note = record["source"].get("tokenizer_note")
    return [note] if note else []
