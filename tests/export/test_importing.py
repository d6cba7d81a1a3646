"""hltmt_plugin.export.importing: tiny random M2M-100-style and NLLB-200-style folders built with
transformers' own classes (tests/importing_common.py: made-up words, NllbTokenizer's offset)
imported and compared token for token with transformers (the same log-probabilities; the same
greedy translations; beam 5: fairseq's choice among ``generate``'s finished hypotheses); the
weights read from pytorch_model.bin (weights-only) and from shards as from one safetensors file;
the study's post-norm model exported with
``hltmt-export --to transformers`` (MarianMTModel) and imported back translates as the
checkpoint did; every kind of folder fairseq's model cannot hold refused in one line."""

import json
import os
import shutil
from datetime import date

import pytest

from conftest import ROOT
from importing_common import (
    MADEUP,
    NLLB_CODES,
    build_m2m_folder,
    build_nllb_folder,
    fairseq_beam_choice,
    fairseq_search_on_transformers,
    nllb_tokenizer_of,
    rows,
    shard_weights,
    tokenizer_of,
)

pytest.importorskip("transformers")

from hltmt_plugin.errors import HltmtError  # noqa: E402
from hltmt_plugin.export import importing  # noqa: E402

MAX_LEN = 40
STUDY_MODEL = os.path.join(ROOT, "docs", "results", "cpu-study", "models", "mnmt.pt")


@pytest.fixture(scope="module")
def m2m(tmp_path_factory):
    """(the transformers folder, the imported folder, what the import returned)."""
    folder = build_m2m_folder(str(tmp_path_factory.mktemp("m2m") / "hf"))
    out = str(tmp_path_factory.mktemp("m2m_imported") / "imported")
    return folder, out, importing.import_folder(folder, out)


@pytest.fixture(scope="module")
def nllb(tmp_path_factory):
    """(the NLLB-style transformers folder, the imported folder, what the import returned)."""
    # a random model whose translations end by themselves, at different lengths
    folder = build_nllb_folder(str(tmp_path_factory.mktemp("nllb") / "hf"), seed=3, eos=4.0)
    out = str(tmp_path_factory.mktemp("nllb_imported") / "imported")
    return folder, out, importing.import_folder(folder, out)


class Engines:
    """transformers' model and tokenizer, the imported checkpoint's translator, the directions."""

    def __init__(self, kind, imported):
        from transformers import M2M100ForConditionalGeneration

        from hltmt_plugin.hub import HltmtTranslator

        folder, out, done = imported
        self.kind = kind
        self.model = M2M100ForConditionalGeneration.from_pretrained(folder).eval()
        self.tok = tokenizer_of(folder) if kind == "m2m" else nllb_tokenizer_of(folder)
        self.mt = HltmtTranslator.load(done["checkpoint"], device="cpu")
        self.rows = rows(codes=None if kind == "m2m" else NLLB_CODES)
        self.first_lang = min(self.lang_id(lang) for lang in done["langs"])

    def lang_id(self, lang):
        tok = self.tok
        return tok.get_lang_id(lang) if hasattr(tok, "get_lang_id") else tok.convert_tokens_to_ids(lang)

    def same_source(self):
        """The rows whose source ids the folder's tokenizer and the import's sentencepiece model
        give alike (transformers 5's ``NllbTokenizer`` of this folder normalizes nothing: a
        "…" is one ``<unk>`` there, three "." pieces for sentencepiece and fairseq), each with
        the tokenizer's batch: (row, batch) pairs."""
        found = []
        for src, tgt, text in self.rows:
            self.tok.src_lang = src
            batch = self.tok(text, return_tensors="pt")
            if batch["input_ids"][0].tolist() == [self.lang_id(src)] + self.mt.encode(text).tolist():
                found.append(((src, tgt, text), batch))
        return found

    def text(self, ids):
        """A hypothesis's text: its pieces (no language token, no end of sentence), joined."""
        tok = self.tok
        return tok.convert_tokens_to_string([tok.convert_ids_to_tokens(i) for i in ids if 3 < i < self.first_lang])


@pytest.fixture(scope="module", params=["m2m", "nllb"])
def engines(request):
    e = Engines(request.param, request.getfixturevalue(request.param))
    return e.model, e.tok, e.mt, e


def test_the_folders_options_and_files(m2m):
    folder, out, done = m2m
    assert done["class"] == "M2M100ForConditionalGeneration" and done["norm"] == "pre"
    assert done["langs"] == ["en", "ha", "is", "ja", "cs", "ru", "zh", "de"]
    options = " ".join(done["options"])
    for option in ("--encoder-normalize-before", "--decoder-normalize-before"):
        assert option in options
    assert "--encoder-langtok src --decoder-langtok" in options and "--lang-tok-style multilingual" in options
    # the folder's lm_head is its own: fairseq's --share-all-embeddings would tie it to the embeddings
    assert "--share-decoder-input-output-embed" not in options and "--share-all-embeddings" not in options
    names = set(os.listdir(out))
    assert {"checkpoint.pt", "spm.model", "langs.txt", "dict.en.txt", "dict.de.txt"} <= names
    vocab = json.load(open(os.path.join(folder, "vocab.json"), encoding="utf-8"))
    symbols = [line.split()[0] for line in open(os.path.join(out, "dict.en.txt"), encoding="utf-8")]
    madeup = [f"madeupword{i:04d}" for i in range(MADEUP)]  # M2M-100's rows after the language tokens
    assert symbols == sorted(vocab, key=vocab.get)[4:] + [f"__{lang}__" for lang in done["langs"]] + madeup


def test_an_nllb_folders_ids_and_languages(nllb):
    folder, out, done = nllb
    tok = nllb_tokenizer_of(folder)
    assert done["langs"] == list(NLLB_CODES.values())
    symbols = ["<s>", "<pad>", "</s>", "<unk>"]
    symbols += [line.split()[0] for line in open(os.path.join(out, "dict.eng_Latn.txt"), encoding="utf-8")]
    assert len(symbols) == len(tok) + 2 and symbols[-3:] == ["<mask>", "madeupword0000", "madeupword0001"]
    tok.src_lang = "deu_Latn"
    ids = tok("Das ist ein Test der Übersetzung.")["input_ids"]
    assert symbols[ids[0]] == "__deu_Latn__" and [symbols[i] for i in ids[1:]] == tok.convert_ids_to_tokens(ids[1:])


def test_the_same_log_probabilities(engines):
    import torch

    model, tok, mt, e = engines
    for src, tgt, text in e.rows[::2]:
        tok.src_lang = src
        batch = tok(text, return_tensors="pt")
        prev = torch.tensor([[2, e.lang_id(tgt)] + batch["input_ids"][0, 1:6].tolist()])
        with torch.no_grad():
            theirs = torch.log_softmax(model(**batch, decoder_input_ids=prev).logits, -1)
            ours = torch.log_softmax(
                mt.model(batch["input_ids"], torch.tensor([batch["input_ids"].shape[1]]), prev)[0], -1
            )
        assert (theirs - ours).abs().max() < 1e-4


def test_greedy_translations_are_generates(engines):
    model, tok, mt, e = engines
    found, expected = [], []
    for src, tgt, text in e.rows:
        tok.src_lang = src
        batch = tok(text, return_tensors="pt")
        out = model.generate(
            **batch,
            forced_bos_token_id=e.lang_id(tgt),
            num_beams=1,
            do_sample=False,
            max_new_tokens=MAX_LEN + 1,
            forced_eos_token_id=2,
            suppress_tokens=[1],
        )
        expected.append(e.text(out[0, 1:].tolist()))
    found = mt.translate_batch(e.rows, beam=1, max_len=MAX_LEN)
    assert found == expected
    assert len(set(found)) >= 3  # not one line for all


def test_beam_5_is_fairseqs_search_over_the_folders_own_model(engines):
    """The import's beam 5 against fairseq's beam search written out over transformers' own
    model (tests/importing_common.py), token for token on both folders, on the rows the two
    tokenizations give alike (:meth:`Engines.same_source`)."""
    model, tok, mt, e = engines
    same = e.same_source()
    assert len(same) >= len(e.rows) - 2 and (e.kind == "nllb" or len(same) == len(e.rows))
    expected = [
        e.text(fairseq_search_on_transformers(model, batch, e.lang_id(tgt), MAX_LEN)) for (_, tgt, _), batch in same
    ]
    found = mt.translate_batch([row for row, _ in same], beam=5, max_len=MAX_LEN)
    assert found == expected
    assert len(set(found)) > 5 and len({len(t) for t in found}) > 3  # different lines, different lengths


def test_beam_5_picks_fairseqs_choice_among_generates_hypotheses(engines):
    """fairseq counts the forced target-language token's log-probability in a hypothesis's
    score, ``generate`` does not: among generate's five finished hypotheses, the best by
    fairseq's score is fairseq's translation (the rows the two tokenizations give alike)."""
    model, tok, mt, e = engines
    same = e.same_source()
    expected = [e.text(fairseq_beam_choice(model, batch, e.lang_id(tgt), MAX_LEN)) for (_, tgt, _), batch in same]
    found = mt.translate_batch([row for row, _ in same], beam=5, max_len=MAX_LEN)
    assert found == expected
    assert len(set(found)) > 5 and len({len(t) for t in found}) > 3  # different lines, different lengths


def test_an_exported_model_imported_back_translates_as_the_checkpoint(tmp_path):
    from hltmt_plugin.export import transformers as hf_export
    from hltmt_plugin.hub import HltmtTranslator

    hf_export.export(STUDY_MODEL, str(tmp_path / "hf"))
    done = importing.import_folder(str(tmp_path / "hf"), str(tmp_path / "back"))
    assert done["class"] == "MarianMTModel" and done["norm"] == "post"
    lines = []
    for tgt in ("de", "fr", "gu"):
        with open(os.path.join(ROOT, "docs", "results", "cpu-study", "refs", f"en-{tgt}.en"), encoding="utf-8") as f:
            lines += [("en", tgt, line.rstrip("\n")) for line in list(f)[:8]]
    before = HltmtTranslator.load(STUDY_MODEL, device="cpu").translate_batch(lines, beam=5)
    after = HltmtTranslator.load(done["checkpoint"], device="cpu").translate_batch(lines, beam=5)
    assert after == before and len(set(before)) > 10


# ---- refusals ------------------------------------------------------------------------------


def _copy(m2m, tmp_path):
    folder = str(tmp_path / "hf")
    shutil.copytree(m2m[0], folder)
    return folder


def _edit_weights(folder, edit):
    from safetensors.torch import load_file, save_file

    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    edit(tensors)
    save_file(tensors, path, metadata={"format": "pt"})


def _edit_json(folder, name, **changes):
    path = os.path.join(folder, name)
    record = json.load(open(path, encoding="utf-8"))
    record.update(changes)
    json.dump(record, open(path, "w", encoding="utf-8"))


def _extra(t):
    import torch

    t["model.encoder.layers.0.gate.weight"] = torch.zeros(2)


def _shape(t):
    t["model.encoder.layers.1.fc1.weight"] = t["model.encoder.layers.1.fc1.weight"][:32]


def _bias(t):
    import torch

    t["final_logits_bias"] = torch.ones(1, t["lm_head.weight"].shape[0])


def _pickle(folder, extra):
    """model.safetensors as pytorch_model.bin, with ``extra`` beside its tensors."""
    import torch
    from safetensors.torch import load_file

    tensors = load_file(os.path.join(folder, "model.safetensors"))
    os.remove(os.path.join(folder, "model.safetensors"))
    torch.save(
        extra if isinstance(extra, list) else {**tensors, **({} if extra is None else {"x": extra})},
        os.path.join(folder, "pytorch_model.bin"),
    )


@pytest.mark.parametrize("files", ["pytorch_model.bin", "shards"])
def test_pickled_and_sharded_weights_import_as_one_safetensors_file(files, m2m, tmp_path):
    from hltmt_plugin.compat.safe_loading import load_state

    folder = _copy(m2m, tmp_path)
    _pickle(folder, None) if files == "pytorch_model.bin" else shard_weights(folder)
    done = importing.import_folder(folder, str(tmp_path / "out"))
    ours, theirs = load_state(done["checkpoint"])["model"], load_state(m2m[2]["checkpoint"])["model"]
    assert ours.keys() == theirs.keys() and all(ours[k].equal(theirs[k]) for k in ours)


def test_nllb_language_ids_other_than_nllbs_are_refused(nllb, tmp_path):
    """A tokenizer.json whose language codes come before <mask> (transformers' order when it adds
    them itself, not NLLB's dictionary's): refused, nothing written."""
    path = os.path.join(_copy(nllb, tmp_path), "tokenizer.json")
    record = json.load(open(path, encoding="utf-8"))
    ids = {t["content"]: t["id"] for t in record["added_tokens"]}
    mask, codes = ids["<mask>"], [ids[c] for c in NLLB_CODES.values()]
    for t in record["added_tokens"]:
        if t["content"] == "<mask>" or t["content"] in NLLB_CODES.values():
            t["id"] = {mask: min(codes), **{c: c + 1 for c in codes}}[t["id"]]
    record["model"]["vocab"] = {
        k: {mask: min(codes), **{c: c + 1 for c in codes}}.get(v, v) for k, v in record["model"]["vocab"].items()
    }
    json.dump(record, open(path, "w", encoding="utf-8"))
    with pytest.raises(HltmtError, match="the language codes and <mask> have the ids") as caught:
        importing.import_folder(os.path.dirname(path), str(tmp_path / "out"))
    assert "\n" not in str(caught.value) and not os.path.exists(tmp_path / "out")


REFUSALS = {
    "an unknown weight": (lambda f: _edit_weights(f, _extra), "model.encoder.layers.0.gate.weight has no place"),
    "a missing weight": (
        lambda f: _edit_weights(f, lambda t: t.pop("model.decoder.layers.1.fc2.bias")),
        "the weights do not fit fairseq's transformer (Missing key",
    ),
    "a shape that does not fit": (lambda f: _edit_weights(f, _shape), "size mismatch"),
    "an output bias": (lambda f: _edit_weights(f, _bias), "final_logits_bias is not zero"),
    "pickled weights holding code": (lambda f: _pickle(f, date.today()), "refused to load checkpoint"),
    "pickled weights not tensors": (lambda f: _pickle(f, [1, 2]), "is not a map of weight names to tensors"),
    "no weights": (lambda f: os.remove(os.path.join(f, "model.safetensors")), "has no weights (model.safetensors"),
    "a shard the folder lacks": (
        lambda f: shard_weights(f, drop=True),
        "names model-00002-of-00002.safetensors, which",
    ),
    "fewer made-up rows than the tokenizer names": (
        lambda f: _edit_json(f, "tokenizer_config.json", num_madeup_words=7),
        "the tokenizer names 7 rows after them",
    ),
    "another activation": (
        lambda f: _edit_json(f, "config.json", activation_function="quick_gelu"),
        "activation_function 'quick_gelu' has no fairseq counterpart",
    ),
    "another decoder start": (
        lambda f: _edit_json(f, "config.json", decoder_start_token_id=1),
        "decoder_start_token_id 1",
    ),
    "rows beyond the vocabulary": (
        lambda f: _edit_json(f, "config.json", vocab_size=400),
        "the model has 400 embedding rows",
    ),
    "a config without a field": (
        lambda f: _edit_json(f, "config.json", d_model=None),
        "field 'd_model'",
    ),
    "another tokenizer": (
        lambda f: _edit_json(f, "tokenizer_config.json", tokenizer_class="T5Tokenizer"),
        "tokenizer T5Tokenizer is not one hltmt-import reads",
    ),
    "another model type": (
        lambda f: _edit_json(f, "config.json", model_type="bart"),
        "field 'model_type'",
    ),
    # the folder's own references stay in the folder (paths.in_folder)
    "a sentencepiece model named outside the folder": (
        lambda f: _edit_json(f, "tokenizer_config.json", spm_file="/etc/passwd"),
        "'/etc/passwd' lies outside",
    ),
    "a sentencepiece model named above the folder": (
        lambda f: _edit_json(f, "tokenizer_config.json", spm_file="../x.model"),
        "'../x.model' lies outside",
    ),
    "a sentencepiece model that is a link out of the folder": (
        lambda f: _link_out(f, "sentencepiece.bpe.model"),
        "'sentencepiece.bpe.model' is a link that leads outside",
    ),
    "a weight shard that is a link out of the folder": (
        lambda f: (shard_weights(f), _link_out(f, "model-00002-of-00002.safetensors")),
        "'model-00002-of-00002.safetensors' is a link that leads outside",
    ),
    # the tokenizer's files consistent with the vocabulary they claim
    "a sentencepiece model that is not one": (
        lambda f: open(os.path.join(f, "sentencepiece.bpe.model"), "wb").write(b"\x00garbage" * 50),
        "sentencepiece.bpe.model is not a sentencepiece model",
    ),
    "a sentencepiece model of another vocabulary": (
        lambda f: _other_spm(f),
        "are not pieces of the sentencepiece model",
    ),
    "language codes that are not a name": (
        lambda f: _edit_json(f, "tokenizer_config.json", language_codes=["en", "de"]),
        "field 'language_codes'",
    ),
    # the one check of a model: options fairseq's modules accept, finite weights
    "heads that do not divide the model's dimension": (
        lambda f: _edit_json(f, "config.json", encoder_attention_heads=3),
        "--encoder-attention-heads 3 does not divide --encoder-embed-dim",
    ),
    "a dropout that is not a probability": (
        lambda f: _edit_json(f, "config.json", dropout=5.0),
        "--dropout 5.0 is not a probability",
    ),
    "an activation fairseq's options do not offer": (
        lambda f: _edit_json(f, "config.json", activation_function="swish"),
        "activation_function 'swish' has no fairseq counterpart",
    ),
    "a weight holding NaN": (lambda f: _edit_weights(f, _nan), "holds NaN"),
    "a pickled weight holding an infinity": (lambda f: (_edit_weights(f, _inf), _pickle(f, None)), "holds an infinity"),
}


def _link_out(folder, name):
    outside = os.path.join(os.path.dirname(folder), "outside-" + name)
    shutil.move(os.path.join(folder, name), outside)
    os.symlink(outside, os.path.join(folder, name))


def _other_spm(folder):
    from importing_common import _spm

    other = os.path.join(os.path.dirname(folder), "other")
    os.makedirs(other)
    _spm(other, model_type="bpe")
    shutil.copyfile(os.path.join(other, "sentencepiece.bpe.model"), os.path.join(folder, "sentencepiece.bpe.model"))


def _nan(t, value=float("nan")):
    name = "model.decoder.layers.0.fc1.weight"
    t[name] = t[name].clone()
    t[name][0, 0] = value


def _inf(t):
    _nan(t, float("-inf"))


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_what_fairseq_cannot_hold_is_refused_in_one_line(case, m2m, tmp_path):
    plant, message = REFUSALS[case]
    folder = _copy(m2m, tmp_path)
    plant(folder)
    with pytest.raises(HltmtError) as caught:
        importing.import_folder(folder, str(tmp_path / "out"))
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert not os.path.exists(tmp_path / "out")  # nothing half-written


def test_a_position_table_that_is_not_fairseqs_is_refused():
    import torch

    config = {"encoder_layers": 1, "decoder_layers": 1, "tie_word_embeddings": True}
    tensors = {"model.shared.weight": torch.zeros(8, 4), "model.encoder.embed_positions.weight": torch.rand(6, 4)}
    with pytest.raises(HltmtError, match="embed_positions.weight is not fairseq's sinusoidal table"):
        importing.fairseq_state(tensors, config, "post", "x")


TOKENIZER_FILES = {  # the folder's tokenizer.json, as transformers would be handed it
    "an empty record": ("{}", "is empty: a partial record"),
    "added tokens that are not a list": ('{"added_tokens": 5, "model": {}}', "field 'added_tokens' must be a list"),
    "a token without an id": ('{"added_tokens": [{"content": "x"}], "model": {}}', "lacks 'id'"),
    "nesting 100,000 levels deep": ("[" * 100_000 + "]" * 100_000, "nests more than"),
    "not JSON": ("{", "is not valid JSON"),
}


# the tokenizer's own record has a schema; any other JSON file of the folder is bounded in size and depth
READ_FIRST = [(case, "tokenizer.json") for case in sorted(TOKENIZER_FILES)] + [
    (case, name)
    for name in ("special_tokens_map.json", "added_tokens.json")
    for case in ("nesting 100,000 levels deep", "not JSON")
]


@pytest.mark.parametrize("case, name", READ_FIRST)
def test_an_nllb_tokenizer_file_goes_through_the_one_reader_first(case, name, nllb, tmp_path):
    """Every JSON file of the folder that transformers' tokenizer may open, the folder's own or
    one it does not hold yet, is read through the one reader before transformers parses it."""
    text, message = TOKENIZER_FILES[case]
    folder = _copy(nllb, tmp_path)
    with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
        f.write(text)
    with pytest.raises(HltmtError) as caught:
        importing.import_folder(folder, str(tmp_path / "out"))
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert not os.path.exists(tmp_path / "out")


def test_a_pool_export_is_refused_naming_a_subfolder_which_imports(tmp_path):
    """A folder of one model per group of targets is refused in one line naming a subfolder to
    import; that subfolder imports as a model of the group's directions, translating them as the
    checkpoint does."""
    from hltmt_plugin.export import transformers as hf_export
    from hltmt_plugin.hub import HltmtTranslator

    checkpoint = os.path.join(ROOT, "docs", "results", "cpu-study", "models", "hltmt.pt")
    pool = str(tmp_path / "pool")
    hf_export.export(checkpoint, pool)
    with pytest.raises(HltmtError) as caught:
        importing.import_folder(pool, str(tmp_path / "out"))
    message = str(caught.value)
    assert "pool folders are not imported" in message and "\n" not in message
    assert f"--model {os.path.join(pool, 'models', 'm0')} (targets cs, de)" in message
    assert not os.path.exists(tmp_path / "out")
    done = importing.import_folder(os.path.join(pool, "models", "m0"), str(tmp_path / "m0"))
    assert done["class"] == "MarianMTModel"
    assert sorted(p for p in done["options"][done["options"].index("--lang-pairs") + 1].split(",")) == [
        "en-cs",
        "en-de",
    ]
    with open(os.path.join(ROOT, "docs", "results", "cpu-study", "refs", "en-de.en"), encoding="utf-8") as f:
        lines = [("en", tgt, line.rstrip("\n")) for line in list(f)[:6] for tgt in ("de", "cs")]
    before = HltmtTranslator.load(checkpoint, device="cpu").translate_batch(lines, beam=5)
    after = HltmtTranslator.load(done["checkpoint"], device="cpu").translate_batch(lines, beam=5)
    assert after == before and len(set(before)) > 6


def test_the_import_records_the_name_of_the_model_it_read(m2m, tmp_path):
    """The import's entry of the checkpoint's history names the model read: the Hub's name its
    config.json records, else the folder's own name (never the machine's path)."""
    from hltmt_plugin.compat.safe_loading import load_state

    history = load_state(m2m[2]["checkpoint"])["optimizer_history"]
    assert history[0][importing.IMPORTED_FROM] == os.path.basename(m2m[0])  # the test folder records no Hub name
    folder = _copy(m2m, tmp_path)
    assert importing.source_name(folder, {"_name_or_path": "facebook/m2m100_418M"}) == "facebook/m2m100_418M"
    assert importing.source_name(folder, {"_name_or_path": "/home/me/models/m2m"}) == "hf"
