"""hltmt_plugin.hub: one loaded checkpoint translates any direction, mixed in one call, with the
hypotheses and scores fairseq-generate gives for the same checkpoint, direction and beam.

Models: the session's HLT-MT checkpoint (gate map), an LS-MNMT model with MAD-X adapters (and
a language whose adapters were imported with hltmt-adapters) and an HLT-MT model with
encoder skills and a custom skill matrix (a direction it names but training never saw). Each
checkpoint's weights get seeded noise so that the untrained models write different text for
different sentences and routes (a 30-update model writes nothing), which makes a wrong
language token, source id, module or adapter show in the text and the score.
"""
import functools
import json
import os
import random
import sys

import pytest
import torch

from conftest import LANGS, PAIRS, PLUGIN, ROOT, TEST_SIZE, cli, run

from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.hub import HltmtTranslator, TranslationErrors

BEAM, MAX_LEN = 4, 20
N = 12  # sentences per direction given to the API (fairseq-generate decodes the whole test set)
RAW = os.path.join(ROOT, "data", "debmt10")


def spm_of(data_bin):
    return os.path.join(os.path.dirname(data_bin), "spm", "spm.model")


def sentences(src, tgt, n=N):
    other = tgt if src == "en" else src
    with open(os.path.join(RAW, f"test.en-{other}.{src}"), encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f][:min(n, TEST_SIZE)]


def perturbed(path, out=None, scale=0.3, seed=0):
    """A copy of checkpoint ``path`` with seeded noise on every weight (made once)."""
    out = out or path + f".noise{scale}.pt"
    if not os.path.exists(out):
        state = torch.load(path, map_location="cpu", weights_only=True)
        g = torch.Generator().manual_seed(seed)
        for name in sorted(state["model"]):
            t = state["model"][name]
            if t.is_floating_point():
                t.add_(torch.randn(t.shape, generator=g) * scale)
        torch.save(state, out + ".tmp")
        os.replace(out + ".tmp", out)
    return out


def task_args(data_bin, ckpt, src, tgt, langs=LANGS, pairs=PAIRS):
    return [data_bin, "--user-dir", PLUGIN, "--task", "hltmt_translation", "--langs", langs, "--lang-pairs", pairs,
            "--encoder-langtok", "tgt", "-s", src, "-t", tgt, "--path", ckpt, "--cpu", "--beam", str(BEAM),
            "--max-len-b", str(MAX_LEN)]


def parse_hypotheses(stdout):
    """{sentence id: (detokenized text, score)} from fairseq's D- lines."""
    found = {}
    for line in stdout.splitlines():
        if line.startswith("D-"):
            fields = line[2:].split("\t")
            found[int(fields[0])] = (fields[2] if len(fields) > 2 else "", float(fields[1]))
    return found


@functools.lru_cache(maxsize=None)
def reference(data_bin, ckpt, src, tgt, pairs=PAIRS):
    """fairseq-generate's hypotheses for the test set of ``src-tgt``, in test-set order."""
    done = run([cli("fairseq-generate"), *task_args(data_bin, ckpt, src, tgt, pairs=pairs), "--gen-subset", "test",
                "--max-tokens", "3000", "--remove-bpe", "sentencepiece"])
    assert done.returncode == 0, done.stderr[-3000:]
    found = parse_hypotheses(done.stdout)
    assert sorted(found) == list(range(TEST_SIZE))
    return [found[i] for i in range(TEST_SIZE)]


@functools.lru_cache(maxsize=None)
def interactive_reference(data_bin, ckpt, src, tgt, pairs=PAIRS):
    """fairseq-interactive's hypotheses (for a direction without binarized test data)."""
    done = run([cli("fairseq-interactive"), *task_args(data_bin, ckpt, src, tgt, pairs=pairs), "--bpe",
                "sentencepiece", "--sentencepiece-model", spm_of(data_bin), "--buffer-size", "64",
                "--max-tokens", "3000"], input="".join(s + "\n" for s in sentences(src, tgt)))
    assert done.returncode == 0, done.stderr[-3000:]
    found = parse_hypotheses(done.stdout)
    return [found[i] for i in range(len(found))]


def assert_same(results, expected, what):
    for k, (result, (text, score)) in enumerate(zip(results, expected)):
        assert result.error is None, f"{what} #{k}: {result.error}"
        assert result.text == text, f"{what} #{k}: {result.text!r} != fairseq's {text!r}"
        assert result.score == pytest.approx(score, abs=1e-3), f"{what} #{k}: score"
    assert len(results) == len(expected)


def expected_slp(model, tgt):
    mapping = model.routing_map()
    return f"m{mapping[tgt]}" if tgt in mapping else "universal"


def shuffled_items(directions, refs, seed=0):
    items = [(src, tgt, text, ref) for src, tgt in directions
             for text, ref in zip(sentences(src, tgt), refs[(src, tgt)])]
    random.Random(seed).shuffle(items)
    return items


# ---------------------------------------------------------------------------------------
# HLT-MT


def noisy_hltmt(trained, tmp_path_factory):
    """The session's HLT-MT checkpoint with noise, in one place per session (shared with
    test_translate_cli.py, so fairseq-generate runs once per direction)."""
    folder = tmp_path_factory.getbasetemp() / "hub_checkpoints"
    folder.mkdir(exist_ok=True)
    return perturbed(trained[0], str(folder / "hltmt.pt"))


@pytest.fixture(scope="module")
def hltmt(trained, tmp_path_factory):
    return noisy_hltmt(trained, tmp_path_factory)


@pytest.fixture(scope="module")
def translator(hltmt, data_bin):
    return HltmtTranslator.load(hltmt, device="cpu")  # data folder and spm model: found from the checkpoint


DIRECTIONS = [("en", "de"), ("en", "gu"), ("de", "en")]  # pool module, universal layer, into en


@pytest.mark.parametrize("src, tgt", DIRECTIONS)
def test_one_direction_equals_fairseq_generate(translator, data_bin, hltmt, src, tgt):
    expected = reference(data_bin, hltmt, src, tgt)[:N]
    results = translator.translate(sentences(src, tgt), src=src, tgt=tgt, beam=BEAM, max_len=MAX_LEN, details=True)
    assert_same(results, expected, f"{src}-{tgt}")
    assert len({r.text for r in results}) > 1  # the noise makes the text differ by sentence
    strings = translator.translate(sentences(src, tgt)[:3], src=src, tgt=tgt, beam=BEAM, max_len=MAX_LEN)
    assert strings == [text for text, _ in expected[:3]]


def test_mixed_directions_in_one_shuffled_call_equal_fairseq_generate(translator, data_bin, hltmt):
    refs = {d: reference(data_bin, hltmt, *d)[:N] for d in DIRECTIONS}
    items = shuffled_items(DIRECTIONS, refs)
    batches = []
    results = translator.translate_batch([i[:3] for i in items], beam=BEAM, max_len=MAX_LEN, details=True,
                                         max_tokens=400, progress=batches.append)
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
    named = HltmtTransformerModel.from_pretrained(folder, checkpoint_file=name, data_name_or_path=data_bin,
                                                  bpe="sentencepiece", sentencepiece_model=spm_of(data_bin),
                                                  source_lang="en", target_lang="gu")
    assert named.translate(texts, beam=BEAM, max_len_b=MAX_LEN) == ours
    # found: fairseq's hub looks for sentencepiece.bpe.model beside the checkpoint
    os.symlink(hltmt, tmp_path / "model.pt")
    os.symlink(spm_of(data_bin), tmp_path / "sentencepiece.bpe.model")
    found = HltmtTransformerModel.from_pretrained(str(tmp_path), checkpoint_file="model.pt",
                                                  data_name_or_path=data_bin, bpe="sentencepiece",
                                                  source_lang="en", target_lang="gu")
    assert found.translate(texts, beam=BEAM, max_len_b=MAX_LEN) == ours


def test_bad_sentences_fail_alone_with_their_line_numbers(translator):
    good = sentences("en", "de", 3)
    long_line = " ".join(["word"] * 1100)
    items = [("en", "de", good[0]), ("xx", "de", "text"), ("en", "de", "   "), ("en", "de", good[1]),
             ("en", "de", long_line), ("en", "de", good[2])]
    with pytest.raises(TranslationErrors) as caught:
        translator.translate_batch(items, beam=BEAM, max_len=MAX_LEN)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("3 of 6 sentence(s) not translated")
    assert "line 2: unknown language 'xx' (this model knows en,de,fr,gu,hi)" in message
    assert "line 3: empty line" in message
    assert "line 5:" in message and "more than the model's 1024 source positions" in message
    alone = translator.translate(good, src="en", tgt="de", beam=BEAM, max_len=MAX_LEN)
    assert caught.value.results == [alone[0], None, None, alone[1], None, alone[2]]
    kept = translator.translate_batch(items, beam=BEAM, max_len=MAX_LEN, errors="keep", details=True,
                                      first_line=10)
    assert [r.line for r in kept if r.error] == [11, 12, 14]
    assert [r.text for r in kept if not r.error] == alone


def test_moved_data_folder_and_missing_files_are_one_line(hltmt, data_bin, tmp_path):
    state = torch.load(hltmt, map_location="cpu", weights_only=True)
    state["cfg"]["task"].data = str(tmp_path / "gone" / "bin")
    moved = str(tmp_path / "moved.pt")
    torch.save(state, moved)
    with pytest.raises(HltmtConfigError, match=r"data folder stored in the checkpoint \(.*gone/bin\) does not "
                                               r"exist: give data=DIR"):
        HltmtTranslator.load(moved)
    again = HltmtTranslator.load(moved, data=data_bin, device="cpu")
    assert again.spm == spm_of(data_bin)
    with pytest.raises(HltmtInputError, match="does not exist"):
        HltmtTranslator.load(str(tmp_path / "none.pt"))
    with pytest.raises(HltmtConfigError, match="sentencepiece model .* does not exist"):
        HltmtTranslator.load(hltmt, spm=str(tmp_path / "none.model"))


# ---------------------------------------------------------------------------------------
# LS-MNMT with MAD-X adapters; a language imported with hltmt-adapters

MADX = ["--language-adapters", "--shared-adapters", "--decoder-adapters", "--invertible-adapters", "--enable-lang-ids"]
BASE_PAIRS = "en-de,en-fr,en-gu,de-en,gu-en"  # hi: no adapters until imported


def train(data_bin, save, *extra):
    done = run([cli("fairseq-train"), data_bin, "--user-dir", PLUGIN, "--task", "hltmt_translation",
                "--arch", "hltmt_transformer_tiny", "--langs", LANGS, "--encoder-langtok", "tgt",
                "--high-resource-langs", "de,fr", "--slp-pool-size", "2", "--cpu", "--criterion",
                "label_smoothed_cross_entropy", "--optimizer", "adam", "--lr", "2e-3", "--max-tokens", "1500",
                "--max-update", "1", "--save-dir", str(save), "--no-epoch-checkpoints", "--no-save-optimizer-state",
                "--disable-validation",
                "--seed", "3", "--num-workers", "0", *extra])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return perturbed(str(save / "checkpoint_last.pt"))


@pytest.fixture(scope="module")
def ls_mnmt(data_bin, tmp_path_factory):
    return train(data_bin, tmp_path_factory.mktemp("ls_mnmt"), "--lang-pairs", BASE_PAIRS, "--slp-language-specific",
                 "--hlt-stage", "all", *MADX, "--adapter-langs", "en,de,fr,gu")


@pytest.fixture(scope="module")
def ls_mnmt_hi(ls_mnmt, tmp_path_factory):
    """hi's adapters made for this base (added at identity, then given seeded values, as
    training would) and imported with hltmt-adapters."""
    from fairseq import checkpoint_utils

    from hltmt_plugin.adapters.files import add_language, export_language, language_parameters

    folder = tmp_path_factory.mktemp("hi_adapters")
    models, _, _ = checkpoint_utils.load_model_ensemble_and_task([ls_mnmt])
    model = models[0]
    add_language(model, "hi")
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _, p in sorted(language_parameters(model, "hi").items()):
            p.add_(torch.randn(p.shape, generator=g) * 0.3)
    export_language(model, "hi", str(folder / "hi.adapters.pt"))
    out = str(folder / "base_plus_hi.pt")
    done = run([cli("hltmt-adapters"), "import", "--path", ls_mnmt,
                "--adapters", str(folder / "hi.adapters.pt"), "--out", out])
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_ls_mnmt_with_adapters_and_an_imported_language(ls_mnmt, ls_mnmt_hi, data_bin):
    base = HltmtTranslator.load(ls_mnmt, device="cpu")
    with pytest.raises(HltmtInputError, match="no adapters for target language hi .*hltmt-adapters"):
        base.translate(["Hello."], src="en", tgt="hi")
    kept = base.translate_batch([("en", "hi", "Hello."), ("hi", "en", "x"), ("en", "fr", "Hello.")],
                                errors="keep", details=True, beam=BEAM, max_len=MAX_LEN)
    assert "source language hi" in kept[1].error and kept[2].error is None and kept[2].text is not None

    mt = HltmtTranslator.load(ls_mnmt_hi, device="cpu")
    assert mt.model.routing_map() == {"de": 0, "fr": 1}  # LS-MNMT: one module per language
    directions = [("en", "hi"), ("gu", "en"), ("en", "fr")]
    refs = {d: reference(data_bin, ls_mnmt_hi, *d)[:N] for d in directions}
    assert_same(mt.translate(sentences("en", "hi"), src="en", tgt="hi", beam=BEAM, max_len=MAX_LEN, details=True),
                refs[("en", "hi")], "en-hi")
    items = shuffled_items(directions, refs, seed=1)
    results = mt.translate_batch([i[:3] for i in items], beam=BEAM, max_len=MAX_LEN, details=True)
    assert_same(results, [i[3] for i in items], "mixed")
    for (src, tgt, _, _), result in zip(items, results):
        assert result.routing == {"slp": expected_slp(mt.model, tgt),
                                  "adapters": {"encoder": src, "decoder": tgt, "shared": True}}


# ---------------------------------------------------------------------------------------
# HLT-MT with encoder skills and a custom skill matrix


@pytest.fixture(scope="module")
def skills(data_bin, tmp_path_factory):
    folder = tmp_path_factory.mktemp("skills")
    names = ["generic", "en", "de", "fr", "gu", "hi", "to_en", "from_en"]
    directions = {p: ["generic", p.split("-")[0]] + (["to_en"] if p.endswith("-en") else ["from_en"])
                  for p in PAIRS.split(",")}
    directions["de-fr"] = ["generic", "de"]  # named, never trained; fr-de is not named
    (folder / "skills.json").write_text(json.dumps({"skills": names, "directions": directions}))
    ckpt = train(data_bin, folder, "--lang-pairs", PAIRS, "--skill-ffn", "--skill-attention", "--enable-lang-ids",
                 "--skill-matrix", str(folder / "skills.json"))
    return ckpt, directions


def test_skills_serve_an_untrained_direction_of_the_matrix(skills, data_bin):
    ckpt, matrix = skills
    mt = HltmtTranslator.load(ckpt, device="cpu")
    refs = {("de", "fr"): interactive_reference(data_bin, ckpt, "de", "fr"),
            ("en", "de"): reference(data_bin, ckpt, "en", "de")[:N]}
    assert_same(mt.translate(sentences("de", "fr"), src="de", tgt="fr", beam=BEAM, max_len=MAX_LEN, details=True),
                refs[("de", "fr")], "de-fr")
    items = shuffled_items(list(refs), refs, seed=2)
    items.insert(3, ("fr", "de", "Bonjour.", None))
    with pytest.raises(TranslationErrors, match=r"^1 of .*: line 4: direction fr-de is not in the model's skill "
                                                r"matrix .*--skill-matrix"):
        mt.translate_batch([i[:3] for i in items], beam=BEAM, max_len=MAX_LEN, details=True)
    results = mt.translate_batch([i[:3] for i in items], beam=BEAM, max_len=MAX_LEN, details=True, errors="keep")
    assert results[3].error is not None
    del items[3], results[3]
    assert_same(results, [i[3] for i in items], "mixed")
    for (src, tgt, _, _), result in zip(items, results):
        assert result.routing == {"slp": expected_slp(mt.model, tgt),
                                  "skills": {"ffn": matrix[f"{src}-{tgt}"], "attention": src}}
