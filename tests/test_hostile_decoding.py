"""Hostile decoding, through the real commands: options that mark a sentence's languages
otherwise than training, the plugin's model under fairseq's parent task, input files holding
any bytes, numbers that are NaN or infinite, and the Python API's arguments."""
import json
import math
import os
import re

import pytest
import torch

from conftest import LANGS, PAIRS, PLUGIN, cli, run, spm_of, translate
from hub_common import sentences

from hltmt_plugin.errors import HltmtError

GENERATE = ["--user-dir", PLUGIN, "--langs", LANGS, "--lang-pairs", PAIRS, "-s", "en", "-t", "de",
            "--gen-subset", "test", "--beam", "1", "--max-len-b", "3", "--cpu"]


def generate(data_bin, ckpt, *options, task="hltmt_translation", tool="fairseq-generate", **kwargs):
    return run([cli(tool), data_bin, *GENERATE, "--task", task, "--path", str(ckpt), *options], **kwargs)


def hypotheses(done):
    return sorted(line for line in done.stdout.splitlines() if line.startswith("H-"))


def assert_one_error_line(done, *parts):
    """Refused: a non-zero exit, one error line holding every part, no traceback."""
    assert done.returncode != 0, done.stdout[-2000:] + done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, done.stderr[-3000:]
    for part in parts:
        assert part in errors[0], errors[0]
    assert "Traceback" not in done.stderr
    return errors[0]


def with_stored(path, out, **options):
    """A copy of checkpoint ``path`` whose stored training options (model and task) say ``options``."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    for section in ("model", "task"):
        for name, value in options.items():
            setattr(state["cfg"][section], name, value)
    torch.save(state, out)
    return str(out)


# ---- options that mark languages otherwise than training --------------------------------------
MARKING = [
    (["--encoder-langtok", "tgt", "--decoder-langtok"], ["--decoder-langtok: trained off, given on"]),
    (["--encoder-langtok", "tgt", "--lang-tok-replacing-bos-eos"],
     ["--lang-tok-replacing-bos-eos: trained off, given on"]),
    (["--encoder-langtok", "tgt", "--lang-tok-style", "mbart"], ["--lang-tok-style: trained multilingual, given mbart"]),
    (["--encoder-langtok", "src"], ["--encoder-langtok: trained tgt, given src"]),
    (["--encoder-langtok", "tgt", "--langtoks", "{'main': ('tgt', 'tgt')}"], ["--decoder-langtok: trained off, given on"]),
    (["--encoder-langtok", "tgt", "--langtoks-specs", "main,dae"], ["--langtoks-specs: trained main, given main,dae"]),
    (["--encoder-langtok", "tgt", "--extra-data", "{'mono_dae': 'unused'}"],
     ["--extra-data mono_dae: trained off, given on"]),
    (["--encoder-langtok", "tgt", "--decoder-langtok", "--lang-tok-style", "mbart"],  # all of them, in one line
     ["--decoder-langtok: trained off, given on; ", "--lang-tok-style: trained multilingual, given mbart"]),
]


@pytest.mark.parametrize("options,said", MARKING, ids=[" ".join(o[2:] or o) for o, _ in MARKING])
def test_decoding_options_that_mark_languages_otherwise_than_training_are_refused(data_bin, trained, options,
                                                                                   said):
    done = generate(data_bin, trained[0], *options)
    line = assert_one_error_line(done, "the checkpoint was trained with other language-token options than these",
                                 *said)
    assert "does not fit" not in line and not hypotheses(done)


def test_the_same_marking_spelled_otherwise_decodes_as_before(data_bin, trained):
    plain = generate(data_bin, trained[0], "--encoder-langtok", "tgt")
    assert plain.returncode == 0, plain.stderr[-2000:]
    spelled = generate(data_bin, trained[0], "--encoder-langtok", "tgt", "--langtoks", "{'main': ('tgt', None)}")
    assert spelled.returncode == 0, spelled.stderr[-2000:]
    assert len(hypotheses(plain)) == 37 and hypotheses(spelled) == hypotheses(plain)


def test_fairseq_interactive_refuses_a_contradicting_option_too(data_bin, trained):
    done = generate(data_bin, trained[0], "--encoder-langtok", "tgt", "--lang-tok-replacing-bos-eos", "--bpe",
                    "sentencepiece", "--sentencepiece-model", spm_of(data_bin), tool="fairseq-interactive",
                    input="The file is open.\n")
    assert_one_error_line(done, "--lang-tok-replacing-bos-eos: trained off, given on")


def test_a_model_trained_with_an_option_is_refused_without_it(data_bin, trained, tmp_path):
    path = with_stored(trained[0], tmp_path / "dec.pt", decoder_langtok=True)
    done = generate(data_bin, path, "--encoder-langtok", "tgt")
    assert_one_error_line(done, "--decoder-langtok: trained on, given off")


def test_the_hub_and_hltmt_translate_compare_the_stored_options_too(data_bin, trained, tmp_path):
    """The hub builds its task from the checkpoint's stored task options; the model's stored
    options must agree with them."""
    state = torch.load(trained[0], map_location="cpu", weights_only=True)
    state["cfg"]["model"].lang_tok_style = "mbart"
    torch.save(state, tmp_path / "mbart.pt")
    done = run([cli("hltmt-translate"), "--checkpoint", str(tmp_path / "mbart.pt"), "--data", data_bin,
                "--src", "en", "--tgt", "de", "--device", "cpu"], input="The file is open.\n")
    assert_one_error_line(done, "hltmt-translate: error: ", "--lang-tok-style: trained mbart, given multilingual")


def test_a_dictionary_built_otherwise_than_at_training_is_refused(data_bin, trained, tmp_path):
    """--fixed-dictionary of the same symbols in another order: every token id would mean
    another piece."""
    lines = open(os.path.join(data_bin, "dict.en.txt"), encoding="utf-8").read().splitlines(keepends=True)
    lines[10], lines[11] = lines[11], lines[10]
    (tmp_path / "dict.txt").write_text("".join(lines), encoding="utf-8")
    done = generate(data_bin, trained[0], "--encoder-langtok", "tgt", "--fixed-dictionary", str(tmp_path / "dict.txt"))
    assert_one_error_line(done, "the dictionary these options build", "is not the one the checkpoint was trained with")


# ---- the plugin's model under fairseq's parent task ---------------------------------------------
def test_the_parent_task_is_refused_naming_hltmt_translation(data_bin, trained):
    done = generate(data_bin, trained[0], "--encoder-langtok", "tgt", task="translation_multi_simple_epoch")
    assert_one_error_line(done, "--arch hltmt_transformer needs --task hltmt_translation "
                                "(got --task translation_multi_simple_epoch)")
    assert not hypotheses(done)


# ---- input files holding any bytes ----------------------------------------------------------------
LINE_BREAKS = "\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # what some reader takes for a line end


def test_every_input_line_gives_one_output_line_whatever_its_bytes(hltmt, translator, tmp_path):
    clean = sentences("en", "de", 5)
    inside = clean[3][:12] + "\u2028" + clean[3][12:]  # a Unicode line separator inside a line
    controls = "A\x0bB\x0cC\x1cD\x1dE\x1eF\u0085G\u2029H end."
    raw = (b"\xef\xbb\xbf" + clean[0].encode() + b"\r\n"  # a UTF-8 byte order mark, a Windows line end
           + clean[1].encode() + b"\r"  # a classic Mac line end
           + clean[2].encode() + b"\n"
           + b"caf\xe9 au lait\n"  # Latin-1, not UTF-8
           + b"nul\x00byte\n"
           + inside.encode() + b"\n"
           + controls.encode() + b"\r\n"
           + clean[4].encode())  # no line end at the end of the file
    path = tmp_path / "in.txt"
    path.write_bytes(raw)
    texts = [clean[0], clean[1], clean[2], inside, controls, clean[4]]
    refs = translator.translate(texts, "en", "de", beam=2, max_len=10)
    expected = [r.translate(str.maketrans({c: " " for c in LINE_BREAKS})) for r in refs]
    expected = expected[:3] + ["", ""] + expected[3:]
    options = ["--checkpoint", hltmt, "--device", "cpu", "--src", "en", "--tgt", "de", "--beam", "2", "--max-len",
               "10", "--input", str(path), "--buffer-size", "3"]
    done = translate(*options)
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stdout.split("\n") == expected + [""]
    assert len(done.stdout.splitlines()) == 8 and any(expected)  # no character of an output line ends it
    errors = [line for line in done.stderr.splitlines() if line.startswith("hltmt-translate: line ")]
    assert errors == ["hltmt-translate: line 4: is not valid UTF-8 (byte 0xe9 at byte 4): not translated; convert "
                      "the file to UTF-8",
                      "hltmt-translate: line 5: holds a NUL byte at byte 4 (binary data, or UTF-16 text?): not "
                      "translated"]
    as_json = translate(*options, "--json")
    records = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [r["line"] for r in records] == list(range(1, 9))
    assert [r.get("translation") or "" for r in records] == [r if r is not None else "" for r in
                                                             refs[:3] + [None, None] + refs[3:]]
    assert records[0]["source"] == clean[0] and records[5]["source"] == inside and records[6]["source"] == controls
    assert "error" in records[3] and "error" in records[4]


def test_a_utf16_file_is_refused_in_one_line(hltmt, tmp_path):
    (tmp_path / "utf16.txt").write_bytes("Hello.\nThe file is open.\n".encode("utf-16"))
    done = translate("--checkpoint", hltmt, "--device", "cpu", "--src", "en", "--tgt", "de", "--input",
                     str(tmp_path / "utf16.txt"), "-o", str(tmp_path / "out.txt"))
    assert_one_error_line(done, "hltmt-translate: error: the input starts with a UTF-16 / UTF-32 byte order mark")
    assert not (tmp_path / "out.txt").exists() and os.listdir(tmp_path) == ["utf16.txt"]


@pytest.mark.parametrize("option,value", [("--lenpen", "nan"), ("--lenpen", "inf"), ("--lenpen", "-inf"),
                                          ("--max-len", "inf"), ("--beam", "nan"), ("--max-tokens", "1e400")])
def test_numbers_that_are_nan_or_infinite_are_refused_in_one_line(hltmt, option, value):
    done = translate("--checkpoint", hltmt, "--src", "en", "--tgt", "de", f"{option}={value}", input="Hello.\n")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith(f"hltmt-translate: error: argument {option}: ") and value in done.stderr
    assert done.stdout == ""


def test_a_sentence_longer_than_the_token_budget_is_translated_alone(hltmt, translator):
    texts = sentences("en", "de", 4)
    done = translate("--checkpoint", hltmt, "--device", "cpu", "--src", "en", "--tgt", "de", "--beam", "2",
                     "--max-len", "10", "--max-tokens", "4", input="".join(t + "\n" for t in texts))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == translator.translate(texts, "en", "de", beam=2, max_len=10)


# ---- the Python API's arguments -----------------------------------------------------------------------
def api_cases(mt):
    ok = ["The file is open."]
    return [
        ("items", lambda: mt.translate_batch(None)),
        ("items", lambda: mt.translate_batch("en\tde\tThe file is open.")),
        ("items", lambda: mt.translate_batch(42)),
        ("items", lambda: mt.translate_batch({"en": "de"})),
        ("texts", lambda: mt.translate(None, "en", "de")),
        ("texts", lambda: mt.translate(7, "en", "de")),
        ("texts", lambda: mt.translate(b"The file is open.", "en", "de")),
        ("src", lambda: mt.translate(ok, ["en"], "de")),
        ("tgt", lambda: mt.translate(ok, "en", None)),
        ("beam", lambda: mt.translate(ok, "en", "de", beam=0)),
        ("beam", lambda: mt.translate(ok, "en", "de", beam=2.5)),
        ("beam", lambda: mt.translate(ok, "en", "de", beam=None)),
        ("lenpen", lambda: mt.translate(ok, "en", "de", lenpen=math.nan)),
        ("lenpen", lambda: mt.translate(ok, "en", "de", lenpen=-math.inf)),
        ("lenpen", lambda: mt.translate(ok, "en", "de", lenpen="1.0")),
        ("max_len", lambda: mt.translate(ok, "en", "de", max_len=0)),
        ("max_len", lambda: mt.translate(ok, "en", "de", max_len=math.inf)),
        ("max_tokens", lambda: mt.translate(ok, "en", "de", max_tokens=0)),
        ("max_tokens", lambda: mt.translate(ok, "en", "de", max_tokens=1e9)),
        ("max_sentences", lambda: mt.translate(ok, "en", "de", max_sentences=-1)),
        ("errors", lambda: mt.translate(ok, "en", "de", errors="ignore")),
        ("first_line", lambda: mt.translate(ok, "en", "de", first_line="1")),
        ("progress", lambda: mt.translate(ok, "en", "de", progress="bar")),
        ("beam", lambda: mt.generator(beam=-3)),
    ]


def test_every_bad_argument_of_the_python_api_is_one_error_naming_it(translator):
    for name, call in api_cases(translator):
        with pytest.raises(HltmtError) as caught:
            call()
        assert isinstance(caught.value, ValueError)
        assert str(caught.value).startswith(name) or f" {name} " in str(caught.value), (name, str(caught.value))
        assert "\n" not in str(caught.value)


def test_bad_load_arguments_are_one_error_naming_them(hltmt):
    from hltmt_plugin.hub import HltmtTranslator

    for kwargs, name in (({"device": "gpu7"}, "device"), ({"device": "cuda:3"}, "device"),
                         ({"max_tokens": 0}, "max_tokens"), ({"max_sentences": 0.5}, "max_sentences")):
        with pytest.raises(HltmtError, match=re.escape(name)):
            HltmtTranslator.load(hltmt, **kwargs)
    with pytest.raises(HltmtError, match="checkpoint must be a path"):
        HltmtTranslator.load(None)


def test_texts_the_model_cannot_be_given_fail_alone_with_their_line(translator):
    results = translator.translate(["The file is open.", "nul\x00here", "lone \udcff surrogate", "Good morning."],
                                   "en", "de", beam=2, max_len=10, errors="keep", details=True)
    assert [r.error is None for r in results] == [True, False, False, True]
    assert "NUL character at position 4" in results[1].error and "lone surrogate" in results[2].error
    alone = translator.translate(["The file is open.", "Good morning."], "en", "de", beam=2, max_len=10)
    assert [results[0].text, results[3].text] == alone
