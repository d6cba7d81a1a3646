"""hltmt_plugin.export.ctranslate2: tiny models trained by fairseq-train (with seeded noise on
their weights, so that every direction and route writes its own text), exported, and served
side by side with the checkpoint: the same translations, line for line, and the same scores.

Covered: HLT-MT post-norm with ``--encoder-langtok tgt`` (pool modules and the universal
layer), HLT-MT pre-norm with ``--encoder-langtok src --decoder-langtok``, fairseq's plain
``transformer`` of ``translation_multi_simple_epoch`` with both conventions; int8; refusals."""

import functools
import os
import random
from types import SimpleNamespace

import pytest

from conftest import LANGS, PAIRS, PLUGIN, ROOT, build, cli, perturbed, run, spm_of
from hub_common import DIRECTIONS, sentences

ct2 = pytest.importorskip("ctranslate2")

from hltmt_plugin.errors import HltmtConfigError  # noqa: E402
from hltmt_plugin.export.ctranslate2 import check_exportable, export  # noqa: E402
from hltmt_plugin.hub import HltmtTranslator  # noqa: E402

BEAM, MAX_LEN = 4, 20
SMALL = [
    "--encoder-layers",
    "1",
    "--decoder-layers",
    "2",
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
SRC_CONVENTION = ["--encoder-langtok", "src", "--decoder-langtok", "--lang-tok-style", "multilingual"]
SHORT = [
    "--cpu",
    "--optimizer",
    "adam",
    "--lr",
    "1e-3",
    "--max-tokens",
    "1500",
    "--disable-validation",
    "--no-save-optimizer-state",
    "--no-epoch-checkpoints",
]


def items_of(directions=DIRECTIONS, n=10, seed=1):
    items = [(src, tgt, text) for src, tgt in directions for text in sentences(src, tgt, n)]
    random.Random(seed).shuffle(items)
    return items


def assert_served_alike(checkpoint, folder, items, spm=None, exact_scores=True):
    """The checkpoint's translator and the export folder's give the same lines (and scores
    where the translation ended by itself, not cut at MAX_LEN); returns the export's results."""
    mt = HltmtTranslator.load(checkpoint, spm=spm, device="cpu")
    served = HltmtTranslator.load(folder)
    assert type(served).__name__ == "Ct2Translator"
    expected = mt.translate_batch(items, beam=BEAM, max_len=MAX_LEN, details=True, max_tokens=300)
    found = served.translate_batch(items, beam=BEAM, max_len=MAX_LEN, details=True, max_tokens=300)
    assert [r.text for r in found] == [r.text for r in expected]
    assert [r.routing for r in found] == [r.routing for r in expected]
    assert [r.tokens for r in found] == [r.tokens for r in expected]
    for mine, theirs in zip(found, expected):
        if exact_scores and theirs.tokens <= MAX_LEN:  # a cut translation: fairseq adds the forced eos
            assert mine.score == pytest.approx(theirs.score, abs=2e-3), (mine, theirs)
    assert len({r.text for r in found}) > 5  # the directions and sentences write different text
    return found


def test_hltmt_post_norm_exports_one_model_per_route_and_translates_as_the_checkpoint(hltmt, tmp_path):
    folder = str(tmp_path / "hltmt")
    record = export(hltmt, folder)
    assert record["targets"]["gu"] == record["targets"]["en"] == "universal"
    assert {record["targets"]["de"], record["targets"]["fr"]} <= {"m0", "m1"}
    assert set(record["models"]) == set(record["targets"].values())
    # the shared weights stored once: the other groups are patches of the first
    assert set(record["patches"]) == set(record["models"]) - {"m0"} and set(record["patches"].values()) == {"m0"}
    whole = os.path.getsize(os.path.join(folder, "models", "m0", "model.bin"))
    assert all(os.path.getsize(os.path.join(folder, "models", g, "model.patch")) < whole / 5 for g in record["patches"])
    found = assert_served_alike(hltmt, folder, items_of())
    assert {r.routing["slp"] for r in found} == {record["targets"][t] for _, t in DIRECTIONS}


@functools.lru_cache(maxsize=None)
def trained(data_bin, folder, name, *options):
    done = run(
        [
            cli("fairseq-train"),
            data_bin,
            "--user-dir",
            PLUGIN,
            "--langs",
            LANGS,
            "--lang-pairs",
            PAIRS,
            *options,
            *SHORT,
            "--save-dir",
            f"{folder}/{name}",
        ]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return perturbed(f"{folder}/{name}/checkpoint_last.pt", f"{folder}/{name}.pt")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return str(tmp_path_factory.mktemp("export_models"))


def test_hltmt_pre_norm_with_the_decoder_language_token_translates_as_the_checkpoint(data_bin, folder):
    ckpt = trained(
        data_bin,
        folder,
        "prenorm",
        "--task",
        "hltmt_translation",
        "--arch",
        "hltmt_transformer_tiny",
        "--high-resource-langs",
        "de,fr",
        "--slp-pool-size",
        "2",
        *SRC_CONVENTION,
        "--enable-lang-ids",
        "--encoder-normalize-before",
        "--decoder-normalize-before",
        "--high-stage-updates",
        "2",
        "--max-update",
        "4",
    )
    record = export(ckpt, f"{folder}/prenorm-export", spm=spm_of(data_bin))
    assert record["encoder_langtok"] == "src" and record["decoder_langtok"]
    assert_served_alike(ckpt, f"{folder}/prenorm-export", items_of(), spm=spm_of(data_bin))
    # each group whole: plain CTranslate2 with the source's token and the target's forced first
    whole = f"{folder}/prenorm-whole"
    record = export(ckpt, whole, spm=spm_of(data_bin), whole=True)
    served = HltmtTranslator.load(whole)
    for src, tgt in DIRECTIONS:  # this untrained model's lines run to MAX_LEN, where fairseq's choice is its own:
        lines = sentences(src, tgt, 6)  # the engine's line is one of CTranslate2's hypotheses, the first if not cut
        expected = served.translate_batch([(src, tgt, x) for x in lines], beam=BEAM, max_len=MAX_LEN, details=True)
        found = plain_translations(whole, record, src, tgt, lines, beam=BEAM, max_len=MAX_LEN, every=True)
        assert all(r.text in f and (r.tokens > MAX_LEN or r.text == f[0]) for f, r in zip(found, expected))


@pytest.mark.parametrize("convention", ["tgt", "src"])
def test_fairseqs_plain_multilingual_transformer_translates_as_the_checkpoint(data_bin, folder, convention):
    marking = ["--encoder-langtok", "tgt"] if convention == "tgt" else SRC_CONVENTION
    norm = ["--encoder-normalize-before", "--decoder-normalize-before"] if convention == "src" else []
    ckpt = trained(
        data_bin,
        folder,
        f"plain-{convention}",
        "--task",
        "translation_multi_simple_epoch",
        "--arch",
        "transformer",
        *SMALL,
        *marking,
        *norm,
        "--max-update",
        "3",
    )
    out = f"{folder}/plain-{convention}-export"
    record = export(ckpt, out, spm=spm_of(data_bin))
    assert record["models"] == {"main": "models/main"} and set(record["targets"].values()) == {"main"}
    found = assert_served_alike(ckpt, out, items_of(), spm=spm_of(data_bin))
    assert all(r.routing == {} for r in found)


def test_int8_weights_load_translate_and_are_smaller(hltmt, tmp_path):
    export(hltmt, str(tmp_path / "f32"))
    export(hltmt, str(tmp_path / "i8"), quantization="int8")
    size = lambda q: os.path.getsize(tmp_path / q / "models" / "m0" / "model.bin")  # noqa: E731 (stored whole)
    assert size("i8") < 0.5 * size("f32")
    served = HltmtTranslator.load(str(tmp_path / "i8"))
    results = served.translate_batch(items_of(n=3), beam=BEAM, max_len=MAX_LEN)
    assert len(results) == 9 and all(isinstance(r, str) for r in results)


def test_an_existing_folder_is_kept_unless_forced(hltmt, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    for force in (False, True):  # a folder hltmt-export did not write: never replaced
        with pytest.raises(HltmtConfigError, match="exists and hltmt-export did not write it"):
            export(hltmt, str(out), force=force)
    assert os.listdir(out) == ["keep.txt"] and (out / "keep.txt").read_text() == "mine"
    export(hltmt, str(tmp_path / "earlier"))
    with pytest.raises(HltmtConfigError, match="exists .written by hltmt-export.*--force"):
        export(hltmt, str(tmp_path / "earlier"))
    record = export(hltmt, str(tmp_path / "earlier"), force=True)  # an earlier export is replaced with force
    assert HltmtTranslator.load(str(tmp_path / "earlier")).folder == str(tmp_path / "earlier") and record["models"]
    assert sorted(os.listdir(tmp_path)) == ["earlier", "out"]  # no temporary folder, no lock file left
    with pytest.raises(HltmtConfigError, match="--quantization int3"):
        export(hltmt, str(tmp_path / "q"), quantization="int3")
    assert not (tmp_path / "q").exists()


@pytest.mark.parametrize(
    "options,what",
    [
        (["--language-adapters", "--enable-lang-ids"], "cannot export adapters"),
        (["--skill-ffn", "--enable-lang-ids", "--lang-pairs", "en-de,de-en,en-fr"], "cannot export skills"),
    ],
)
def test_adapters_and_skills_are_refused_in_one_line(data_bin, options, what):
    args, _, model = build(data_bin, *options)
    with pytest.raises(HltmtConfigError, match=what) as refused:
        check_exportable(SimpleNamespace(model=model, cfg=SimpleNamespace(model=args)))
    assert "\n" not in str(refused.value)


STUDY = os.path.join(ROOT, "docs", "results", "cpu-study")


@pytest.fixture(scope="module")
def whole_study(tmp_path_factory):
    """The study's HLT-MT exported with every group whole (--whole-groups)."""
    folder = str(tmp_path_factory.mktemp("whole") / "hltmt-whole")
    return folder, export(os.path.join(STUDY, "models", "hltmt.pt"), folder, whole=True)


def plain_translations(folder, record, src, tgt, lines, beam=5, max_len=200, every=False):
    """``lines`` translated by ``ctranslate2.Translator`` alone, with the convention deploying.md
    states: the language token, the pieces, ``</s>``; the target's token forced first with
    ``--decoder-langtok``. ``every``: each line's ``beam`` hypotheses, best first."""
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(folder, "spm.model"))
    model = ct2.Translator(os.path.join(folder, record["models"][record["targets"][tgt]]), intra_threads=1)
    tokens = record["language_tokens"]
    first = [tokens[tgt if record["encoder_langtok"] == "tgt" else src]]
    prefix = [[tokens[tgt]]] * len(lines) if record["decoder_langtok"] else None
    out = model.translate_batch(
        [first + sp.encode(line, out_type=str) + ["</s>"] for line in lines],
        target_prefix=prefix,
        beam_size=beam,
        max_decoding_length=max_len,
        min_decoding_length=0 if prefix else 1,
        num_hypotheses=beam if every else 1,
    )
    texts = [[sp.decode(h[1 if prefix else 0 :]) for h in o.hypotheses] for o in out]
    return texts if every else [t[0] for t in texts]


def test_whole_groups_each_open_in_plain_ctranslate2_with_the_engines_lines(whole_study):
    folder, record = whole_study
    assert record["patches"] == {} and len(record["models"]) == 4
    served = HltmtTranslator.load(folder, threads=1)
    for group in record["models"]:
        assert os.path.isfile(os.path.join(folder, record["models"][group], "model.bin"))
        tgt = next(t for t in ("de", "fi", "fr", "gu") if record["targets"][t] == group)
        with open(os.path.join(STUDY, "refs", f"en-{tgt}.en"), encoding="utf-8") as f:
            lines = [f.readline().strip() for _ in range(6)]
        expected = served.translate_batch([("en", tgt, line) for line in lines], beam=5, details=True)
        found = plain_translations(folder, record, "en", tgt, lines)
        assert [r.text for r in expected if r.tokens < 200] == [f for f, r in zip(found, expected) if r.tokens < 200]
        assert sum(r.tokens < 200 for r in expected) >= 5, group


def test_the_deploying_pages_snippet_translates_as_the_engine(whole_study):
    import contextlib
    import io

    folder, _ = whole_study
    with open(os.path.join(ROOT, "docs", "deploying.md"), encoding="utf-8") as f:
        page = f.read()
    snippet = page.split("### Using a group with CTranslate2 alone")[1].split("```python\n")[1].split("```")[0]
    assert '"exported/hltmt-whole"' in snippet
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(snippet.replace('"exported/hltmt-whole"', repr(folder)), {})
    expected = HltmtTranslator.load(folder, threads=1).translate(["The file could not be saved."], src="en", tgt="de")
    assert printed.getvalue().strip() == expected[0] and expected[0]
