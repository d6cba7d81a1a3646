"""The XLM-R route of the WMT-10 recipe (examples/wmt10/run_xlmr.sh) end to end at a tiny size,
with a small RoBERTa-family checkpoint built here with its own sentencepiece model and
dictionary, laid out as fairseq's XLM-R release (model.pt, dict.txt, sentencepiece.bpe.model):
data encoded with that model and binarized with that dictionary -> MNMT, LS-MNMT and HLT-MT
(both stages) from the same initialisation, the temperature rising over the first epochs
-> generate -> report."""

import ast
import csv
import os
import re
import sys

import pytest
import torch

from conftest import ROOT, run

RECIPE = os.path.join(ROOT, "examples", "wmt10")
DEBMT10 = os.path.join(ROOT, "data", "debmt10")
SHAPE = ["--encoder-layers", "2", "--embed-dim", "64", "--ffn-dim", "128", "--heads", "4", "--decoder-layers", "1"]
TRAIN_LINES = {"de": 100, "fr": 100, "gu": 30}  # unequal, so the temperature shows in the sampling ratios


@pytest.fixture(scope="module")
def xlmr(tmp_path_factory):
    """A 2-layer RoBERTa whose sentencepiece model (BPE, unlike prepare_data's unigram) and
    dictionary (its own order, a tenth of the pieces missing, pieces of its own) are not ours."""
    import sentencepiece as spm
    from fairseq import checkpoint_utils, options, tasks

    folder = tmp_path_factory.mktemp("xlmr.base")
    lines = []
    for lang in TRAIN_LINES:
        for side in ("en", lang):
            with open(os.path.join(DEBMT10, f"train.en-{lang}.{side}"), encoding="utf-8") as f:
                lines += [next(f).strip() for _ in range(200)]
    (folder / "text.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(folder / "text.txt"),
        model_prefix=str(folder / "sentencepiece.bpe"),
        vocab_size=600,
        model_type="bpe",
        character_coverage=1.0,
        minloglevel=2,
        num_threads=1,
        hard_vocab_limit=False,
    )
    os.remove(folder / "text.txt")
    sp = spm.SentencePieceProcessor(model_file=str(folder / "sentencepiece.bpe.model"))
    pieces = sorted(
        sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not sp.is_control(i) and not sp.is_unknown(i)
    )
    kept = [p for i, p in enumerate(pieces) if i % 10 != 3] + [f"▁only_pretrained_{i}" for i in range(20)]
    (folder / "dict.txt").write_text("".join(f"{p} {len(kept) - i}\n" for i, p in enumerate(kept)), encoding="utf-8")
    args = options.parse_args_and_arch(
        options.get_training_parser(),
        [
            str(folder),
            "--task",
            "masked_lm",
            "--arch",
            "roberta_base",
            "--encoder-layers",
            "2",
            "--encoder-embed-dim",
            "64",
            "--encoder-ffn-embed-dim",
            "128",
            "--encoder-attention-heads",
            "4",
            "--tokens-per-sample",
            "128",
            "--cpu",
        ],
    )
    task = tasks.setup_task(args)
    torch.manual_seed(1)
    model = task.build_model(args)
    checkpoint_utils.torch_persistent_save({"model": model.state_dict(), "args": args}, str(folder / "model.pt"))
    return folder


@pytest.fixture(scope="module")
def recipe(xlmr, tmp_path_factory):
    folder = tmp_path_factory.mktemp("wmt10")
    done = run(
        [
            "bash",
            os.path.join(RECIPE, "run_xlmr.sh"),
            "--langs",
            "de,fr,gu",
            "--high",
            "de,fr",
            "--pool-size",
            "2",
            *SHAPE,
            "--max-train",
            "100",
            "--max-train-lang",
            "gu=30",
            "--max-valid",
            "10",
            "--max-test",
            "6",
            "--max-update",
            "12",
            "--high-updates",
            "5",
            "--temperature-epochs",
            "2",
            "--lr",
            "1e-3",
            "--warmup",
            "4",
            "--max-tokens",
            "3000",
            "--update-freq",
            "1",
            "--log-interval",
            "1",
            "--max-len-a",
            "0",
            "--max-len-b",
            "16",
            "--decode-workers",
            "2",
        ],
        env_extra={"RAW": DEBMT10, "XLMR": str(xlmr), "RUN": str(folder), "PY": sys.executable},
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    return folder / "xlmr", done.stdout


def log(run_dir, name):
    return (run_dir / "logs" / name).read_text(encoding="utf-8")


def test_the_data_is_encoded_with_the_pretrained_model_and_binarized_with_its_dictionary(xlmr, recipe):
    import sentencepiece as spm
    from fairseq.data import Dictionary, data_utils

    run_dir, _ = recipe
    data = run_dir / "data" / "bin"
    for lang in ("en", "de", "fr", "gu"):
        assert (data / f"dict.{lang}.txt").read_bytes() == (xlmr / "dict.txt").read_bytes()
    dictionary = Dictionary.load(str(xlmr / "dict.txt"))
    sp = spm.SentencePieceProcessor(model_file=str(xlmr / "sentencepiece.bpe.model"))
    binarized = data_utils.load_indexed_dataset(str(data / "test.en-gu.gu"), dictionary)
    with open(os.path.join(DEBMT10, "test.en-gu.gu"), encoding="utf-8") as f:
        for k in range(len(binarized)):
            want = [dictionary.index(p) for p in sp.encode(next(f).strip(), out_type=str)] + [dictionary.eos()]
            assert binarized[k].tolist() == want
    assert (data / "dict_fingerprint.json").exists()


def test_every_system_starts_from_the_same_pretrained_encoder(xlmr, recipe):
    run_dir, _ = recipe
    for system in ("lsmnmt", "hltmt"):
        assert f"initialised from {xlmr / 'model.pt'}: " in log(run_dir, f"train_{system}.t1.log")
    assert f"initialised from {xlmr / 'model.pt'}: " in log(run_dir, "init_mnmt.log")
    assert "loading pretrained model from" in log(run_dir, "train_mnmt.t1.log")  # --finetune-from-model
    init = torch.load(run_dir / "models" / "mnmt_init_from_xlmr.pt", map_location="cpu", weights_only=False)["model"]
    roberta = torch.load(xlmr / "model.pt", map_location="cpu", weights_only=False)["model"]
    for key in ("layers.0.self_attn.q_proj.weight", "layers.1.fc2.weight", "layernorm_embedding.weight"):
        assert torch.equal(init[f"encoder.{key}"], roberta[f"encoder.sentence_encoder.{key}"]), key
    assert init["decoder.layers.0.fc1.weight"].shape == (128, 64)


def ratios(text):
    """{direction: sampling ratio} of the last '| Upsample ratios' line of a fairseq-train log."""
    found = re.findall(r"\| Upsample ratios: (\[.*\])", text)
    return {key.split(":")[-1]: value for key, value in ast.literal_eval(found[-1])}


def test_the_temperature_rises_from_epoch_to_epoch(recipe):
    run_dir, out = recipe
    assert "temperature 1, 5 over the first epochs" in out
    first, second = log(run_dir, "train_mnmt.t1.log"), log(run_dir, "train_mnmt.t2.log")
    words = [text.splitlines()[0].split() for text in (first, second)]  # the logged command lines
    options = [dict(zip(w, w[1:])) for w in words]  # each word and the one after it
    assert (options[0]["--sampling-temperature"], options[0]["--max-epoch"]) == ("1", "1")
    assert options[1]["--sampling-temperature"] == "5" and "--max-epoch" not in options[1]
    assert re.search(r"Loaded checkpoint \S+/mnmt/checkpoint_last\.pt \(epoch 2 @ [1-9]\d* updates\)", second)
    r1, r5 = ratios(first), ratios(second)
    share = TRAIN_LINES["gu"] / TRAIN_LINES["de"]
    assert r1["en-gu"] / r1["en-de"] == pytest.approx(share, rel=0.2)  # proportional at T=1
    assert r5["en-gu"] / r5["en-de"] == pytest.approx(share ** (1 / 5), rel=0.1)  # flattened at T=5


def test_hltmt_trains_both_stages_and_the_report_covers_every_system_and_direction(recipe):
    run_dir, out = recipe
    hltmt = log(run_dir, "train_hltmt.seed1.log")
    assert "HLT-MT stage high" in hltmt
    assert re.search(
        r"HLT-MT stage all \(epoch \d+, update 5\): routing map fixed from the final stage-high gate", hltmt
    )
    assert "Stopping training due to num_updates: 12 >= max_update: 12" in hltmt
    rows = list(csv.DictReader(open(run_dir / "report" / "results.csv", encoding="utf-8")))
    assert {(r["system"], r["direction"]) for r in rows} == {
        (s, d) for s in ("mnmt", "lsmnmt", "hltmt") for d in ("en-de", "en-fr", "en-gu", "de-en", "fr-en", "gu-en")
    }
    assert all(r["sentences"] == "6" for r in rows)
    md = (run_dir / "report" / "results.md").read_text(encoding="utf-8")
    assert "WMT-10, all systems from XLM-R" in md and "hltmt − mnmt" in md
    assert (run_dir / "report" / "gate_heatmap.png").read_bytes()[:4] == b"\x89PNG"
    assert "step 10/10 report" in out


def test_missing_pretrained_files_are_one_line(tmp_path):
    done = run([sys.executable, os.path.join(RECIPE, "xlmr_recipe.py"), "--raw", DEBMT10, "--xlmr", str(tmp_path)])
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"xlmr_recipe: error: --xlmr {tmp_path} has no model.pt" in done.stderr


def test_the_recipes_languages_are_the_papers_wmt10_split():
    """run.sh spells the paper's high-resource split out for the reader; it and the recipe's
    defaults are hltmt_plugin.corpora's."""
    from hltmt_plugin.corpora import WMT10_HIGH, WMT10_LANGS

    text = open(os.path.join(RECIPE, "run.sh"), encoding="utf-8").read()
    assert re.findall(r"--high (\S+)", text) == [",".join(WMT10_HIGH)]
    sys.path.insert(0, RECIPE)
    try:
        import xlmr_recipe
    finally:
        sys.path.remove(RECIPE)
    assert (xlmr_recipe.WMT10_LANGS, xlmr_recipe.WMT10_HIGH) == (",".join(WMT10_LANGS), ",".join(WMT10_HIGH))


def test_languages_that_cannot_work_are_one_line(tmp_path):
    recipe_py = os.path.join(RECIPE, "xlmr_recipe.py")
    base = [sys.executable, recipe_py, "--raw", DEBMT10, "--xlmr", str(tmp_path), "--dry-run"]
    done = run([*base, "--langs", "de,gu", "--high", "fr"])
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "xlmr_recipe: error: --high fr not in --langs (de,gu)" in done.stderr
    done = run([*base, "--langs", "de,gu", "--run-dir", str(tmp_path / "run")])  # the paper's split among them
    assert done.returncode == 0 and " high de;" in done.stdout, done.stderr[-2000:]
