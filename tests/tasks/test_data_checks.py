"""The data folder, languages, dictionaries and split files the options name
(hltmt_plugin/tasks/data_checks.py), checked through the real fairseq-train, fairseq-generate and
fairseq-interactive: one line instead of a traceback for options the data cannot serve, broken
binarized files, dictionaries or language-token options other than the checkpoint's, and an
input line longer than the model's source positions reported while the others are translated."""

import os
import re
import shutil

import pytest
import torch

from conftest import (
    DECODE_EN_DE,
    LIKE_TRAINED,
    ONE_UPDATE,
    WITH_A_LONG_LINE,
    assert_clear,
    assert_one_error_line,
    cli,
    decode,
    hypotheses,
    run,
    spm_of,
    train_args,
    updates,
)
from hltmt_plugin.compat.safe_loading import load_state


# ---- options the data cannot serve
@pytest.mark.parametrize(
    "extra, message",
    [
        (["--lang-pairs", "en-de,en-xx"], "language(s) xx of --lang-pairs not in --langs"),
        (["--langs", "en,de,fr,gu,hi,ro", "--lang-pairs", "en-de,en-ro"], "has no dictionary for ro"),
        (["--lang-pairs", "en-de,de-gu"], "has no valid data for de-gu"),
        (["--lang-pairs", "en-de,ende"], "ende is not SRC-TGT"),
        (["--slp-pool-size", "0"], "--slp-pool-size must lie in [1, 2]"),
    ],
)
def test_training_options(data_bin, tmp_path, extra, message):
    done = run([cli("fairseq-train"), *train_args(data_bin, *ONE_UPDATE, "--save-dir", str(tmp_path / "s"), *extra)])
    assert_clear(done, message, whole_output=False)
    assert not (tmp_path / "s").exists() or not os.listdir(tmp_path / "s")


# ---- the language list, read as fairseq reads it
def test_the_language_list_is_fairseqs_own_reading_of_langs_or_lang_dict(tmp_path):
    from argparse import Namespace

    from hltmt_plugin.errors import HltmtConfigError
    from hltmt_plugin.tasks.data_checks import task_languages

    listed = tmp_path / "langs.txt"
    listed.write_text("en\n\nde \nfr\n")
    assert task_languages(Namespace(langs="en, de,fr", lang_dict=None)) == ["en", "de", "fr"]
    assert task_languages(Namespace(langs=["en", "de"], lang_dict=None)) == ["en", "de"]
    assert task_languages(Namespace(langs=None, lang_dict=str(listed))) == ["en", "de", "fr"]
    assert task_languages(Namespace(langs=None, lang_dict=None)) is None
    with pytest.raises(HltmtConfigError, match="does not exist"):
        task_languages(Namespace(langs=None, lang_dict=str(tmp_path / "none.txt")))
    with pytest.raises(HltmtConfigError, match="--langs or --lang-dict, not both"):
        task_languages(Namespace(langs="en,de", lang_dict=str(listed)))


@pytest.mark.fast
def test_the_plugins_reading_of_the_language_list_logs_nothing_and_leaves_fairseqs_logger_as_it_was(tmp_path, caplog):
    """fairseq logs the list each time it reads it (and reads it again when the task is set up):
    the plugin's reading before it is silent, and fairseq's logger keeps its level."""
    import logging
    from argparse import Namespace

    from fairseq.data.multilingual.multilingual_data_manager import MultilingualDatasetManager

    from hltmt_plugin.tasks.data_checks import task_languages

    listed = tmp_path / "langs.txt"
    listed.write_text("en\nde\n")
    fairseq_log = logging.getLogger(MultilingualDatasetManager.__module__)
    before = fairseq_log.level
    with caplog.at_level(logging.INFO):
        fairseq_log.setLevel(logging.INFO)
        assert task_languages(Namespace(langs=None, lang_dict=str(listed))) == ["en", "de"]
        assert task_languages(Namespace(langs="en,de", lang_dict=None)) == ["en", "de"]
        assert fairseq_log.level == logging.INFO  # as the program set it
        fairseq_log.setLevel(before)
    assert [r.getMessage() for r in caplog.records if r.name == fairseq_log.name] == []


# ---- truncated or empty binarized files: one line naming the file
def broken_copy(data_bin, tmp_path, name, cut):
    """A copy of the data folder whose file ``name`` is cut to ``cut`` bytes."""
    folder = tmp_path / "bin"
    shutil.copytree(data_bin, folder)
    with open(folder / name, "r+b") as f:
        f.truncate(cut)
    return str(folder)


@pytest.mark.parametrize(
    "name, cut, message",
    [
        ("test.en-de.de.bin", 1000, "test.en-de.de.bin is truncated: its index lists 37 sentences in"),
        ("test.en-de.en.bin", 0, "test.en-de.en.bin is empty: its index lists 37 sentences"),
        ("test.en-de.de.idx", 0, "test.en-de.de.idx is empty (0 bytes), not a fairseq index"),
        (
            "test.en-de.en.idx",
            100,
            "test.en-de.en.idx is truncated: an index of 37 sentences has 470 bytes, this one 100",
        ),
    ],
)
def test_broken_binarized_files_are_one_line_naming_the_file(data_bin, trained, tmp_path, name, cut, message):
    folder = broken_copy(data_bin, tmp_path, name, cut)
    done = run([cli("fairseq-generate"), folder, *DECODE_EN_DE, "--path", trained[0]])
    assert_clear(done, message)
    assert "binarize the data again" in done.stderr


def test_a_truncated_training_file_is_one_line_before_the_first_update(data_bin, tmp_path):
    folder = broken_copy(data_bin, tmp_path, "train.en-fr.fr.bin", 5000)
    done = run(
        [
            cli("fairseq-train"),
            *train_args(folder, *LIKE_TRAINED, "--save-dir", str(tmp_path / "s"), "--max-update", "2"),
        ]
    )
    assert_clear(done, "train.en-fr.fr.bin is truncated: its index lists")
    assert updates(done.stdout) == []


# ---- dictionaries other than the checkpoint's
def test_decoding_with_a_data_folder_whose_dictionaries_differ_from_the_checkpoints_is_one_line(
    data_bin, trained, tmp_path
):
    """Another binarized folder (its own fingerprint in order) whose dictionaries are not the
    ones the model was trained with: token ids would mean other words."""
    from hltmt_plugin.data_fingerprint import write_fingerprint

    folder = tmp_path / "bin"
    shutil.copytree(data_bin, folder)
    for lang in ("en", "de", "fr", "gu", "hi"):
        lines = (folder / f"dict.{lang}.txt").read_text(encoding="utf-8").splitlines(keepends=True)
        lines[10], lines[11] = lines[11], lines[10]
        (folder / f"dict.{lang}.txt").write_text("".join(lines), encoding="utf-8")
    write_fingerprint(str(folder))
    done = run([cli("fairseq-generate"), str(folder), *DECODE_EN_DE, "--path", trained[0]])
    line = assert_one_error_line(
        done,
        "the checkpoint does not fit: dictionaries: dict.de.txt, dict.en.txt, "
        "dict.fr.txt, dict.gu.txt, dict.hi.txt differ in content",
    )
    assert "vocabulary: checkpoint" in line and "(same size, other symbols)" in line


def test_a_dictionary_built_otherwise_than_at_training_is_refused(data_bin, trained, tmp_path):
    """--fixed-dictionary of the same symbols in another order: every token id would mean
    another piece."""
    lines = open(os.path.join(data_bin, "dict.en.txt"), encoding="utf-8").read().splitlines(keepends=True)
    lines[10], lines[11] = lines[11], lines[10]
    (tmp_path / "dict.txt").write_text("".join(lines), encoding="utf-8")
    done = decode(data_bin, trained[0], "--encoder-langtok", "tgt", "--fixed-dictionary", str(tmp_path / "dict.txt"))
    assert_one_error_line(done, "the checkpoint does not fit: vocabulary: checkpoint", "(same size, other symbols)")


# ---- options that mark languages otherwise than training
MARKING = [
    (["--encoder-langtok", "tgt", "--decoder-langtok"], ["--decoder-langtok: checkpoint off, given on"]),
    (
        ["--encoder-langtok", "tgt", "--lang-tok-replacing-bos-eos"],
        ["--lang-tok-replacing-bos-eos: checkpoint off, given on"],
    ),
    (
        ["--encoder-langtok", "tgt", "--lang-tok-style", "mbart"],
        ["--lang-tok-style: checkpoint multilingual, given mbart"],
    ),
    (["--encoder-langtok", "src"], ["--encoder-langtok: checkpoint tgt, given src"]),
    (
        ["--encoder-langtok", "tgt", "--langtoks", "{'main': ('tgt', 'tgt')}"],
        ["--decoder-langtok: checkpoint off, given on"],
    ),
    (
        ["--encoder-langtok", "tgt", "--langtoks-specs", "main,dae"],
        ["--langtoks-specs: checkpoint main, given main,dae"],
    ),
    (
        ["--encoder-langtok", "tgt", "--extra-data", "{'mono_dae': 'unused'}"],
        ["--extra-data mono_dae: checkpoint off, given on"],
    ),
    (
        ["--encoder-langtok", "tgt", "--decoder-langtok", "--lang-tok-style", "mbart"],  # all of them, in one line
        ["--decoder-langtok: checkpoint off, given on; ", "--lang-tok-style: checkpoint multilingual, given mbart"],
    ),
]


@pytest.mark.parametrize("options,said", MARKING, ids=[" ".join(o[2:] or o) for o, _ in MARKING])
def test_decoding_options_that_mark_languages_otherwise_than_training_are_refused(data_bin, trained, options, said):
    done = decode(data_bin, trained[0], *options)
    assert_one_error_line(done, "the checkpoint does not fit: ", *said)
    assert not hypotheses(done)


def test_the_same_marking_spelled_otherwise_decodes_as_before(data_bin, trained):
    plain = decode(data_bin, trained[0], "--encoder-langtok", "tgt")
    assert plain.returncode == 0, plain.stderr[-2000:]
    spelled = decode(data_bin, trained[0], "--encoder-langtok", "tgt", "--langtoks", "{'main': ('tgt', None)}")
    assert spelled.returncode == 0, spelled.stderr[-2000:]
    assert len(hypotheses(plain)) == 37 and hypotheses(spelled) == hypotheses(plain)


def test_fairseq_interactive_refuses_a_contradicting_option_too(data_bin, trained):
    done = decode(
        data_bin,
        trained[0],
        "--encoder-langtok",
        "tgt",
        "--lang-tok-replacing-bos-eos",
        "--bpe",
        "sentencepiece",
        "--sentencepiece-model",
        spm_of(data_bin),
        tool="fairseq-interactive",
        input="The file is open.\n",
    )
    assert_one_error_line(done, "--lang-tok-replacing-bos-eos: checkpoint off, given on")


def with_stored(path, out, **options):
    """A copy of checkpoint ``path`` whose stored training options (model and task) say ``options``."""
    state = load_state(path)
    for section in ("model", "task"):
        for name, value in options.items():
            setattr(state["cfg"][section], name, value)
    torch.save(state, out)
    return str(out)


def test_a_model_trained_with_an_option_is_refused_without_it(data_bin, trained, tmp_path):
    path = with_stored(trained[0], tmp_path / "dec.pt", decoder_langtok=True)
    done = decode(data_bin, path, "--encoder-langtok", "tgt")
    assert_one_error_line(
        done, "stored options were changed after it was written (--decoder-langtok: written off, now on)"
    )


def test_the_hub_and_hltmt_translate_compare_the_stored_options_too(data_bin, trained, tmp_path):
    """The hub builds its task from the checkpoint's stored task options; the model's stored
    options must agree with them."""
    state = load_state(trained[0])
    state["cfg"]["model"].lang_tok_style = "mbart"
    torch.save(state, tmp_path / "mbart.pt")
    done = run(
        [
            cli("hltmt-translate"),
            "--checkpoint",
            str(tmp_path / "mbart.pt"),
            "--data",
            data_bin,
            "--src",
            "en",
            "--tgt",
            "de",
            "--device",
            "cpu",
        ],
        input="The file is open.\n",
    )
    assert_one_error_line(
        done,
        "hltmt-translate: error: ",
        "stored options were changed after it was written (--lang-tok-style: written multilingual, now mbart)",
    )


# ---- a line longer than the model's source positions: the other lines are translated, that one reported
@pytest.mark.parametrize("buffer", [[], ["--buffer-size", "4", "--batch-size", "4"]])
def test_interactive_translates_the_other_lines_and_reports_the_long_one(data_bin, trained, buffer):
    spm = os.path.join(os.path.dirname(data_bin), "spm", "spm.model")
    done = run(
        [
            cli("fairseq-interactive"),
            data_bin,
            *DECODE_EN_DE[:-4],
            "--beam",
            "1",
            "--path",
            trained[0],
            "--bpe",
            "sentencepiece",
            "--sentencepiece-model",
            spm,
            *buffer,
        ],
        input="\n".join(WITH_A_LONG_LINE) + "\n",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(int(m) for m in re.findall(r"^H-(\d+)\t", done.stdout, re.M)) == [0, 2, 3]
    assert re.search(
        r"input line 2 \(S-1\) has \d+ tokens \(pieces and end of sentence\), more than the model's "
        r"\d+ source positions: not translated; split it into sentences",
        done.stderr,
    ), done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_a_validation_split_longer_than_the_models_positions_is_one_line_and_skipping_still_works(data_bin, tmp_path):
    short = [*ONE_UPDATE, "--max-source-positions", "12", "--max-target-positions", "12", "--no-save"]
    done = run([cli("fairseq-train"), *train_args(data_bin, *short, "--save-dir", str(tmp_path / "a"))])
    assert_one_error_line(done, "the valid data holds", "longer than the model's positions (12, 12)", "--segment-words")
    assert "--skip-invalid-size-inputs-valid-test" in done.stderr
    skip = ["--skip-invalid-size-inputs-valid-test", "--save-dir", str(tmp_path / "b")]
    kept = run([cli("fairseq-train"), *train_args(data_bin, *short, *skip)])
    assert kept.returncode == 0, kept.stderr[-2000:]


def test_every_sentence_fairseq_generate_skips_is_named(data_bin, trained):
    """fairseq-generate with --skip-invalid-size-inputs-valid-test and positions shorter than some
    test sentences: each sentence gets an H- line or one line on stderr naming it (fairseq itself
    says only how many it skipped); together they count every sentence of the split."""
    from conftest import generate_args

    line = generate_args(data_bin, trained[0], "--beam", "1", "--max-len-b", "3")
    line += ["--skip-invalid-size-inputs-valid-test", "--max-source-positions", "24", "--max-target-positions", "24"]
    done = run([cli("fairseq-generate"), *line])
    assert done.returncode == 0, done.stderr[-3000:]
    translated = {int(m) for m in re.findall(r"^H-(\d+)\t", done.stdout, re.M)}
    named = {int(m) for m in re.findall(r"^hltmt_plugin: sentence (\d+) of the test data", done.stderr, re.M)}
    counted = int(re.search(r"Translated ([\d,]+) sentences", done.stdout + done.stderr).group(1).replace(",", ""))
    assert named and translated and not translated & named, done.stderr[-2000:]
    assert len(translated) == counted  # fairseq's own count: the sentences it translated
    assert translated | named == set(range(max(translated | named) + 1))  # every id: translated or named
    assert "is longer than the model's positions (24, 24): not translated" in done.stderr
