"""hltmt_plugin.export.tokenizers: an M2M-100-style and an NLLB-200-style folder
(tests/importing_common.py) imported with ``hltmt-import`` and exported back with ``hltmt-export
--to transformers`` come back with the tokenizer they were imported with (``M2M100Tokenizer``
with ``__xx__`` tokens, ``NllbTokenizer`` with ``xxx_Latn`` codes); transformers alone, used as
the base models' docs say (``tok.src_lang``, ``forced_bos_token_id``, ``batch_decode(...,
skip_special_tokens=True)``), gives the ids the checkpoint gives and the lines ``hltmt-translate``
writes. A model whose convention the tokenizer cannot express is exported with MarianTokenizer
and the reason in one line."""

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from conftest import cli, run
from hltmt_plugin.export import tokenizers
from hltmt_plugin.export.importing import IMPORTED_FROM
from importing_common import NLLB_CODES, build_m2m_folder, build_nllb_folder, rows

MAX_LEN = 40

# transformers alone, as the base models' docs use them: each row's source ids and generate's line
GENERATE = r"""
import json, sys
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
folder, rows = sys.argv[1], json.loads(sys.argv[2])
tok = AutoTokenizer.from_pretrained(folder)
model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
lines, sources = [], []
for src, tgt, text in rows:
    tok.src_lang = src
    batch = tok([text], return_tensors="pt")
    sources.append(batch["input_ids"][0].tolist())
    forced = tok.get_lang_id(tgt) if hasattr(tok, "get_lang_id") else tok.convert_tokens_to_ids(tgt)
    with torch.no_grad():
        out = model.generate(**batch, forced_bos_token_id=forced, num_beams=1)
    lines.append(tok.batch_decode(out, skip_special_tokens=True)[0])
print(json.dumps({"class": type(tok).__name__, "lines": lines, "sources": sources}))
"""


@pytest.fixture(scope="module", params=["m2m", "nllb"])
def round_trip(request, tmp_path_factory):
    """(kind, the imported checkpoint, the export folder, the rows)."""
    pytest.importorskip("transformers")
    from hltmt_plugin.export import importing, transformers as hf_export

    kind, base = request.param, tmp_path_factory.mktemp(f"{request.param}_round_trip")
    build = build_m2m_folder if kind == "m2m" else build_nllb_folder
    folder = build(str(base / "hf"), **({} if kind == "m2m" else {"seed": 3, "eos": 4.0}))
    done = importing.import_folder(folder, str(base / "imported"))
    hf_export.export(done["checkpoint"], str(base / "exported"), max_len=MAX_LEN)
    return kind, done["checkpoint"], str(base / "exported"), rows(codes=None if kind == "m2m" else NLLB_CODES)


def generate_alone(folder, items):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONPATH="")
    done = subprocess.run(
        [sys.executable, "-I", "-c", GENERATE, folder, json.dumps(items)], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_the_export_keeps_the_imported_tokenizer_and_generate_writes_the_checkpoints_lines(round_trip, tmp_path):
    from hltmt_plugin.hub import HltmtTranslator

    kind, checkpoint, folder, items = round_trip
    found = generate_alone(folder, items)
    assert found["class"] == {"m2m": "M2M100Tokenizer", "nllb": "NllbTokenizer"}[kind]
    record = json.load(open(os.path.join(folder, "manifest.json"), encoding="utf-8"))
    codes = {"m2m": {"de": "__de__", "en": "__en__"}, "nllb": {"deu_Latn": "deu_Latn", "eng_Latn": "eng_Latn"}}[kind]
    assert {lang: record["language_codes"][lang] for lang in codes} == codes
    assert record["source"]["tokenizer"] == found["class"] and "tokenizer_note" not in record["source"]
    mt = HltmtTranslator.load(checkpoint, device="cpu")
    d = mt.loaded.dictionary
    assert found["sources"] == [[d.index(f"__{src}__")] + mt.encode(text).tolist() for src, _, text in items]
    # hltmt-translate on the checkpoint, greedy: generate's settings but the beam
    tsv, out = tmp_path / "rows.tsv", tmp_path / "out.txt"
    tsv.write_text("".join("\t".join(r) + "\n" for r in items), encoding="utf-8")
    options = ["--beam", "1", "--max-len", str(MAX_LEN), "--input", str(tsv), "--output", str(out)]
    done = run([cli("hltmt-translate"), "--checkpoint", checkpoint, *options])
    assert done.returncode == 0, done.stderr[-2000:]
    expected = out.read_text(encoding="utf-8").splitlines()
    assert found["lines"] == expected and len(set(expected)) > 3  # different lines, some empty
    assert not any("__" in line or "_Latn" in line for line in found["lines"])  # no language token in the text
    card = open(os.path.join(folder, "README.md"), encoding="utf-8").read()
    assert "tok.src_lang = " in card and "skip_special_tokens=True" in card


def test_an_export_imported_again_keeps_its_tokenizer(round_trip, tmp_path):
    from hltmt_plugin.compat.safe_loading import load_state
    from hltmt_plugin.export import importing

    kind, checkpoint, folder, _ = round_trip
    done = importing.import_folder(folder, str(tmp_path / "again"))
    first = load_state(checkpoint)["optimizer_history"][0][tokenizers.IMPORTED_TOKENIZER]
    again = load_state(done["checkpoint"])["optimizer_history"][0][tokenizers.IMPORTED_TOKENIZER]
    assert again == first and first["tokenizer_class"] == {"m2m": "M2M100Tokenizer", "nllb": "NllbTokenizer"}[kind]


# ---- the tokenizer chosen, without a model ------------------------------------------------------


def loaded_of(langs, symbols, imported):
    history = [] if imported is None else [{IMPORTED_FROM: "facebook/m2m100_418M", **imported}]
    return SimpleNamespace(langs=langs, dictionary=SimpleNamespace(symbols=symbols), history=history)


NLLB = {tokenizers.IMPORTED_TOKENIZER: {"tokenizer_class": "NllbTokenizer", "language_codes": ["eng_Latn", "deu_Latn"]}}
NLLB_SYMBOLS = ["<s>", "<pad>", "</s>", "<unk>", "▁a", "b", "__eng_Latn__", "__deu_Latn__", "<mask>", "madeupword0000"]
SRC = {"encoder_langtok": "src", "decoder_langtok": True}


def record_of(langs, **convention):
    return {**SRC, **convention, "language_tokens": {lang: f"__{lang}__" for lang in langs}}


@pytest.mark.fast
def test_a_model_not_imported_gets_marian_codes():
    chosen = tokenizers.choose(loaded_of(["en", "de"], [], None), record_of(["en", "de"]))
    assert chosen == {"class": "MarianTokenizer", "codes": {"en": ">>en<<", "de": ">>de<<"}, "note": None}


@pytest.mark.fast
def test_an_imported_nllb_model_keeps_its_codes():
    langs = ["eng_Latn", "deu_Latn"]
    chosen = tokenizers.choose(loaded_of(langs, NLLB_SYMBOLS, NLLB), record_of(langs))
    assert chosen["class"] == "NllbTokenizer" and chosen["codes"] == {"eng_Latn": "eng_Latn", "deu_Latn": "deu_Latn"}


@pytest.mark.fast
@pytest.mark.parametrize(
    "case, convention, symbols, message",
    [
        (
            "another convention",
            {"encoder_langtok": "tgt", "decoder_langtok": False},
            NLLB_SYMBOLS,
            "the model was trained with --encoder-langtok tgt, and NllbTokenizer puts the source language's token first",
        ),
        (
            "codes in another order",
            {},
            NLLB_SYMBOLS[:6] + ["__deu_Latn__", "__eng_Latn__"] + NLLB_SYMBOLS[8:],
            "the dictionary is not laid out as NllbTokenizer's",
        ),
        ("no record", {}, NLLB_SYMBOLS, "the checkpoint does not record its import's tokenizer"),
    ],
)
def test_a_convention_the_tokenizer_cannot_keep_is_said_in_one_line(case, convention, symbols, message):
    langs = ["eng_Latn", "deu_Latn"]
    imported = {} if case == "no record" else NLLB
    chosen = tokenizers.choose(loaded_of(langs, symbols, imported), record_of(langs, **convention))
    assert chosen["class"] == "MarianTokenizer" and chosen["codes"]["deu_Latn"] == ">>deu_Latn<<"
    assert chosen["note"].startswith("the tokenizer is MarianTokenizer (>>xx<< codes), not the ")
    assert message in chosen["note"] and "\n" not in chosen["note"]


@pytest.mark.fast
@pytest.mark.parametrize(
    "imported, message",
    [
        ({"tokenizer_class": "M2M100Tokenizer", "num_madeup_words": 10**12}, "num_madeup_words"),
        ({"tokenizer_class": "M2M100Tokenizer", "num_madeup_words": "8"}, "num_madeup_words"),
        ({"tokenizer_class": 3}, "tokenizer_class"),
        ({"tokenizer_class": "NllbTokenizer", "language_codes": [1]}, "language_codes"),
        ({"language_codes": "m2m100"}, "tokenizer_class"),
    ],
)
def test_a_crafted_record_of_the_imported_tokenizer_is_refused_in_one_line(imported, message):
    """The import's record is read back from the checkpoint as every record is (records.py)."""
    from hltmt_plugin.errors import HltmtInputError

    langs = ["eng_Latn", "deu_Latn"]
    with pytest.raises(HltmtInputError, match=f"the checkpoint's record of its tokenizer.*{message}"):
        tokenizers.choose(loaded_of(langs, NLLB_SYMBOLS, {tokenizers.IMPORTED_TOKENIZER: imported}), record_of(langs))


@pytest.mark.fast
def test_the_fields_of_a_protocol_buffer():
    inner = bytes([0x0A, 1]) + b"n" + bytes([0x12, 3]) + b"map"  # field 1 "n", field 2 "map"
    message = bytes([0x08, 0x96, 0x01]) + bytes([0x1A, len(inner)]) + inner  # field 1 = 150, field 3 = inner
    assert list(tokenizers._fields(message)) == [(1, 0, 150), (3, 2, inner)]
    assert list(tokenizers._fields(inner))[1] == (2, 2, b"map")


def test_an_import_without_its_tokenizer_record_is_exported_with_marian_saying_why(round_trip, tmp_path):
    """A checkpoint whose import's record names no tokenizer (as an earlier import wrote it):
    hltmt-export says in one line why the tokenizer is MarianTokenizer, and so does the card."""
    import torch

    from hltmt_plugin.compat.safe_loading import load_state

    kind, checkpoint, _, _ = round_trip
    if kind != "m2m":
        pytest.skip("one folder is enough")
    state = load_state(checkpoint)
    del state["optimizer_history"][0][tokenizers.IMPORTED_TOKENIZER]
    older = os.path.join(os.path.dirname(checkpoint), "older.pt")  # beside its data folder's files
    torch.save(state, older)
    out = str(tmp_path / "hf")
    done = run([cli("hltmt-export"), "--to", "transformers", "--checkpoint", older, "--out", out])
    assert done.returncode == 0, done.stderr[-2000:]
    why = "the tokenizer is MarianTokenizer (>>xx<< codes), not the one the model was imported with: the checkpoint"
    note = [line for line in done.stdout.splitlines() if why in line]
    assert len(note) == 1 and note[0].startswith("hltmt-export: ")
    settings = json.load(open(os.path.join(out, "tokenizer_config.json"), encoding="utf-8"))
    assert settings["tokenizer_class"] == "MarianTokenizer"
    assert why[0].upper() + why[1:] in open(os.path.join(out, "README.md"), encoding="utf-8").read()
