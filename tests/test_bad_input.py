"""The bad-input table (docs/bad-input.md), tried through the real command lines: each case
gives one clear line and a non-zero exit, no traceback, and no output that looks complete."""
import os
import subprocess
import sys

import pytest

from conftest import PAIRS, PLUGIN, ROOT, cli, run, train_args

PREPARE = cli("hltmt-prepare-data")
TRAIN_MIN = ["--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000", "--max-update", "1"]


def generate_args(data_bin, ckpt, *extra, langs="en,de,fr,gu,hi"):
    return [data_bin, "--user-dir", PLUGIN, "--task", "hltmt_translation", "--langs", langs, "--lang-pairs", PAIRS,
            "--encoder-langtok", "tgt", "-s", "en", "-t", "de", "--path", ckpt, "--cpu", "--gen-subset", "test",
            *extra]


def assert_clear(done, message, prefix="hltmt_plugin: error:"):
    assert done.returncode != 0, done.stdout[-1500:]
    assert prefix in done.stderr and message in done.stderr, done.stderr[-1500:]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("extra, message", [
    (["--lang-pairs", "en-de,en-xx"], "language(s) xx of --lang-pairs not in --langs"),
    (["--langs", "en,de,fr,gu,hi,ro", "--lang-pairs", "en-de,en-ro"], "has no dictionary for ro"),
    (["--lang-pairs", "en-de,de-gu"], "has no valid data for de-gu"),
    (["--lang-pairs", "en-de,ende"], "ende is not SRC-TGT"),
    (["--slp-pool-size", "0"], "--slp-pool-size must lie in [1, 2]"),
])
def test_training_options(data_bin, tmp_path, extra, message):
    done = run([cli("fairseq-train"), *train_args(data_bin, *TRAIN_MIN, "--save-dir", str(tmp_path / "s"), *extra)])
    assert_clear(done, message)
    assert not (tmp_path / "s").exists() or not os.listdir(tmp_path / "s")


def test_checkpoint_of_another_model(data_bin, trained):
    ckpt, _ = trained
    # one language fewer: another vocabulary, so another embedding matrix; the language list
    # saved with the weights names the difference first
    done = run([cli("fairseq-generate"), *generate_args(data_bin, ckpt, langs="en,de,fr,gu")])
    assert_clear(done, "the checkpoint was trained with the languages en,de,fr,gu,hi (in this order) and these "
                       "options give en,de,fr,gu")


def test_truncated_and_missing_checkpoints(data_bin, trained, tmp_path):
    ckpt, _ = trained
    cut = tmp_path / "cut.pt"
    cut.write_bytes(open(ckpt, "rb").read()[:50000])
    assert_clear(run([cli("fairseq-generate"), *generate_args(data_bin, str(cut))]), "truncated or not a checkpoint")
    assert_clear(run([cli("fairseq-generate"), *generate_args(data_bin, str(tmp_path / "none.pt"))]),
                 "checkpoint does not exist")


def write(folder, name, lines):
    (folder / name).write_text("".join(x + "\n" for x in lines), encoding="utf-8")


@pytest.fixture()
def raw(tmp_path):
    folder = tmp_path / "raw"
    folder.mkdir()
    en = [f"the file number {i} is open" for i in range(40)]
    de = [f"die Datei Nummer {i} ist offen" for i in range(40)]
    for split in ("train", "valid", "test"):
        write(folder, f"{split}.en-de.en", en)
        write(folder, f"{split}.en-de.de", de)
    return folder


def prepare(raw, out, *extra):
    return run([PREPARE, "--raw", str(raw), "--out", str(out), "--langs", "de", "--vocab-size", "60",
                *extra])


def test_empty_and_ten_thousand_token_training_lines_are_dropped(raw, tmp_path):
    write(raw, "train.en-de.en", ["", "x " * 10000, "a short line"] + ["the file is open"] * 30)
    write(raw, "train.en-de.de", ["leer", "y " * 10000, ""] + ["die Datei ist offen"] * 30)
    done = prepare(raw, tmp_path / "out")
    assert done.returncode == 0, done.stderr[-1500:]
    assert "dropped 3 pairs with an empty side or over 250 words" in done.stdout
    assert (tmp_path / "out" / "bin" / "train.en-de.en.idx").exists()


@pytest.mark.parametrize("lines, message", [
    (["ok"] * 10 + [""] + ["ok"] * 29, "line 11 is empty"),
    (["ok"] * 39 + ["word " * 10000], "line 40 has 50000 pieces, more than --max-eval-pieces 1000"),
])
def test_unusable_evaluation_lines_are_errors(raw, tmp_path, lines, message):
    write(raw, "test.en-de.en", lines)
    done = prepare(raw, tmp_path / "out")
    assert_clear(done, message, prefix="hltmt-prepare-data: error:")
    assert not (tmp_path / "out" / "bin").exists()


def test_missing_sentencepiece_model(raw, tmp_path):
    done = prepare(raw, tmp_path / "out", "--spm-model", str(tmp_path / "none.model"))
    assert_clear(done, "--spm-model", prefix="hltmt-prepare-data: error:")
    assert not (tmp_path / "out" / "bin").exists()


@pytest.mark.parametrize("extra, message", [
    (["--vocab-size", "10"], "--vocab-size 10 is too small for this text: it has"),
    (["--workers", "0"], "--workers must be at least 1, got 0"),
    (["--max-train", "0"], "--max-train must be at least 1, got 0"),
    (["--dict", "dict.txt"], "--dict needs --spm-model"),
])
def test_unusable_prepare_options_are_one_line(raw, tmp_path, extra, message):
    done = prepare(raw, tmp_path / "out", *extra)
    assert_clear(done, message, prefix="hltmt-prepare-data: error:")
    assert not (tmp_path / "out" / "bin").exists()


def test_an_unwritable_output_folder_is_one_line_before_any_work(raw, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder\n")
    done = prepare(raw, blocker / "out")
    assert_clear(done, f"cannot write to --out {blocker / 'out'}: Not a directory", prefix="hltmt-prepare-data: error:")
    assert "training a" not in done.stdout  # refused before the sentencepiece model


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    """A sentencepiece model of the raw fixture's text."""
    import sentencepiece as spm

    folder = tmp_path_factory.mktemp("spm")
    (folder / "text.txt").write_text("".join(f"the file number {i} is open\ndie Datei Nummer {i} ist offen\n"
                                             for i in range(40)), encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(folder / "text.txt"), model_prefix=str(folder / "m"), vocab_size=40,
                                   hard_vocab_limit=False,
                                   character_coverage=1.0, minloglevel=2, num_threads=1)
    return str(folder / "m.model")


@pytest.mark.parametrize("content, message", [
    ("▁the 5\nno-count-here\n", "line 2 is not 'SYMBOL COUNT' (a fairseq dictionary)"),
    ("▁the 5\n▁the 3\n", "line 2 repeats the symbol '▁the'"),
    ("".join(f"▁other_model_piece_{i} 1\n" for i in range(50)), "does not belong to --spm-model"),
    ("", "is empty"),
])
def test_a_fixed_dictionary_that_cannot_be_used_is_one_line(raw, tmp_path, spm_model, content, message):
    path = tmp_path / "dict.txt"
    path.write_text(content, encoding="utf-8")
    done = prepare(raw, tmp_path / "out", "--spm-model", spm_model, "--dict", str(path))
    assert_clear(done, message, prefix="hltmt-prepare-data: error:")
    assert not (tmp_path / "out" / "bin").exists()


def test_a_file_that_is_not_a_sentencepiece_model_is_one_line(raw, tmp_path):
    fake = tmp_path / "fake.model"
    fake.write_bytes(b"\x00not a model" * 10)
    done = prepare(raw, tmp_path / "out", "--spm-model", str(fake))
    assert_clear(done, "is not a sentencepiece model", prefix="hltmt-prepare-data: error:")


def test_launch_help_is_help_and_a_missing_separator_is_one_line():
    launch = cli("hltmt-launch")
    done = run([launch, "--help"])
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert "usage: hltmt-launch [options] -- FAIRSEQ_TRAIN_ARGUMENTS" in done.stdout and "(default: 2)" in done.stdout
    done = run([launch, "--nproc", "2", "data-bin"])
    assert_clear(done, "put the fairseq-train arguments after --", prefix="hltmt-launch: error:")


def test_launch_keeps_fairseqs_start_up_noise_out_of_its_output(data_bin, tmp_path):
    launch = cli("hltmt-launch")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}  # not the suite's PYTHONWARNINGS=ignore
    done = subprocess.run([launch, "--nproc", "1", "--", *train_args(
        data_bin, *TRAIN_MIN, "--save-dir", str(tmp_path / "s"), "--criterion", "hltmt_cross_entropy")],
        capture_output=True, text=True, cwd=ROOT, env=dict(env, OMP_NUM_THREADS="1"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "done training" in done.stdout
    for noise in ("UserWarning", "FutureWarning", "tensorboardX"):
        assert noise not in done.stdout + done.stderr, noise
