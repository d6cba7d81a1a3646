"""hltmt-translate: mixed-direction lines in, fairseq-generate's translations out in input
order, streaming; --json with scores and routing; bad lines reported by number while the rest
is translated; unusable checkpoints and options end with one line; input files holding any
bytes give one output line per input line; numbers that are NaN or infinite are refused."""

import json
import os
import random
import re
import select
import subprocess
import sys
import time

import pytest
import torch

from conftest import LANGS, PAIRS, PLUGIN, ROOT, WITH_A_LONG_LINE, assert_one_error_line, cli, run, spm_of, translate
from hltmt_plugin.compat.safe_loading import load_state
from hub_common import BEAM, DIRECTIONS, MAX_LEN, reference, sentences

SCRIPT = cli("hltmt-translate")
K = 6  # sentences per direction


def decode_options(ckpt):
    return ["--checkpoint", ckpt, "--beam", str(BEAM), "--max-len", str(MAX_LEN), "--device", "cpu"]


def assert_one_line(done, message):
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hltmt-translate: error: "), done.stderr[-2000:]
    assert message in lines[0], lines[0]


@pytest.mark.fast
def test_a_mixed_file_comes_back_in_input_order_as_fairseq_generate_writes_it(hltmt, data_bin, tmp_path):
    items = [
        (src, tgt, text, ref)
        for src, tgt in DIRECTIONS
        for text, ref in zip(sentences(src, tgt, K), reference(data_bin, hltmt, src, tgt))
    ]
    random.Random(3).shuffle(items)
    path = tmp_path / "in.tsv"
    path.write_text("".join(f"{s}\t{t}\t{text}\n" for s, t, text, _ in items), encoding="utf-8")
    # chunks of 7 lines, batches of <= 150 tokens: several chunks, several mixed batches each
    done = translate(*decode_options(hltmt), "--input", str(path), "--buffer-size", "7", "--max-tokens", "150")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:-1] == [ref[0] for *_, ref in items]
    assert f"{len(items)}/{len(items)}" in done.stderr  # the progress bar reached the end
    assert f"hltmt-translate: {len(items)} of {len(items)} sentence(s) translated in" in done.stderr
    assert "sentences/s" in done.stderr.strip().splitlines()[-1]


def test_plain_text_streams_from_stdin_and_json_carries_scores_and_routing(hltmt, data_bin):
    from hltmt_plugin.hub import HltmtTranslator

    texts, refs = sentences("en", "de", K), reference(data_bin, hltmt, "en", "de")
    mapping = HltmtTranslator.load(hltmt, device="cpu").model.map_by_language()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.Popen(
        [SCRIPT, *decode_options(hltmt), "--src", "en", "--tgt", "de", "--json", "--buffer-size", "1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        proc.stdin.write(texts[0] + "\n")
        proc.stdin.flush()
        deadline = time.time() + 300
        while not select.select([proc.stdout], [], [], 1)[0]:  # the first line, before the input ends
            assert proc.poll() is None and time.time() < deadline, proc.stderr.read()[-3000:]
        lines = [proc.stdout.readline()]
        proc.stdin.write("".join(t + "\n" for t in texts[1:]))
        proc.stdin.close()
        lines += proc.stdout.read().splitlines()
        assert proc.wait(timeout=300) == 0, proc.stderr.read()[-3000:]
    finally:
        proc.kill()
    records = [json.loads(line) for line in lines]
    assert [r["line"] for r in records] == list(range(1, K + 1))
    for record, text, (translation, score) in zip(records, texts, refs):
        assert (record["src"], record["tgt"], record["source"]) == ("en", "de", text)
        assert record["translation"] == translation and record["score"] == pytest.approx(score, abs=1e-3)
        assert record["routing"] == {"slp": f"m{mapping['de']}"} and "error" not in record


def test_bad_lines_are_reported_by_number_and_the_others_translated(hltmt, data_bin):
    good = sentences("en", "gu", 3)
    refs = reference(data_bin, hltmt, "en", "gu")
    lines = [
        f"en\tgu\t{good[0]}",
        "xx\tgu\tsome text",
        "en\tgu\t",
        "no tabs here",
        f"en\tgu\t{good[1]}",
        "en\tgu\t" + " ".join(["word"] * 1100),
        f"en\tgu\t{good[2]}",
    ]
    done = translate(*decode_options(hltmt), "--json", input="".join(line + "\n" for line in lines))
    assert done.returncode == 1, done.stderr[-3000:]
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["line"] for r in records] == list(range(1, 8))
    assert [r["translation"] for r in records if "error" not in r] == [t for t, _ in refs[:3]]
    errors = [line for line in done.stderr.splitlines() if line.startswith("hltmt-translate: line ")]
    assert [e.split(":")[1] for e in errors] == [" line 2", " line 3", " line 4", " line 6"]
    assert "unknown language 'xx'" in errors[0] and "empty line" in errors[1]
    assert "expected SRC<TAB>TGT<TAB>TEXT" in errors[2] and "source positions" in errors[3]
    assert "Traceback" not in done.stderr
    assert "hltmt-translate: 3 of 7 sentence(s) translated" in done.stderr
    plain = translate(*decode_options(hltmt), input="".join(line + "\n" for line in lines))
    assert plain.returncode == 1 and plain.stdout.split("\n")[:-1] == [
        refs[0][0],
        "",
        "",
        "",
        refs[1][0],
        "",
        refs[2][0],
    ]


def test_unusable_checkpoints_and_options_end_with_one_line(hltmt, data_bin, tmp_path):
    # the plain fairseq transformer of the same size (the baseline), written by fairseq-train
    done = run(
        [
            cli("fairseq-train"),
            data_bin,
            "--user-dir",
            PLUGIN,
            "--task",
            "translation_multi_simple_epoch",
            "--arch",
            "transformer_hltmt_tiny",
            "--langs",
            LANGS,
            "--lang-pairs",
            PAIRS,
            "--encoder-langtok",
            "tgt",
            "--cpu",
            "--optimizer",
            "adam",
            "--lr",
            "1e-3",
            "--max-tokens",
            "1500",
            "--max-update",
            "1",
            "--disable-validation",
            "--no-save-optimizer-state",
            "--no-epoch-checkpoints",
            "--save-dir",
            str(tmp_path / "plain"),
        ]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    os.replace(tmp_path / "plain" / "checkpoint_last.pt", tmp_path / "plain.pt")
    # served (a model without routing), but a checkpoint of a one-direction task is not
    done = translate(
        "--checkpoint",
        str(tmp_path / "plain.pt"),
        "--data",
        data_bin,
        "--spm",
        spm_of(data_bin),
        "--src",
        "en",
        "--tgt",
        "de",
        "--beam",
        "1",
        "--max-len",
        "3",
        input="Hello.\n",
    )
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 1, done.stderr[-3000:]
    state = load_state(tmp_path / "plain.pt")
    state["cfg"]["task"]._name = "translation"
    torch.save(state, tmp_path / "bilingual.pt")
    assert_one_line(
        translate("--checkpoint", str(tmp_path / "bilingual.pt"), "--src", "en", "--tgt", "de", input=""),
        "holds a transformer_hltmt_tiny model of task translation, not a multilingual model of --task "
        "hltmt_translation / translation_multi_simple_epoch",
    )
    (tmp_path / "cut.pt").write_bytes(open(hltmt, "rb").read()[:5000])
    assert_one_line(translate("--checkpoint", str(tmp_path / "cut.pt"), input=""), "truncated or not a checkpoint")
    assert_one_line(
        translate(*decode_options(hltmt), "--src", "xx", "--tgt", "de", input="Hello\n"), "unknown language 'xx'"
    )
    state = load_state(hltmt)
    state["cfg"]["task"].data = str(tmp_path / "moved")
    torch.save(state, tmp_path / "moved.pt")
    assert_one_line(translate("--checkpoint", str(tmp_path / "moved.pt"), input=""), "give data=DIR / --data DIR")
    done = translate(
        "--checkpoint",
        str(tmp_path / "moved.pt"),
        "--data",
        data_bin,
        "--spm",
        spm_of(data_bin),
        "--src",
        "en",
        "--tgt",
        "de",
        "--beam",
        "1",
        "--max-len",
        "3",
        input="Hello.\n",
    )
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 1, done.stderr[-3000:]


# ---- a line longer than the model's source positions: the other lines are translated, that one reported
def test_translate_script_translates_the_other_lines_and_reports_the_long_one(data_bin, trained):
    import json

    done = run(
        [
            cli("hltmt-translate"),
            "--checkpoint",
            trained[0],
            "--src",
            "en",
            "--tgt",
            "de",
            "--beam",
            "1",
            "--json",
            "--no-progress",
        ],
        input="\n".join(WITH_A_LONG_LINE) + "\n",
    )
    assert done.returncode == 1, done.stderr[-2000:]
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(records) == 4 and [r.get("error") is None for r in records] == [True, False, True, True]
    assert re.search(
        r"^hltmt-translate: line 2: \d+ tokens .* more than the model's \d+ source positions", done.stderr, re.M
    )
    assert "hltmt-translate: 3 of 4 sentence(s) translated" in done.stderr


# ---- input files holding any bytes
LINE_BREAKS = "\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # what some reader takes for a line end


def test_every_input_line_gives_one_output_line_whatever_its_bytes(hltmt, translator, tmp_path):
    clean = sentences("en", "de", 5)
    inside = clean[3][:12] + "\u2028" + clean[3][12:]  # a Unicode line separator inside a line
    controls = "A\x0bB\x0cC\x1cD\x1dE\x1eF\u0085G\u2029H end."
    raw = (
        b"\xef\xbb\xbf"
        + clean[0].encode()
        + b"\r\n"  # a UTF-8 byte order mark, a Windows line end
        + clean[1].encode()
        + b"\r"  # a classic Mac line end
        + clean[2].encode()
        + b"\n"
        + b"caf\xe9 au lait\n"  # Latin-1, not UTF-8
        + b"nul\x00byte\n"
        + inside.encode()
        + b"\n"
        + controls.encode()
        + b"\r\n"
        + clean[4].encode()
    )  # no line end at the end of the file
    path = tmp_path / "in.txt"
    path.write_bytes(raw)
    texts = [clean[0], clean[1], clean[2], inside, clean[4]]
    refs = translator.translate(texts, "en", "de", beam=2, max_len=10)
    expected = [r.translate(str.maketrans({c: " " for c in LINE_BREAKS})) for r in refs]
    expected = expected[:3] + ["", ""] + expected[3:4] + [""] + expected[4:]
    options = [
        "--checkpoint",
        hltmt,
        "--device",
        "cpu",
        "--src",
        "en",
        "--tgt",
        "de",
        "--beam",
        "2",
        "--max-len",
        "10",
        "--input",
        str(path),
        "--buffer-size",
        "3",
    ]
    done = translate(*options)
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stdout.split("\n") == expected + [""]
    assert len(done.stdout.splitlines()) == 8 and any(expected)  # no character of an output line ends it
    errors = [line for line in done.stderr.splitlines() if line.startswith("hltmt-translate: line ")]
    assert errors == [
        "hltmt-translate: line 4: is not valid UTF-8 (byte 0xe9 at byte 4; convert the file to UTF-8): not translated",
        "hltmt-translate: line 5: holds a NUL character at position 4 (binary data, or UTF-16 text read as UTF-8?): "
        "not translated",
        "hltmt-translate: line 7: holds the control character U+000B at position 2 (text holds none but TAB): "
        "not translated",
    ]
    as_json = translate(*options, "--json")
    records = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [r["line"] for r in records] == list(range(1, 9))
    assert [r.get("translation") or "" for r in records] == [
        r if r is not None else "" for r in refs[:3] + [None, None] + refs[3:4] + [None] + refs[4:]
    ]
    assert records[0]["source"] == clean[0] and records[5]["source"] == inside
    assert "error" in records[3] and "error" in records[4] and "control character" in records[6]["error"]


def test_a_utf16_file_is_refused_in_one_line(hltmt, tmp_path):
    (tmp_path / "utf16.txt").write_bytes("Hello.\nThe file is open.\n".encode("utf-16"))
    done = translate(
        "--checkpoint",
        hltmt,
        "--device",
        "cpu",
        "--src",
        "en",
        "--tgt",
        "de",
        "--input",
        str(tmp_path / "utf16.txt"),
        "-o",
        str(tmp_path / "out.txt"),
    )
    assert_one_error_line(
        done,
        f"hltmt-translate: error: --input {tmp_path / 'utf16.txt'} is not valid UTF-8: it starts with a UTF-16 / UTF-32 "
        "byte order mark",
    )
    assert not (tmp_path / "out.txt").exists() and os.listdir(tmp_path) == ["utf16.txt"]


PEAK_RSS = """
import resource, subprocess, sys, time
start = time.perf_counter()
with open(sys.argv[1], "rb") as source:
    done = subprocess.run(sys.argv[2:], stdin=source, capture_output=True, text=True, timeout=120)
sys.stdout.write(f"{done.returncode} {time.perf_counter() - start:.1f} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\\n")
sys.stderr.write(done.stderr)
"""


def reading(hltmt, source, *args):
    """hltmt-translate reading ``source`` as its standard input: (exit status, seconds, peak
    resident memory in MiB, stderr)."""
    command = [cli("hltmt-translate"), "--checkpoint", hltmt, "--device", "cpu", "--src", "en", "--tgt", "de", *args]
    done = run([sys.executable, "-c", PEAK_RSS, source, *command])
    status, seconds, rss = done.stdout.split()
    return int(status), float(seconds), int(rss) / 1024, done.stderr


def test_an_endless_line_ends_the_reading_in_one_line_before_memory_grows(hltmt, tmp_path):
    baseline = reading(hltmt, os.devnull)
    assert baseline[0] == 0, baseline[3][-2000:]
    status, seconds, rss, stderr = reading(hltmt, "/dev/zero")  # one endless line of NUL bytes
    lines = stderr.strip().splitlines()
    assert status == 2 and lines == [
        "hltmt-translate: error: standard input line 1 is longer than 1048576 bytes (binary data, or not one "
        "sentence per line?): not read further"
    ], stderr[-2000:]
    assert rss < baseline[2] + 64, (rss, baseline)  # the model's memory, and no more than a piece of the line
    huge = tmp_path / "one-line.txt"
    with open(huge, "wb") as f:
        f.truncate(4 << 30)  # 4 GiB without a line end (sparse: no room taken on the disk)
    status, seconds, rss, stderr = reading(hltmt, os.devnull, "--input", str(huge))
    assert status == 2 and f"error: --input {huge} line 1 is longer than 1048576 bytes" in stderr, stderr[-2000:]
    assert rss < baseline[2] + 64 and seconds < baseline[1] + 30, (rss, seconds, baseline)


# ---- numbers that are NaN or infinite; a sentence longer than the token budget
@pytest.mark.parametrize(
    "option,value",
    [
        ("--lenpen", "nan"),
        ("--lenpen", "inf"),
        ("--lenpen", "-inf"),
        ("--max-len", "inf"),
        ("--beam", "nan"),
        ("--max-tokens", "1e400"),
    ],
)
def test_numbers_that_are_nan_or_infinite_are_refused_in_one_line(hltmt, option, value):
    done = translate("--checkpoint", hltmt, "--src", "en", "--tgt", "de", f"{option}={value}", input="Hello.\n")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith(f"hltmt-translate: error: argument {option}: ") and value in done.stderr
    assert done.stdout == ""


def test_a_sentence_longer_than_the_token_budget_is_translated_alone(hltmt, translator):
    texts = sentences("en", "de", 4)
    done = translate(
        "--checkpoint",
        hltmt,
        "--device",
        "cpu",
        "--src",
        "en",
        "--tgt",
        "de",
        "--beam",
        "2",
        "--max-len",
        "10",
        "--max-tokens",
        "4",
        input="".join(t + "\n" for t in texts),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == translator.translate(texts, "en", "de", beam=2, max_len=10)


# ---- directions a model never learned: the study's committed model translates English into ten languages only
STUDY_MODEL = os.path.join(ROOT, "docs", "results", "cpu-study", "models", "hltmt.pt")
MIXED = "de\ten\tHallo Welt\nen\tde\tThe file is open.\nfr\tde\tLe fichier est ouvert.\n"


def test_a_target_never_produced_or_a_source_never_read_is_a_failed_line_whatever_is_asked():
    done = run(["bash", "-c", f"printf 'de\\ten\\tHallo Welt\\n' | {SCRIPT} --checkpoint {STUDY_MODEL}"])
    assert done.returncode == 1 and done.stdout == "\n", done.stderr[-2000:]
    assert re.search(
        r"^hltmt-translate: line 1: direction de-en refused: the model never produced en; it was trained "
        r"on en-\w\w(,en-\w\w)+ \(targets [a-z,]+\)$",
        done.stderr,
        re.M,
    ), done.stderr[-2000:]
    options = ["--checkpoint", STUDY_MODEL, "--device", "cpu", "--beam", "2", "--max-len", "12", "--json"]
    done = translate(*options, input=MIXED)
    assert done.returncode == 1, done.stderr[-2000:]
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert records[0]["translation"] is None and records[0]["error"].startswith("direction de-en refused")
    assert records[1]["translation"] and "error" not in records[1] and "zero_shot" not in records[1]
    assert records[2]["translation"] is None and "the model never read fr (it was only a target)" in records[2]["error"]
    errors = [line.split(": ")[1] for line in done.stderr.splitlines() if line.startswith("hltmt-translate: line ")]
    assert errors == ["line 1", "line 3"] and "hltmt-translate: 1 of 3 sentence(s) translated" in done.stderr
    asked = translate(*options, "--zero-shot", input=MIXED)
    assert asked.returncode == 1, asked.stderr[-2000:]
    again = [json.loads(line) for line in asked.stdout.splitlines()]
    assert again[0] == records[0]  # refused whatever is asked
    assert again[1]["translation"] and "zero_shot" not in again[1] and "error" not in again[1]
    assert again[2] == records[2]  # an English-into-X model never read French: not zero-shot either
    assert "hltmt-translate: 1 of 3 sentence(s) translated" in asked.stderr
    plain = translate("--checkpoint", STUDY_MODEL, "--src", "de", "--tgt", "en", input="Hallo Welt\nGuten Tag\n")
    assert plain.returncode == 1 and plain.stdout == "\n\n", plain.stderr[-2000:]
    assert plain.stderr.count("direction de-en refused") == 2


# an installed command's process, then which of torch and fairseq it imported
PROBE = """
import runpy, sys
sys.argv = sys.argv[1:]
code = 0
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as done:
    code = done.code
sys.stdout.flush()
print("EXIT", code, "HEAVY", sorted(m for m in ("torch", "fairseq") if m in sys.modules))
"""


def test_an_export_is_served_without_importing_torch_or_fairseq(hltmt, translator, tmp_path):
    pytest.importorskip("ctranslate2")
    import sys

    from hltmt_plugin.export.ctranslate2 import export

    folder = str(tmp_path / "export")
    export(hltmt, folder)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}

    def probe(*args):
        return subprocess.run(
            [sys.executable, "-c", PROBE, SCRIPT, "--checkpoint", folder, *args],
            input="en\tde\tThe file is open.\n",
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )

    done = probe("--json", "--beam", str(BEAM), "--max-len", str(MAX_LEN))
    *lines, last = done.stdout.strip().splitlines()
    assert last == "EXIT 0 HEAVY []", done.stderr[-2000:]
    want = translator.translate_batch([("en", "de", "The file is open.")], beam=BEAM, max_len=MAX_LEN)[0]
    assert json.loads(lines[0])["translation"] == want
    for args, message in (
        (["--device", "cuda:2"], "device cuda:2 is not available here"),
        (["--compute-type", "int8_float16", "--device", "cpu"], "compute type int8_float16 does not run on cpu"),
    ):
        done = probe(*args)
        assert done.stdout.strip().splitlines()[-1] == "EXIT 2 HEAVY []", done.stderr[-2000:]
        assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr


STUDY_MODEL = os.path.join(ROOT, "docs", "results", "cpu-study", "models", "hltmt.pt")


@pytest.mark.fast
@pytest.mark.parametrize(
    "options,message",
    [
        (["--nbest", "6"], "--nbest 6 is more than the --beam (5)"),
        (["--sampling-topk", "5"], "--sampling-topk applies to sampling: give --sampling with it"),
        (["--temperature", "0.5"], "--temperature applies to sampling: give --sampling with it"),
        (["--sampling", "--temperature", "0"], "--temperature must be from 0.01 to 100"),
        (
            ["--sampling", "--sampling-topk", "5", "--sampling-topp", "0.5"],
            "give --sampling-topk or --sampling-topp, not both",
        ),
        (["--sampling", "--sampling-topp", "2"], "--sampling-topp must be from 1.175e-38"),
        (["--sampling", "--seed", "-1"], "--seed must be from 0 to 2147483647"),
        (["--no-repeat-ngram-size", "1"], "--no-repeat-ngram-size must be 0 (off) or at least 2"),
        (["--threads", "0"], "--threads: 0 is out of range: a count of processes or threads is from 1 to"),
    ],
)
def test_search_options_out_of_their_bounds_are_refused_at_parsing(options, message, capsys):
    from hltmt_plugin.cli import translate as command

    with pytest.raises(SystemExit) as done:
        command.parse_args(["--checkpoint", STUDY_MODEL, *options])
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert done.value.code == 2 and len(lines) == 1 and lines[0].startswith("hltmt-translate: error: "), err
    assert message in lines[0] and lines[0].endswith(" (see --help)"), err


@pytest.mark.fast
def test_nbest_writes_n_lines_per_input_line_and_json_holds_the_hypotheses(tmp_path, capsys):
    import logging

    from hltmt_plugin.cli import translate as command

    source = tmp_path / "in.tsv"
    source.write_text("en\tde\tThe file is open.\nen\txx\tThe file is open.\nen\tfr\tSave the file.\n")
    argv = ["--checkpoint", STUDY_MODEL, "--input", str(source), "--no-progress", "--nbest", "2", "--device", "cpu"]
    try:
        assert command.main(argv) == 1
        plain = capsys.readouterr().out.splitlines()
        assert command.main([*argv, "--json"]) == 1
        records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    finally:
        logging.disable(logging.NOTSET)  # the command turns fairseq's log off for its process
    assert len(plain) == 6 and plain[2:4] == ["", ""] and plain[0] == "Der Datei ist geöffnet.", plain
    assert len(records) == 3 and "hypotheses" not in records[1] and "error" in records[1]
    for k in (0, 2):
        hypotheses = records[k]["hypotheses"]
        assert [h["translation"] for h in hypotheses] == plain[2 * k : 2 * k + 2]
        assert (
            records[k]["translation"] == hypotheses[0]["translation"] and records[k]["score"] == hypotheses[0]["score"]
        )
        assert hypotheses[0]["score"] >= hypotheses[1]["score"] and set(hypotheses[0]) == {
            "translation",
            "score",
            "tokens",
        }


@pytest.mark.fast
def test_fairseq_and_moses_forms_carry_ids_and_scores_and_mark_a_line_not_translated(tmp_path, capsys):
    """--format fairseq: H-<id>, the base-2 score --json gives, the translation; a refused line
    E-<id> with its reason, apart from an empty translation. --format moses: id ||| text |||
    features ||| score, nothing for a refused line. The closing line counts output tokens/s."""
    import logging
    import math

    from hltmt_plugin.cli import translate as command

    source = tmp_path / "in.tsv"
    source.write_text("en\tde\tThe file is open.\nen\txx\tThe file is open.\nen\tfr\tSave the file.\n")
    argv = ["--checkpoint", STUDY_MODEL, "--input", str(source), "--no-progress", "--nbest", "2", "--device", "cpu"]
    try:
        assert command.main([*argv, "--json"]) == 1
        records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert command.main([*argv, "--format", "fairseq"]) == 1
        fairseq, err = capsys.readouterr()
        assert command.main([*argv, "--format", "moses"]) == 1
        moses = capsys.readouterr().out.splitlines()
        with pytest.raises(SystemExit):
            command.main([*argv, "--format", "moses", "--json"])
        assert "--format moses is a plain-text form" in capsys.readouterr().err
    finally:
        logging.disable(logging.NOTSET)
    expected = [
        f"H-{i}\t{h['score']:.4f}\t{h['translation']}" for i, r in enumerate(records) for h in r.get("hypotheses") or []
    ]
    fairseq = fairseq.splitlines()
    assert len(fairseq) == 6 and [line for line in fairseq if line.startswith("H-")] == expected
    assert fairseq[2:4] == ["E-1\tunknown language 'xx' (this model knows en,fr,cs,de,fi,lv,et,ro,hi,tr,gu)"] * 2
    assert moses == [
        f"{i} ||| {h['translation']} ||| Log2Prob0= {h['score']:.4f} ||| {h['score']:.4f}"
        for i, r in enumerate(records)
        for h in r.get("hypotheses") or []
    ]
    assert len(moses) == 4 and all(math.isfinite(float(line.rsplit("|||", 1)[1])) for line in moses)
    tokens = sum(r["tokens"] for r in records if "error" not in r)
    closing = re.fullmatch(
        r"hltmt-translate: 2 of 3 sentence\(s\) translated in ([\d.]+) s: [\d.]+ sentences/s, ([\d.]+) output tokens/s",
        err.splitlines()[-1],
    )
    assert closing and tokens > 0 and float(closing.group(2)) > 0, err


@pytest.mark.fast
def test_every_number_of_a_json_line_is_valid_json():
    """A score that is not finite (NaN, an infinity) is written as null, never as NaN or
    Infinity, which no strict JSON reader takes."""
    from hltmt_plugin.cli.translate import output_line
    from hltmt_plugin.hub.results import Translation

    result = Translation(line=1, src="en", tgt="de", source="y", text="x")
    result.score = float("nan")
    line = output_line(result, as_json=True)
    record = json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in {line}"))
    assert record["score"] is None and record["translation"] == "x"


def test_fairseqs_log_lines_are_on_stderr_only_with_verbose():
    """hltmt-translate turns logging off for its process (its own lines are not log records)
    unless --verbose: fairseq's INFO lines as it loads the model are there only then."""
    models = os.path.join(ROOT, "docs", "results", "cpu-study", "models")
    command = [SCRIPT, "--checkpoint", os.path.join(models, "hltmt.pt"), "--spm", os.path.join(models, "spm.model")]
    command += ["--data", models, "--src", "en", "--tgt", "de", "--beam", "1", "--no-progress"]
    quiet, verbose = (run(command + extra, input="The file is open.\n") for extra in ([], ["--verbose"]))
    assert quiet.returncode == 0 and verbose.returncode == 0, quiet.stderr[-2000:] + verbose.stderr[-2000:]
    assert [line.split(":")[0] for line in quiet.stderr.splitlines()] == ["hltmt-translate"], quiet.stderr
    assert "INFO:fairseq." in verbose.stderr, verbose.stderr[-2000:]
