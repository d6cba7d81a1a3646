"""hltmt_plugin.hub: one loaded checkpoint translates any direction, mixed in one call, with the
hypotheses and scores fairseq-generate gives for the same checkpoint, direction and beam.

Models: the session's HLT-MT checkpoint (gate map), an LS-MNMT model with MAD-X adapters (and
a language whose adapters were imported with hltmt-adapters) and an HLT-MT model with
encoder skills and a custom skill matrix (a direction it names but training never saw). Each
checkpoint's weights get seeded noise so that the untrained models write different text for
different sentences and routes (a 30-update model writes nothing), which makes a wrong
language token, source id, module or adapter show in the text and the score.

The translator and hltmt-translate serve fairseq's own multilingual checkpoints too: one loaded
plain ``transformer`` translates mixed directions in one call, each sentence as fairseq-generate
translates it.
"""

import functools
import json
import os
import random

import pytest
import torch

from conftest import LANGS, PAIRS, PLUGIN, cli, perturbed, run, spm_of
from hltmt_plugin.compat.safe_loading import load_state
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.hub import HltmtTranslator, TranslationErrors
from hub_common import (
    BEAM,
    DIRECTIONS,
    MAX_LEN,
    STUDY_MODEL,
    N,
    assert_same,
    parse_hypotheses,
    reference,
    sentences,
    task_args,
)


@functools.lru_cache(maxsize=None)
def interactive_reference(data_bin, ckpt, src, tgt, pairs=PAIRS):
    """fairseq-interactive's hypotheses (for a direction without binarized test data)."""
    done = run(
        [
            cli("fairseq-interactive"),
            *task_args(data_bin, ckpt, src, tgt, pairs=pairs),
            "--bpe",
            "sentencepiece",
            "--sentencepiece-model",
            spm_of(data_bin),
            "--buffer-size",
            "64",
            "--max-tokens",
            "3000",
        ],
        input="".join(s + "\n" for s in sentences(src, tgt)),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = parse_hypotheses(done.stdout)
    return [found[i] for i in range(len(found))]


def expected_slp(model, tgt):
    mapping = model.map_by_language()
    return f"m{mapping[tgt]}" if tgt in mapping else "universal"


def shuffled_items(directions, refs, seed=0):
    items = [
        (src, tgt, text, ref) for src, tgt in directions for text, ref in zip(sentences(src, tgt), refs[(src, tgt)])
    ]
    random.Random(seed).shuffle(items)
    return items


# ---------------------------------------------------------------------------------------
# HLT-MT


@pytest.mark.parametrize("src, tgt", DIRECTIONS)
def test_one_direction_equals_fairseq_generate(translator, data_bin, hltmt, src, tgt):
    expected = reference(data_bin, hltmt, src, tgt)[:N]
    results = translator.translate(sentences(src, tgt), src=src, tgt=tgt, beam=BEAM, max_len=MAX_LEN, details=True)
    assert_same(results, expected, f"{src}-{tgt}")
    assert len({r.text for r in results}) > 1  # the noise makes the text differ by sentence
    strings = translator.translate(sentences(src, tgt)[:3], src=src, tgt=tgt, beam=BEAM, max_len=MAX_LEN)
    assert strings == [text for text, _ in expected[:3]]


@pytest.mark.fast
def test_mixed_directions_in_one_shuffled_call_equal_fairseq_generate(translator, data_bin, hltmt):
    refs = {d: reference(data_bin, hltmt, *d)[:N] for d in DIRECTIONS}
    items = shuffled_items(DIRECTIONS, refs)
    batches = []
    results = translator.translate_batch(
        [i[:3] for i in items], beam=BEAM, max_len=MAX_LEN, details=True, max_tokens=400, progress=batches.append
    )
    assert len(batches) > 1 and sum(batches) == len(items)  # several batches, each mixing directions
    assert_same(results, [i[3] for i in items], "mixed")
    model = translator.model
    for item, result in zip(items, results):
        assert (result.src, result.tgt, result.source) == item[:3]
        assert result.routing == {"slp": expected_slp(model, item[1])}
    assert {r.routing["slp"] for r in results} >= {"universal", expected_slp(model, "de")}


def test_fairseq_hub_from_pretrained_translates(translator, hltmt, data_bin, tmp_path):
    from hltmt_plugin.models.hltmt_transformer import HltmtTransformerModel

    texts = sentences("en", "gu", 4)
    ours = translator.translate(texts, src="en", tgt="gu", beam=BEAM, max_len=MAX_LEN)
    folder, name = os.path.split(hltmt)
    named = HltmtTransformerModel.from_pretrained(
        folder,
        checkpoint_file=name,
        data_name_or_path=data_bin,
        bpe="sentencepiece",
        sentencepiece_model=spm_of(data_bin),
        source_lang="en",
        target_lang="gu",
    )
    assert named.translate(texts, beam=BEAM, max_len_b=MAX_LEN) == ours
    # found: fairseq's hub looks for sentencepiece.bpe.model beside the checkpoint
    os.symlink(hltmt, tmp_path / "model.pt")
    os.symlink(spm_of(data_bin), tmp_path / "sentencepiece.bpe.model")
    found = HltmtTransformerModel.from_pretrained(
        str(tmp_path),
        checkpoint_file="model.pt",
        data_name_or_path=data_bin,
        bpe="sentencepiece",
        source_lang="en",
        target_lang="gu",
    )
    assert found.translate(texts, beam=BEAM, max_len_b=MAX_LEN) == ours


def test_bad_sentences_fail_alone_with_their_line_numbers(translator):
    good = sentences("en", "de", 3)
    long_line = " ".join(["word"] * 1100)
    items = [
        ("en", "de", good[0]),
        ("xx", "de", "text"),
        ("en", "de", "   "),
        ("en", "de", good[1]),
        ("en", "de", long_line),
        ("en", "de", good[2]),
    ]
    with pytest.raises(TranslationErrors) as caught:
        translator.translate_batch(items, beam=BEAM, max_len=MAX_LEN)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("3 of 6 sentence(s) not translated")
    assert "line 2: unknown language 'xx' (this model knows en,de,fr,gu,hi)" in message
    assert "line 3: empty line" in message
    assert "line 5:" in message and "more than the model's 1024 source positions" in message
    alone = translator.translate(good, src="en", tgt="de", beam=BEAM, max_len=MAX_LEN)
    assert caught.value.results == [alone[0], None, None, alone[1], None, alone[2]]
    kept = translator.translate_batch(items, beam=BEAM, max_len=MAX_LEN, errors="keep", details=True, first_line=10)
    assert [r.line for r in kept if r.error] == [11, 12, 14]
    assert [r.text for r in kept if not r.error] == alone


def test_moved_data_folder_and_missing_files_are_one_line(hltmt, data_bin, tmp_path):
    state = load_state(hltmt)
    state["cfg"]["task"].data = str(tmp_path / "gone" / "bin")
    moved = str(tmp_path / "moved.pt")
    torch.save(state, moved)
    with pytest.raises(
        HltmtConfigError,
        match=r"data folder stored in the checkpoint \(.*gone/bin\) does not "
        r"exist: give data=DIR",
    ):
        HltmtTranslator.load(moved)
    again = HltmtTranslator.load(moved, data=data_bin, device="cpu")
    assert again.spm == spm_of(data_bin)
    with pytest.raises(HltmtInputError, match="does not exist"):
        HltmtTranslator.load(str(tmp_path / "none.pt"))
    with pytest.raises(HltmtConfigError, match="sentencepiece model .* does not exist"):
        HltmtTranslator.load(hltmt, spm=str(tmp_path / "none.model"))


# ---------------------------------------------------------------------------------------
# Directions outside the training directions: zero-shot only when asked, a target never produced refused


def test_a_zero_shot_direction_is_served_only_when_asked_and_marked(translator, data_bin, hltmt):
    texts = sentences("de", "en", 4)  # German sentences; the session's model never trained de-fr
    assert translator.direction("de", "fr") == "zero-shot" and translator.direction("en", "de") == "trained"
    with pytest.raises(
        TranslationErrors,
        match=r"^4 of 5 sentence\(s\) not translated: line 1: direction de-fr is "
        r"zero-shot \(the model was trained on en-de,.*\): translated only "
        r"with zero_shot=True",
    ):
        translator.translate_batch(
            [("de", "fr", t) for t in texts] + [("en", "de", "Hello.")], beam=BEAM, max_len=MAX_LEN
        )
    results = translator.translate(texts, src="de", tgt="fr", beam=BEAM, max_len=MAX_LEN, details=True, zero_shot=True)
    assert all(r.zero_shot for r in results) and results[0].to_dict()["zero_shot"] is True
    # the translation fairseq-interactive gives the same direction (which says it is zero-shot on stderr)
    done = run(
        [
            cli("fairseq-interactive"),
            *task_args(data_bin, hltmt, "de", "fr"),
            "--bpe",
            "sentencepiece",
            "--sentencepiece-model",
            spm_of(data_bin),
            "--buffer-size",
            "64",
            "--max-tokens",
            "3000",
        ],
        input="".join(t + "\n" for t in texts),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "hltmt_translation: direction de-fr is zero-shot: the checkpoint was trained on en-de," in done.stderr
    found = parse_hypotheses(done.stdout)
    assert_same(results, [found[i] for i in range(len(texts))], "de-fr")
    trained = translator.translate(["Hello."], src="en", tgt="de", details=True, zero_shot=True)[0]
    assert not trained.zero_shot and "zero_shot" not in trained.to_dict()
    with pytest.raises(HltmtConfigError, match="zero_shot must be True or False"):
        translator.translate(texts, src="de", tgt="fr", zero_shot="yes")


def test_a_target_the_model_never_produced_is_refused_per_sentence():
    mt = HltmtTranslator.load(STUDY_MODEL, device="cpu")  # English into ten languages
    assert [mt.direction(*d) for d in [("en", "de"), ("de", "en"), ("fr", "de")]] == ["trained", "refused", "refused"]
    items = [
        ("en", "de", "The file is open."),
        ("de", "en", "Hallo Welt."),
        ("fr", "de", "Bonjour."),
        ("gu", "en", "x"),
        ("xx", "de", "x"),
    ]
    results = mt.translate_batch(items, beam=2, max_len=10, details=True, errors="keep", zero_shot=True)
    assert results[0].error is None and results[0].text and not results[0].zero_shot
    assert results[1].text is None and results[1].error == (
        "direction de-en refused: the model never produced en; it was trained on en-fr,en-cs,en-de,en-fi,en-lv,"
        "en-et,en-ro,en-hi,en-tr,en-gu (targets cs,de,et,fi,fr,gu,hi,lv,ro,tr)"
    )
    assert results[2].text is None and results[2].error.startswith(
        "direction fr-de refused: the model never read fr (it was only a target)"
    )
    assert results[3].error.startswith("direction gu-en refused: the model never produced en")
    assert results[4].error.startswith("unknown language 'xx'")
    with pytest.raises(
        TranslationErrors,
        match=r"^1 of 1 sentence\(s\) not translated: line 1: direction de-en "
        r"refused",
    ):
        mt.translate(["Hallo Welt."], src="de", tgt="en", zero_shot=True)


# ---------------------------------------------------------------------------------------
# LS-MNMT with MAD-X adapters; a language imported with hltmt-adapters

MADX = ["--language-adapters", "--shared-adapters", "--decoder-adapters", "--invertible-adapters", "--enable-lang-ids"]
BASE_PAIRS = "en-de,en-fr,en-gu,de-en,gu-en"  # hi: no adapters until imported


def train(data_bin, save, *extra):
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
            "--encoder-langtok",
            "tgt",
            "--high-resource-langs",
            "de,fr",
            "--slp-pool-size",
            "2",
            "--cpu",
            "--criterion",
            "label_smoothed_cross_entropy",
            "--optimizer",
            "adam",
            "--lr",
            "2e-3",
            "--max-tokens",
            "1500",
            "--max-update",
            "1",
            "--save-dir",
            str(save),
            "--no-epoch-checkpoints",
            "--no-save-optimizer-state",
            "--disable-validation",
            "--seed",
            "3",
            "--num-workers",
            "0",
            *extra,
        ]
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return perturbed(str(save / "checkpoint_last.pt"))


@pytest.fixture(scope="module")
def ls_mnmt(data_bin, tmp_path_factory):
    return train(
        data_bin,
        tmp_path_factory.mktemp("ls_mnmt"),
        "--lang-pairs",
        BASE_PAIRS,
        "--slp-language-specific",
        "--hlt-stage",
        "all",
        *MADX,
        "--adapter-langs",
        "en,de,fr,gu",
    )


@pytest.fixture(scope="module")
def ls_mnmt_hi(ls_mnmt, tmp_path_factory):
    """hi's adapters made for this base (added at identity, then given seeded values, as
    training would) and imported with hltmt-adapters."""
    from hltmt_plugin.adapters.files import add_language, export_language, language_parameters
    from hltmt_plugin.hub.loading import load_model

    folder = tmp_path_factory.mktemp("hi_adapters")
    model = load_model(ls_mnmt)[0]
    add_language(model, "hi")
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _, p in sorted(language_parameters(model, "hi").items()):
            p.add_(torch.randn(p.shape, generator=g) * 0.3)
    export_language(model, "hi", str(folder / "hi.adapters.pt"))
    out = str(folder / "base_plus_hi.pt")
    done = run(
        [cli("hltmt-adapters"), "import", "--path", ls_mnmt, "--adapters", str(folder / "hi.adapters.pt"), "--out", out]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_ls_mnmt_with_adapters_and_an_imported_language(ls_mnmt, ls_mnmt_hi, data_bin):
    base = HltmtTranslator.load(ls_mnmt, device="cpu")
    with pytest.raises(HltmtInputError, match="no adapters for target language hi .*hltmt-adapters"):
        base.translate(["Hello."], src="en", tgt="hi")
    kept = base.translate_batch(
        [("en", "hi", "Hello."), ("hi", "en", "x"), ("en", "fr", "Hello.")],
        errors="keep",
        details=True,
        beam=BEAM,
        max_len=MAX_LEN,
    )
    assert "source language hi" in kept[1].error and kept[2].error is None and kept[2].text is not None

    mt = HltmtTranslator.load(ls_mnmt_hi, device="cpu")
    assert mt.model.map_by_language() == {"de": 0, "fr": 1}  # LS-MNMT: one module per language
    directions = [("en", "hi"), ("gu", "en"), ("en", "fr")]
    refs = {d: reference(data_bin, ls_mnmt_hi, *d)[:N] for d in directions}
    assert mt.direction("en", "hi") == "zero-shot" and mt.direction("gu", "en") == "trained"  # hi: imported
    assert_same(
        mt.translate(
            sentences("en", "hi"), src="en", tgt="hi", beam=BEAM, max_len=MAX_LEN, details=True, zero_shot=True
        ),
        refs[("en", "hi")],
        "en-hi",
    )
    items = shuffled_items(directions, refs, seed=1)
    results = mt.translate_batch([i[:3] for i in items], beam=BEAM, max_len=MAX_LEN, details=True, zero_shot=True)
    assert_same(results, [i[3] for i in items], "mixed")
    for (src, tgt, _, _), result in zip(items, results):
        assert result.routing == {
            "slp": expected_slp(mt.model, tgt),
            "adapters": {"encoder": src, "decoder": tgt, "shared": True},
        }
        assert result.zero_shot == (tgt == "hi")


# ---------------------------------------------------------------------------------------
# HLT-MT with encoder skills and a custom skill matrix


@pytest.fixture(scope="module")
def skills(data_bin, tmp_path_factory):
    folder = tmp_path_factory.mktemp("skills")
    names = ["generic", "en", "de", "fr", "gu", "hi", "to_en", "from_en"]
    directions = {
        p: ["generic", p.split("-")[0]] + (["to_en"] if p.endswith("-en") else ["from_en"]) for p in PAIRS.split(",")
    }
    directions["de-fr"] = ["generic", "de"]  # named, never trained; fr-de is not named
    (folder / "skills.json").write_text(json.dumps({"skills": names, "directions": directions}))
    ckpt = train(
        data_bin,
        folder,
        "--lang-pairs",
        PAIRS,
        "--skill-ffn",
        "--skill-attention",
        "--enable-lang-ids",
        "--skill-matrix",
        str(folder / "skills.json"),
    )
    return ckpt, directions


def test_skills_serve_an_untrained_direction_of_the_matrix(skills, data_bin):
    ckpt, matrix = skills
    mt = HltmtTranslator.load(ckpt, device="cpu")
    refs = {
        ("de", "fr"): interactive_reference(data_bin, ckpt, "de", "fr"),
        ("en", "de"): reference(data_bin, ckpt, "en", "de")[:N],
    }
    assert_same(
        mt.translate(
            sentences("de", "fr"), src="de", tgt="fr", beam=BEAM, max_len=MAX_LEN, details=True, zero_shot=True
        ),
        refs[("de", "fr")],
        "de-fr",
    )
    items = shuffled_items(list(refs), refs, seed=2)
    items.insert(3, ("fr", "de", "Bonjour.", None))
    with pytest.raises(
        TranslationErrors,
        match=r"^1 of .*: line 4: direction fr-de is not in the model's skill "
        r"matrix .*--skill-matrix",
    ):
        mt.translate_batch([i[:3] for i in items], beam=BEAM, max_len=MAX_LEN, details=True, zero_shot=True)
    results = mt.translate_batch(
        [i[:3] for i in items], beam=BEAM, max_len=MAX_LEN, details=True, errors="keep", zero_shot=True
    )
    assert results[3].error is not None
    del items[3], results[3]
    assert_same(results, [i[3] for i in items], "mixed")
    for (src, tgt, _, _), result in zip(items, results):
        assert result.routing == {
            "slp": expected_slp(mt.model, tgt),
            "skills": {"ffn": matrix[f"{src}-{tgt}"], "attention": src},
        }
        assert result.zero_shot == ((src, tgt) == ("de", "fr"))


# ---------------------------------------------------------------------------------------
# fairseq's own multilingual checkpoints: a plain ``transformer`` trained by fairseq-train with
# ``--task translation_multi_simple_epoch`` (no plugin), with either language-token convention
# (``--encoder-langtok tgt``; fairseq's ``--encoder-langtok src --decoder-langtok``). The model
# does not route, so results carry no routing.

CONVENTIONS = {
    "tgt": ["--encoder-langtok", "tgt"],
    "src": ["--encoder-langtok", "src", "--decoder-langtok", "--lang-tok-style", "multilingual"],
    "none": [],  # no language token: the model cannot be told which target to produce
}
SMALL = [
    "--encoder-layers",
    "1",
    "--decoder-layers",
    "1",
    "--encoder-embed-dim",
    "32",
    "--decoder-embed-dim",
    "32",
    "--encoder-ffn-embed-dim",
    "64",
    "--decoder-ffn-embed-dim",
    "64",
    "--encoder-attention-heads",
    "2",
    "--decoder-attention-heads",
    "2",
]


def task_options(data_bin, convention):
    return [
        data_bin,
        "--task",
        "translation_multi_simple_epoch",
        "--langs",
        LANGS,
        "--lang-pairs",
        PAIRS,
        *CONVENTIONS[convention],
    ]


@functools.lru_cache(maxsize=None)
def plain_checkpoint(data_bin, folder, convention):
    """fairseq's transformer trained a few updates by fairseq-train alone, with seeded noise on
    its weights (so that a wrong language token shows in the text)."""
    done = run(
        [
            cli("fairseq-train"),
            *task_options(data_bin, convention),
            "--arch",
            "transformer",
            *SMALL,
            "--cpu",
            "--optimizer",
            "adam",
            "--lr",
            "1e-3",
            "--max-tokens",
            "1500",
            "--max-update",
            "3",
            "--disable-validation",
            "--no-save-optimizer-state",
            "--no-epoch-checkpoints",
            "--save-dir",
            f"{folder}/{convention}",
        ]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return perturbed(f"{folder}/{convention}/checkpoint_last.pt", f"{folder}/{convention}.pt")


@functools.lru_cache(maxsize=None)
def generate(data_bin, ckpt, convention, src, tgt):
    # (--user-dir: this torch's fairseq reads a checkpoint through the plugin's safe loading)
    done = run(
        [
            cli("fairseq-generate"),
            *task_options(data_bin, convention),
            "--user-dir",
            PLUGIN,
            "-s",
            src,
            "-t",
            tgt,
            "--path",
            ckpt,
            "--cpu",
            "--beam",
            str(BEAM),
            "--max-len-b",
            str(MAX_LEN),
            "--gen-subset",
            "test",
            "--max-tokens",
            "3000",
            "--remove-bpe",
            "sentencepiece",
            "--required-batch-size-multiple",
            "1",
        ]
    )  # fairseq's task would drop a last partial batch
    assert done.returncode == 0, done.stderr[-3000:]
    found = parse_hypotheses(done.stdout)
    return [found[i] for i in range(N)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return str(tmp_path_factory.mktemp("plain_multilingual"))


@pytest.mark.parametrize("convention", ["tgt", "src"])
def test_a_plain_multilingual_transformer_translates_mixed_directions_as_fairseq_generate(data_bin, folder, convention):
    ckpt = plain_checkpoint(data_bin, folder, convention)
    items = [
        (src, tgt, text, ref)
        for src, tgt in DIRECTIONS
        for text, ref in zip(sentences(src, tgt), generate(data_bin, ckpt, convention, src, tgt))
    ]
    random.Random(1).shuffle(items)
    translator = HltmtTranslator.load(ckpt, spm=spm_of(data_bin), device="cpu")
    results = translator.translate_batch(
        [i[:3] for i in items], beam=BEAM, max_len=MAX_LEN, details=True, max_tokens=400
    )
    assert_same(results, [i[3] for i in items], f"--encoder-langtok {convention}")
    assert all(r.routing == {} for r in results)
    assert len({r.text for r in results}) > 3  # the directions and sentences write different text

    # the same mixed input through hltmt-translate
    lines = "".join(f"{s}\t{t}\t{text}\n" for s, t, text, _ in items[:12])
    done = run(
        [
            cli("hltmt-translate"),
            "--checkpoint",
            ckpt,
            "--spm",
            spm_of(data_bin),
            "--device",
            "cpu",
            "--beam",
            str(BEAM),
            "--max-len",
            str(MAX_LEN),
        ],
        input=lines,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:-1] == [ref[0] for *_, ref in items[:12]]


def test_a_model_without_a_target_token_is_refused_in_every_direction_with_the_reason(data_bin, folder):
    """fairseq's transformer trained with neither --encoder-langtok tgt nor --decoder-langtok on
    directions into several targets writes the same text whichever target is asked for: no
    direction is served, each refusal says why (hltmt_plugin.directions)."""
    mt = HltmtTranslator.load(plain_checkpoint(data_bin, folder, "none"), spm=spm_of(data_bin), device="cpu")
    assert [mt.direction(*d) for d in [("en", "de"), ("en", "fr"), ("de", "en")]] == ["refused"] * 3
    with pytest.raises(
        TranslationErrors, match="direction en-de refused: the model was trained without a token naming"
    ):
        mt.translate(["The file is open."], src="en", tgt="de", zero_shot=True)
