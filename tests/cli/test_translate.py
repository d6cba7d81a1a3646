"""hltmt-translate: mixed-direction lines in, fairseq-generate's translations out in input
order, streaming; --json with scores and routing; bad lines reported by number while the rest
is translated; unusable checkpoints and options end with one line."""
import json
import os
import random
import select
import subprocess
import sys
import time

import pytest
import torch

from conftest import LANGS, PAIRS, PLUGIN, ROOT, cli, run, spm_of, translate
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


def test_a_mixed_file_comes_back_in_input_order_as_fairseq_generate_writes_it(hltmt, data_bin, tmp_path):
    items = [(src, tgt, text, ref) for src, tgt in DIRECTIONS
             for text, ref in zip(sentences(src, tgt, K), reference(data_bin, hltmt, src, tgt))]
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
    mapping = HltmtTranslator.load(hltmt, device="cpu").model.routing_map()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.Popen([SCRIPT, *decode_options(hltmt), "--src", "en", "--tgt", "de", "--json",
                             "--buffer-size", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
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
    lines = [f"en\tgu\t{good[0]}", "xx\tgu\tsome text", "en\tgu\t", "no tabs here", f"en\tgu\t{good[1]}",
             "en\tgu\t" + " ".join(["word"] * 1100), f"en\tgu\t{good[2]}"]
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
        refs[0][0], "", "", "", refs[1][0], "", refs[2][0]]


def test_unusable_checkpoints_and_options_end_with_one_line(hltmt, data_bin, tmp_path):
    # the plain fairseq transformer of the same size (the baseline), written by fairseq-train
    done = run([cli("fairseq-train"), data_bin, "--user-dir", PLUGIN, "--task", "translation_multi_simple_epoch",
                "--arch", "transformer_hltmt_tiny", "--langs", LANGS, "--lang-pairs", PAIRS, "--encoder-langtok", "tgt",
                "--cpu", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1500", "--max-update", "1",
                "--disable-validation", "--no-save-optimizer-state", "--no-epoch-checkpoints",
                "--save-dir", str(tmp_path / "plain")])
    assert done.returncode == 0, done.stderr[-3000:]
    os.replace(tmp_path / "plain" / "checkpoint_last.pt", tmp_path / "plain.pt")
    # served (a model without routing), but a checkpoint of a one-direction task is not
    done = translate("--checkpoint", str(tmp_path / "plain.pt"), "--data", data_bin, "--spm", spm_of(data_bin),
                     "--src", "en", "--tgt", "de", "--beam", "1", "--max-len", "3", input="Hello.\n")
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 1, done.stderr[-3000:]
    state = torch.load(tmp_path / "plain.pt", map_location="cpu", weights_only=True)
    state["cfg"]["task"]._name = "translation"
    torch.save(state, tmp_path / "bilingual.pt")
    assert_one_line(translate("--checkpoint", str(tmp_path / "bilingual.pt"), "--src", "en", "--tgt", "de", input=""),
                    "holds a transformer_hltmt_tiny model of task translation, not a multilingual model of --task "
                    "hltmt_translation / translation_multi_simple_epoch")
    (tmp_path / "cut.pt").write_bytes(open(hltmt, "rb").read()[:5000])
    assert_one_line(translate("--checkpoint", str(tmp_path / "cut.pt"), input=""), "truncated or not a checkpoint")
    assert_one_line(translate(*decode_options(hltmt), "--src", "xx", "--tgt", "de", input="Hello\n"),
                    "unknown language 'xx'")
    state = torch.load(hltmt, map_location="cpu", weights_only=True)
    state["cfg"]["task"].data = str(tmp_path / "moved")
    torch.save(state, tmp_path / "moved.pt")
    assert_one_line(translate("--checkpoint", str(tmp_path / "moved.pt"), input=""), "give data=DIR / --data DIR")
    done = translate("--checkpoint", str(tmp_path / "moved.pt"), "--data", data_bin, "--spm", spm_of(data_bin),
                     "--src", "en", "--tgt", "de", "--beam", "1", "--max-len", "3", input="Hello.\n")
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 1, done.stderr[-3000:]
