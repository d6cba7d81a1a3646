"""hltmt-prepare-data through its command line: --help, the dictionary fingerprint it records
with the binarized data, the short-segment selection (--segment-words), binarizing with an
existing sentencepiece model and a fixed dictionary (the XLM-R route), and the text and options
it cannot use (docs/bad-input.md)."""

import json
import os

import pytest

from conftest import assert_clear, cli, digest, run
from hltmt_plugin.data_fingerprint import FINGERPRINT_FILE, check_dictionaries, dictionary_fingerprint

PREPARE = cli("hltmt-prepare-data")


def write(folder, name, lines):
    (folder / name).write_text("".join(x + "\n" for x in lines), encoding="utf-8")


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    folder = tmp_path_factory.mktemp("raw")
    en = [f"the file number {i} is open and the window {i % 7} is closed" for i in range(60)]
    de = [f"die Datei Nummer {i} ist offen und das Fenster {i % 7} ist zu" for i in range(60)]
    fr = [f"le fichier numéro {i} est ouvert et la fenêtre {i % 7} est fermée" for i in range(60)]
    for split in ("train", "valid", "test"):
        for lang, lines in (("de", de), ("fr", fr)):
            write(folder, f"{split}.en-{lang}.en", en)
            write(folder, f"{split}.en-{lang}.{lang}", lines)
    return folder


def prepare(raw, out, *extra):
    return run([PREPARE, "--raw", str(raw), "--out", str(out), "--langs", "de,fr", "--vocab-size", "80", *extra])


@pytest.fixture(scope="module")
def prepared(raw, tmp_path_factory):
    out = tmp_path_factory.mktemp("prepared")
    done = prepare(raw, out)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out


@pytest.mark.fast
def test_help_shows_every_default():
    done = run([PREPARE, "--help"])
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for default in ("(default: 8000)", "(default: 250)", "(default: 1000)", "(default: 1)"):
        assert default in text, default
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert f"processes of fairseq-preprocess (one per core by default) (default: {cores})" in text


@pytest.mark.fast
def test_the_binarized_folder_records_a_fingerprint_of_its_dictionaries(prepared):
    folder = str(prepared / "bin")
    record = json.load(open(os.path.join(folder, FINGERPRINT_FILE)))
    assert record["format"] == "hltmt_plugin.dict_fingerprint" and record["version"] == 1
    assert sorted(record["dicts"]) == ["dict.de.txt", "dict.en.txt", "dict.fr.txt"]
    assert record["dicts"] == dictionary_fingerprint(folder)
    assert check_dictionaries(folder) == []


def test_a_dictionary_changed_after_binarization_is_reported(prepared, tmp_path):
    import shutil

    folder = tmp_path / "bin"
    shutil.copytree(prepared / "bin", folder)
    lines = (folder / "dict.de.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    (folder / "dict.de.txt").write_text("".join(lines[1:]), encoding="utf-8")  # one line removed: ids shift
    os.remove(folder / "dict.fr.txt")
    assert check_dictionaries(str(folder)) == [
        "dict.de.txt changed since the data was binarized",
        "dict.fr.txt is missing",
    ]
    (folder / FINGERPRINT_FILE).write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="is not valid JSON"):
        check_dictionaries(str(folder))


def read_binarized(folder, name, dictionary):
    from fairseq.data import data_utils

    dataset = data_utils.load_indexed_dataset(os.path.join(folder, name), dictionary)
    return [[dictionary[int(i)] for i in dataset[k][:-1]] for k in range(len(dataset))]  # without the final </s>


def test_an_existing_model_and_a_fixed_dictionary_give_the_dictionary_ids(raw, prepared, tmp_path):
    """The XLM-R route: the pieces of the given sentencepiece model, the ids of the given
    dictionary (in its own order, with pieces it lacks as <unk>), copied as dict.*.txt."""
    import sentencepiece as spm
    from fairseq.data import Dictionary

    model = str(prepared / "spm" / "spm.model")
    sp = spm.SentencePieceProcessor(model_file=model)
    pieces = sorted(sp.id_to_piece(i) for i in range(sp.get_piece_size()) if sp.id_to_piece(i) != "<unk>")
    dropped = {p for i, p in enumerate(pieces) if i % 9 == 4}
    kept = [p for p in pieces if p not in dropped][::-1] + ["▁only_in_the_dictionary"]
    fixed = tmp_path / "dict.txt"
    fixed.write_text("".join(f"{p} {i + 1}\n" for i, p in enumerate(kept)), encoding="utf-8")
    out = tmp_path / "out"
    done = prepare(raw, out, "--spm-model", model, "--dict", str(fixed), "--dict-langs", "de,ja,eng_Latn")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "training a" not in done.stdout  # no sentencepiece model was trained
    assert "of the training pieces are not in it (they become <unk>)" in done.stdout
    for lang in ("en", "de", "fr", "ja", "eng_Latn"):  # the prepared languages and --dict-langs
        assert (out / "bin" / f"dict.{lang}.txt").read_bytes() == fixed.read_bytes()
    assert (out / "bin" / "langs.txt").read_text().split() == ["en", "de", "fr"]
    dictionary = Dictionary.load(str(fixed))
    assert dictionary.index(kept[0]) == dictionary.nspecial  # the file's order, not the model's
    got = read_binarized(str(out / "bin"), "train.en-de.de", dictionary)
    source = (raw / "train.en-de.de").read_text(encoding="utf-8").splitlines()
    want = [[p if p in kept else "<unk>" for p in sp.encode(line, out_type=str)] for line in source]
    assert got == want
    assert any("<unk>" in line for line in got)
    assert json.load(open(out / "bin" / FINGERPRINT_FILE))["dicts"] == dictionary_fingerprint(str(out / "bin"))


def test_segment_words_keeps_the_short_pairs_of_every_split_before_the_line_limits(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    en = [" ".join(["word"] * n) for n in (3, 5, 4, 2, 6, 1)]  # 6 English lines, 1 to 6 words
    de = [" ".join(["Wort"] * n) for n in (3, 3, 8, 2, 3, 2)]  # the third's German is too long
    for split in ("train", "valid", "test"):
        write(raw, f"{split}.en-de.en", en)
        write(raw, f"{split}.en-de.de", de)
    out = tmp_path / "out"
    done = run(
        [
            PREPARE,
            "--raw",
            str(raw),
            "--out",
            str(out),
            "--langs",
            "de",
            "--vocab-size",
            "12",
            "--segment-words",
            "5,4",
            "--max-test",
            "2",
        ]
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    kept = {"train": 4, "valid": 4, "test": 2}  # lines 1, 2, 4, 6 (English <= 5 words, German <= 4); test: the first 2
    for split, n in kept.items():
        lines = (out / "spm" / f"{split}.en-de.de").read_text(encoding="utf-8").splitlines()
        assert len(lines) == n, (split, lines)


@pytest.mark.parametrize(
    "value, message",
    [
        ("12", "--segment-words '12': expected EN,XX"),
        ("0,4", "expected EN,XX"),
        ("1,1", "split train of en-de has no segment pair of at most 1 English and 1 de words"),
    ],
)
def test_a_bad_or_empty_segment_selection_is_one_line(raw, tmp_path, value, message):
    done = run([PREPARE, "--raw", str(raw), "--out", str(tmp_path / "out"), "--langs", "de", "--segment-words", value])
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hltmt-prepare-data: error:") and message in lines[0], lines
    assert not (tmp_path / "out" / "bin").exists()


# ---------------------------------------------------------------------------------------
# text and options it cannot use: one line, and no bin/ folder that looks complete


@pytest.fixture()
def raw_de(tmp_path):
    """en-de text of 40 lines, made afresh for each test (the tests change it)."""
    folder = tmp_path / "raw"
    folder.mkdir()
    en = [f"the file number {i} is open" for i in range(40)]
    de = [f"die Datei Nummer {i} ist offen" for i in range(40)]
    for split in ("train", "valid", "test"):
        write(folder, f"{split}.en-de.en", en)
        write(folder, f"{split}.en-de.de", de)
    return folder


def prepare_de(raw, out, *extra):
    return run([PREPARE, "--raw", str(raw), "--out", str(out), "--langs", "de", "--vocab-size", "60", *extra])


def test_empty_and_ten_thousand_token_training_lines_are_dropped(raw_de, tmp_path):
    write(raw_de, "train.en-de.en", ["", "x " * 10000, "a short line"] + ["the file is open"] * 30)
    write(raw_de, "train.en-de.de", ["leer", "y " * 10000, ""] + ["die Datei ist offen"] * 30)
    done = prepare_de(raw_de, tmp_path / "out")
    assert done.returncode == 0, done.stderr[-1500:]
    assert "dropped 3 pairs with an empty side or over 250 words" in done.stdout
    assert (tmp_path / "out" / "bin" / "train.en-de.en.idx").exists()


@pytest.mark.parametrize(
    "lines, message",
    [
        (["ok"] * 10 + [""] + ["ok"] * 29, "line 11 is empty"),
        (["ok"] * 39 + ["word " * 10000], "line 40 has 50000 pieces, more than --max-eval-pieces 1000"),
    ],
)
def test_unusable_evaluation_lines_are_errors(raw_de, tmp_path, lines, message):
    write(raw_de, "test.en-de.en", lines)
    done = prepare_de(raw_de, tmp_path / "out")
    assert_clear(done, message, prefix="hltmt-prepare-data: error:", whole_output=False)
    assert not (tmp_path / "out" / "bin").exists()


def test_missing_sentencepiece_model(raw_de, tmp_path):
    done = prepare_de(raw_de, tmp_path / "out", "--spm-model", str(tmp_path / "none.model"))
    assert_clear(done, "--spm-model", prefix="hltmt-prepare-data: error:", whole_output=False)
    assert not (tmp_path / "out" / "bin").exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--vocab-size", "10"], "--vocab-size 10 is too small for this text: it has"),
        (["--workers", "0"], "--workers must be at least 1, got 0"),
        (["--workers", "100000"], "argument --workers: 100000 is out of range"),
        (["--threads", "100000"], "argument --threads: 100000 is out of range"),
        (["--max-train", "0"], "--max-train must be at least 1, got 0"),
        (["--dict", __file__], "--dict needs --spm-model"),  # a file that is there
        (["--dict-langs", "ja"], "--dict-langs needs --dict"),
        (["--spm-model", __file__, "--dict", __file__, "--dict-langs", "ja,../x"], "'../x' is not a language name"),
        (["--spm-model", __file__, "--dict", __file__, "--dict-langs", "ja,ru,ja"], "--dict-langs names ja twice"),
    ],
)
def test_unusable_prepare_options_are_one_line(raw_de, tmp_path, extra, message):
    done = prepare_de(raw_de, tmp_path / "out", *extra)
    assert_clear(done, message, prefix="hltmt-prepare-data: error:", whole_output=False)
    assert not (tmp_path / "out" / "bin").exists()


def test_an_unwritable_output_folder_is_one_line_before_any_work(raw_de, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder\n")
    done = prepare_de(raw_de, blocker / "out")
    assert_clear(
        done,
        f"cannot write to --out {blocker / 'out'}: Not a directory",
        prefix="hltmt-prepare-data: error:",
        whole_output=False,
    )
    assert "training a" not in done.stdout  # refused before the sentencepiece model


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    """A sentencepiece model of raw_de's text."""
    import sentencepiece as spm

    folder = tmp_path_factory.mktemp("spm")
    (folder / "text.txt").write_text(
        "".join(f"the file number {i} is open\ndie Datei Nummer {i} ist offen\n" for i in range(40)), encoding="utf-8"
    )
    spm.SentencePieceTrainer.train(
        input=str(folder / "text.txt"),
        model_prefix=str(folder / "m"),
        vocab_size=40,
        hard_vocab_limit=False,
        character_coverage=1.0,
        minloglevel=2,
        num_threads=1,
    )
    return str(folder / "m.model")


@pytest.mark.parametrize(
    "content, message",
    [
        ("▁the 5\nno-count-here\n", "line 2 is not 'SYMBOL COUNT' (a fairseq dictionary)"),
        ("▁the 5\n▁the 3\n", "line 2 repeats the symbol '▁the'"),
        ("".join(f"▁other_model_piece_{i} 1\n" for i in range(50)), "does not belong to --spm-model"),
        ("", "is empty"),
    ],
)
def test_a_fixed_dictionary_that_cannot_be_used_is_one_line(raw_de, tmp_path, spm_model, content, message):
    path = tmp_path / "dict.txt"
    path.write_text(content, encoding="utf-8")
    done = prepare_de(raw_de, tmp_path / "out", "--spm-model", spm_model, "--dict", str(path))
    assert_clear(done, message, prefix="hltmt-prepare-data: error:", whole_output=False)
    assert not (tmp_path / "out" / "bin").exists()


def test_a_file_that_is_not_a_sentencepiece_model_is_one_line(raw_de, tmp_path):
    fake = tmp_path / "fake.model"
    fake.write_bytes(b"\x00not a model" * 10)
    done = prepare_de(raw_de, tmp_path / "out", "--spm-model", str(fake))
    assert_clear(done, "is not a sentencepiece model", prefix="hltmt-prepare-data: error:", whole_output=False)


def test_a_carriage_return_inside_a_line_keeps_the_pairs_aligned(raw_de, tmp_path):
    en = [f"the file number {i} is open" for i in range(40)]
    de = [f"die Datei Nummer {i} ist offen" for i in range(40)]
    en[4], de[4] = "the file\ris open", "die Datei\rist offen"  # on both sides: the counts would still agree
    (raw_de / "train.en-de.en").write_bytes("".join(x + "\n" for x in en).encode())
    (raw_de / "train.en-de.de").write_bytes("".join(x + "\r\n" for x in de).encode())  # Windows line ends
    done = prepare_de(raw_de, tmp_path / "out")
    assert done.returncode == 0, done.stderr[-1500:]
    assert "train.en-de.en: 1 line(s) hold a carriage return inside the line: read as a space" in done.stdout
    for side in ("en", "de"):
        lines = (tmp_path / "out" / "spm" / f"train.en-de.{side}").read_text(encoding="utf-8").split("\n")
        assert len(lines) == 41 and lines[-1] == "" and "\r" not in "".join(lines)  # 40 lines, one pair each
    pairs = list(
        zip(*((tmp_path / "out" / "spm" / f"train.en-de.{s}").read_text().splitlines() for s in "en de".split()))
    )
    assert "".join(pairs[4][0].split()).replace("▁", "") == "thefileisopen"
    assert "".join(pairs[4][1].split()).replace("▁", "") == "dieDateiistoffen"
    assert "".join(pairs[5][1].split()).replace("▁", "") == "dieDateiNummer5istoffen"


@pytest.mark.parametrize(
    "name, line, message",
    [
        ("train.en-de.de", b"die\x00Datei", "train.en-de.de line 5 holds a NUL character at position 4"),
        ("test.en-de.en", b"the\x0cfile", "test.en-de.en line 5 holds the control character U+000C at position 4"),
        ("valid.en-de.de", b"caf\xe9", "valid.en-de.de line 5 is not valid UTF-8 (byte 0xe9 at byte 4"),
        ("train.en-de.en", b"x" * (1 << 20) + b"y", "train.en-de.en line 5 is longer than 1048576 bytes"),
    ],
)
def test_a_raw_line_that_is_not_text_is_refused_with_its_file_and_line(raw_de, tmp_path, name, line, message):
    lines = (raw_de / name).read_bytes().split(b"\n")
    lines[4] = line  # the one text rule of every reader: the same refusals as hltmt-translate's
    (raw_de / name).write_bytes(b"\n".join(lines))
    done = prepare_de(raw_de, tmp_path / "out")
    assert_clear(done, message, prefix="hltmt-prepare-data: error:", whole_output=False)
    assert not (tmp_path / "out" / "bin").exists()


@pytest.mark.parametrize(
    "kind, make", [("a FIFO", os.mkfifo), ("a device", lambda path: os.symlink("/dev/zero", path))]
)
def test_a_raw_file_that_is_a_fifo_or_a_device_is_said_to_be_one(raw_de, tmp_path, kind, make):
    (raw_de / "valid.en-de.de").unlink()
    make(str(raw_de / "valid.en-de.de"))
    done = prepare_de(raw_de, tmp_path / "out")
    assert_clear(
        done,
        f"{raw_de / 'valid.en-de.de'} (language 'de', split valid) is {kind}, not a regular file of text",
        prefix="hltmt-prepare-data: error:",
        whole_output=False,
    )


def test_spm_and_bin_replace_only_what_an_earlier_run_wrote(raw_de, tmp_path):
    out = tmp_path / "out"
    assert prepare_de(raw_de, out).returncode == 0
    (out / "bin" / "notes.txt").write_text("the user's\n")
    before = digest(str(out))
    done = prepare_de(raw_de, out)
    assert_clear(done, "holds notes.txt, which hltmt-prepare-data did not write", "hltmt-prepare-data: error:", False)
    assert digest(str(out)) == before
    os.remove(out / "bin" / "notes.txt")
    assert prepare_de(raw_de, out).returncode == 0  # an earlier run's output is replaced
    theirs = tmp_path / "theirs"
    (theirs / "spm").mkdir(parents=True)
    (theirs / "spm" / "model.txt").write_text("the user's own spm/\n")
    done = prepare_de(raw_de, theirs)
    assert_clear(done, "hltmt-prepare-data did not write it", "hltmt-prepare-data: error:", False)
    assert os.listdir(theirs) == ["spm"] and os.listdir(theirs / "spm") == ["model.txt"]


def test_a_second_writer_of_one_out_is_refused_and_a_killed_runs_leftovers_are_removed(raw_de, tmp_path):
    import fcntl
    import signal
    import subprocess
    import time

    out = tmp_path / "out"
    out.mkdir()
    with open(out / ".spm.hltmt-lock", "w") as lock:  # another run writing spm/ holds this
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = prepare_de(raw_de, out)
    assert_clear(done, "is being written by another process", "hltmt-prepare-data: error:", False)
    assert os.listdir(out) == [".spm.hltmt-lock"]
    command = [PREPARE, "--raw", str(raw_de), "--out", str(out), "--langs", "de", "--vocab-size", "60"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
    while not any(n.endswith(".partial") for n in os.listdir(out)):
        assert process.poll() is None
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert any(n.endswith(".partial") for n in os.listdir(out))
    assert prepare_de(raw_de, out).returncode == 0
    assert sorted(os.listdir(out)) == ["bin", "spm"]  # the killed run's temporary folders and lock are gone


def paths_under(folder):
    return sorted(os.path.join(top, name) for top, dirs, files in os.walk(folder) for name in dirs + files)


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing raw", "argument --raw: "),  # refused at parsing
        ("unusable option", "--max-train must be at least 1"),
        ("long evaluation line", "more than --max-eval-pieces 3"),  # refused while the output is written
    ],
)
def test_a_refused_run_leaves_no_new_path(raw_de, tmp_path, case, message):
    before = paths_under(tmp_path)
    out = tmp_path / "new" / "out"
    raw, extra = raw_de, []
    if case == "missing raw":
        raw = tmp_path / "no-raw"
    elif case == "unusable option":
        extra = ["--max-train", "0"]
    else:
        extra = ["--max-eval-pieces", "3"]
    done = prepare_de(raw, out, *extra)
    assert_clear(done, message, prefix="hltmt-prepare-data: error:", whole_output=False)
    assert paths_under(tmp_path) == before
