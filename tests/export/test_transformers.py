"""hltmt_plugin.export.transformers: each export loaded in a fresh process by ``transformers``
alone (offline, no plugin, no fairseq) and translated with ``generate`` and the folder's own
settings, against ``hltmt-translate`` on the checkpoint: the study's three models on their test
sources (beam 5), and tiny fairseq-train models for the other variants (fairseq's plain
``transformer`` post-norm with ``--encoder-langtok tgt`` and pre-norm with ``--encoder-langtok src
--decoder-langtok``; HLT-MT pre-norm with the decoder's language token). Refusals in one line."""

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from conftest import LANGS, PAIRS, PLUGIN, ROOT, cli, perturbed, run, spm_of
from hub_common import sentences

pytest.importorskip("transformers")

from hltmt_plugin.errors import HltmtConfigError  # noqa: E402
from hltmt_plugin.export import transformers as hf_export  # noqa: E402

STUDY = os.path.join(ROOT, "docs", "results", "cpu-study")
MAX_LEN = 20  # the tiny models' translations
TARGETS = ["fr", "cs", "de", "fi", "lv", "et", "ro", "hi", "tr", "gu"]

# transformers alone: the lines `generate` writes for (src, tgt, text) rows, with the folder's settings
GENERATE = r"""
import json, os, sys, time
start = time.perf_counter()
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
folder, rows_path, out_path = sys.argv[1:4]
overrides = json.loads(sys.argv[4])
record = json.load(open(os.path.join(folder, "manifest.json")))
tok = AutoTokenizer.from_pretrained(folder)
models = {g: AutoModelForSeq2SeqLM.from_pretrained(os.path.join(folder, p)).eval() for g, p in record["models"].items()}
loaded = time.perf_counter() - start
rows = [line.rstrip("\n").split("\t") for line in open(rows_path, encoding="utf-8")]
codes = record["language_codes"]
groups = {}
for i, (src, tgt, text) in enumerate(rows):
    forced = tgt if record["decoder_langtok"] else None
    groups.setdefault((record["targets"][tgt], forced), []).append(i)
out, scored = [None] * len(rows), [None] * len(rows)
for (group, forced), index in groups.items():
    for s in range(0, len(index), 32):
        chunk = index[s : s + 32]
        side = record["encoder_langtok"]
        texts = [f"{codes[rows[i][1] if side == 'tgt' else rows[i][0]]} {rows[i][2]}" for i in chunk]
        batch = tok(texts, return_tensors="pt", padding=True)
        extra = {"forced_bos_token_id": tok.convert_tokens_to_ids(codes[forced])} if forced else {}
        with torch.no_grad():
            generated = models[group].generate(**batch, **extra, **overrides)
        for i, line in zip(chunk, tok.batch_decode(generated, skip_special_tokens=True)):
            out[i] = line
        # each translation's tokens (after the decoder's start) and the model's log-probability of each
        with torch.no_grad():
            logits = models[group](**batch, decoder_input_ids=generated[:, :-1]).logits
        chosen = torch.log_softmax(logits.float(), -1).gather(-1, generated[:, 1:, None])[..., 0]
        for k, i in enumerate(chunk):
            ids = generated[k, 1:].tolist()
            n = ids.index(tok.eos_token_id) + 1 if tok.eos_token_id in ids else len(ids)
            scored[i] = {"ids": ids[:n], "log_probs": chosen[k, :n].tolist()}
open(out_path, "w", encoding="utf-8").write("".join(line + "\n" for line in out))
json.dump(scored, open(out_path + ".json", "w"))
assert not [m for m in sys.modules if m.startswith(("hltmt_plugin", "fairseq"))], "the plugin or fairseq was imported"
print(json.dumps({"load_s": round(loaded, 2)}))
"""


def generate_alone(folder, rows, tmp_path, scores=False, **overrides):
    """``generate``'s lines for ``rows`` in a fresh process that imports transformers only (with
    ``scores``, also each line's token ids and the exported model's log-probability of each)."""
    tsv, out = tmp_path / "rows.tsv", tmp_path / "generated.txt"
    tsv.write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONPATH="")
    done = subprocess.run(
        [sys.executable, "-I", "-c", GENERATE, str(folder), str(tsv), str(out), json.dumps(overrides)],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = out.read_text(encoding="utf-8").splitlines()
    return (lines, json.loads((tmp_path / "generated.txt.json").read_text())) if scores else lines


def fairseq_log_probs(mt, row, ids):
    """The checkpoint's log-probability of each of ``ids`` as the translation of ``row``:
    fairseq's search with ``ids`` forced (its positional scores of a forced prefix are the model's)."""
    import torch

    src, tgt, text = row
    entries = mt._datasets([(0, src, tgt, mt.encode(text))])
    sample = next(iter(mt._batches(entries, 4000, 1)))
    generator = mt.generator(beam=1, max_len=len(ids) + 1)
    with torch.no_grad():
        hypos = generator.generate([mt.model], sample, prefix_tokens=torch.tensor([ids]))
    return hypos[0][0]["positional_scores"][: len(ids)].tolist()


def translate_checkpoint(checkpoint, rows, tmp_path, *options):
    """``hltmt-translate``'s lines for ``rows`` on the checkpoint."""
    tsv, out = tmp_path / "rows-ckpt.tsv", tmp_path / "checkpoint.txt"
    tsv.write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
    done = run(
        [cli("hltmt-translate"), "--checkpoint", checkpoint, "--input", str(tsv), "--output", str(out), *options]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out.read_text(encoding="utf-8").splitlines()


def identical(a, b):
    assert len(a) == len(b)
    return sum(x == y for x, y in zip(a, b)) / len(a)


@pytest.mark.fast
def test_the_search_settings_are_fairseqs():
    import transformers
    from fairseq.data import Dictionary

    d = Dictionary()
    translator = SimpleNamespace(dictionary=d)
    found = hf_export.generation_config(transformers, translator, {"beam": 4, "lenpen": 0.6, "max_len": 30})
    assert (found.num_beams, found.length_penalty, found.early_stopping) == (4, 0.6, True)
    assert found.max_new_tokens == 31 and found.min_new_tokens == 1  # max_len tokens, then the end of sentence
    assert found.decoder_start_token_id == found.eos_token_id == found.forced_eos_token_id == d.eos()
    assert found.suppress_tokens == [d.pad()]
    assert hf_export.language_code("de") == ">>de<<"


@pytest.mark.parametrize("name", ["mnmt", "hltmt", "lsmnmt"])
def test_the_study_models_generate_the_checkpoints_lines(name, tmp_path):
    checkpoint = os.path.join(STUDY, "models", f"{name}.pt")
    done = run([cli("hltmt-export"), "--to", "transformers", "--checkpoint", checkpoint, "--out", str(tmp_path / name)])
    assert done.returncode == 0 and "MarianMTModel" in done.stdout, done.stderr[-2000:]
    record = json.loads((tmp_path / name / "manifest.json").read_text())
    assert record["engine"] == "transformers" and record["source"]["class"] == "MarianMTModel"
    groups = {"mnmt": 1, "hltmt": 4, "lsmnmt": 11}[name]
    assert len(record["models"]) == groups
    rows = []
    for tgt in TARGETS:
        with open(os.path.join(STUDY, "refs", f"en-{tgt}.en"), encoding="utf-8") as f:
            rows += [("en", tgt, line.rstrip("\n")) for line in list(f)[:15]]
    expected = translate_checkpoint(checkpoint, rows, tmp_path, "--beam", "5")
    found = generate_alone(tmp_path / name, rows, tmp_path)
    assert identical(found, expected) >= 0.99
    card = (tmp_path / name / "README.md").read_text(encoding="utf-8")
    assert card.startswith("---\nlanguage:\n- en\n") and "pipeline_tag" not in card  # no pipeline in transformers 5
    assert "en-de" in card and "fairseq-train" in card
    # each model's config.json names the targets it serves; transformers 4 and 5 read the tokenizer's codes
    for group, place in record["models"].items():
        config = json.loads((tmp_path / name / place / "config.json").read_text())
        served = sorted(lang for lang, by in record["targets"].items() if by == group)
        assert config["hltmt"] == {"group": group, "targets": served, "codes": [f">>{lang}<<" for lang in served]}
    settings = json.loads((tmp_path / name / "tokenizer_config.json").read_text())
    assert sorted(settings["additional_special_tokens"]) == sorted(record["language_codes"].values())
    assert "extra_special_tokens" not in settings  # a list under that name: transformers 4 cannot load it
    pointer = (tmp_path / name / "config.json").read_text()  # a pool model's folder: which subfolder to load
    assert (groups == 1) == ('"model_type": "marian"' in pointer)
    assert (groups > 1) == ("load one: subfolder='models/" in pointer)


# transformers alone on a pool folder's root: the tokenizer, then a model of the root itself
ROOT_LOAD = r"""
import sys
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
print(type(tok).__name__)
try:
    AutoModelForSeq2SeqLM.from_pretrained(sys.argv[1])
except ValueError as error:
    print(str(error).splitlines()[0])
"""


def test_a_pool_folders_tokenizer_loads_without_a_model_type_warning(tmp_path):
    """The pool folder's root: transformers' tokenizer loads with nothing on stderr (no "You are
    using a model of type" warning), a model of the root itself fails naming the subfolders."""
    hf_export.export(os.path.join(STUDY, "models", "hltmt.pt"), str(tmp_path / "pool"))
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH="")
    done = subprocess.run(
        [sys.executable, "-I", "-c", ROOT_LOAD, str(tmp_path / "pool")], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "model of type" not in done.stderr and done.stderr.strip() == "", done.stderr[-2000:]
    tokenizer, failure = done.stdout.splitlines()
    assert tokenizer == "MarianTokenizer"
    assert "load one: subfolder='models/m0' for cs, de; subfolder='models/m1' for fi" in failure
    pointer = json.loads((tmp_path / "pool" / "config.json").read_text(encoding="utf-8"))
    assert pointer["hltmt"]["models"]["models/m0"] == ["cs", "de"]


SMALL = "--encoder-layers 1 --decoder-layers 2 --encoder-embed-dim 32 --decoder-embed-dim 32 --encoder-ffn-embed-dim 64"
SMALL += " --decoder-ffn-embed-dim 64 --encoder-attention-heads 2 --decoder-attention-heads 2"
SHORT = "--cpu --optimizer adam --lr 1e-3 --max-tokens 1500 --disable-validation --no-save-optimizer-state"
SHORT += " --no-epoch-checkpoints --max-update 4"
SRC_CONVENTION = "--encoder-langtok src --decoder-langtok --lang-tok-style multilingual"
PRE_NORM = "--encoder-normalize-before --decoder-normalize-before"
VARIANTS = {
    "plain-post-tgt": ("translation_multi_simple_epoch", "transformer", f"{SMALL} --encoder-langtok tgt"),
    "plain-pre-src": ("translation_multi_simple_epoch", "transformer", f"{SMALL} {SRC_CONVENTION} {PRE_NORM}"),
    "hltmt-pre-src": (
        "hltmt_translation",
        "hltmt_transformer_tiny",
        f"--high-resource-langs de,fr --slp-pool-size 2 --high-stage-updates 2 --enable-lang-ids "
        f"{SRC_CONVENTION} {PRE_NORM}",
    ),
}


@pytest.fixture(scope="module")
def variants(data_bin, tmp_path_factory):
    """variant -> its checkpoint (trained once, with seeded noise on its weights)."""
    folder, made = tmp_path_factory.mktemp("hf_variants"), {}

    def checkpoint(variant):
        if variant not in made:
            task, arch, options = VARIANTS[variant]
            save = folder / variant
            done = run(
                [cli("fairseq-train"), data_bin, "--user-dir", PLUGIN, "--langs", LANGS, "--lang-pairs", PAIRS]
                + ["--task", task, "--arch", arch, *options.split(), *SHORT.split(), "--save-dir", str(save)]
            )
            assert done.returncode == 0, done.stderr[-3000:]
            made[variant] = perturbed(str(save / "checkpoint_last.pt"), str(folder / f"{variant}.pt"), scale=0.15)
        return made[variant]

    return checkpoint


def variant_rows():
    return [(s, t, text) for s, t in (("en", "de"), ("en", "gu"), ("de", "en")) for text in sentences(s, t, 12)]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_each_variant_generates_the_checkpoints_lines(variant, variants, data_bin, tmp_path):
    from hltmt_plugin.hub import HltmtTranslator

    checkpoint = variants(variant)
    record = hf_export.export(checkpoint, str(tmp_path / "out"), spm=spm_of(data_bin), max_len=MAX_LEN)
    assert record["source"]["class"] == ("M2M100ForConditionalGeneration" if "pre" in variant else "MarianMTModel")
    rows = variant_rows()
    mt = HltmtTranslator.load(checkpoint, spm=spm_of(data_bin), device="cpu")
    expected = mt.translate_batch(rows, beam=5, max_len=MAX_LEN, details=True)
    found, scored = generate_alone(tmp_path / "out", rows, tmp_path, scores=True)
    assert len({r.text for r in expected}) > 5  # the directions and sentences write different text
    # the same model: the checkpoint's log-probability of each token generate chose is the export's
    for row, mine in zip(rows, scored):
        theirs = fairseq_log_probs(mt, row, mine["ids"])
        assert max(abs(a - b) for a, b in zip(mine["log_probs"], theirs)) < 2e-4, (row, mine, theirs)
    # these noised models never end a line by themselves: every translation is cut at MAX_LEN, where
    # generate gives the forced end of sentence no log-probability and fairseq its own
    print(variant, identical(found, [r.text for r in expected]))


@pytest.mark.parametrize(
    "layout,message",
    [
        ({"encoder_adapters": True}, "cannot export adapters to transformers"),
        ({"skills": True}, "cannot export skills to transformers"),
    ],
)
def test_what_cannot_go_is_refused_in_one_line(layout, message):
    encoder = SimpleNamespace(adapter_layout=object() if "encoder_adapters" in layout else None)
    encoder.skill_layout = object() if "skills" in layout else None
    model = SimpleNamespace(encoder=encoder, decoder=SimpleNamespace(adapter_layout=None))
    with pytest.raises(HltmtConfigError, match=message):
        hf_export.check_exportable(SimpleNamespace(model=model))
