"""The real path: fairseq-train / -generate / -validate / -interactive in subprocesses on a
DebMT-10 slice, scored with sacreBLEU, and bad options refused with one clear line."""
import json
import os
import re

import pytest

from conftest import PLUGIN, TEST_SIZE, cli, run, train_args


def generate_args(data_bin, ckpt, src, tgt, *extra):
    return [data_bin, "--user-dir", PLUGIN, "--task", "hltmt_translation", "--langs", "en,de,fr,gu,hi",
            "--lang-pairs", "en-de,en-fr,en-gu,en-hi,de-en,gu-en", "--encoder-langtok", "tgt",
            "-s", src, "-t", tgt, "--path", ckpt, "--cpu", *extra]


@pytest.mark.parametrize("src, tgt", [("en", "de"), ("en", "gu")])
def test_generate_and_score_high_and_low_resource_directions(data_bin, trained, tmp_path, src, tgt):
    ckpt, _ = trained
    done = run([cli("fairseq-generate"), *generate_args(
        data_bin, ckpt, src, tgt, "--gen-subset", "test", "--beam", "5", "--max-tokens", "3000",
        "--max-len-b", "40", "--remove-bpe", "sentencepiece")])
    assert done.returncode == 0, done.stderr[-3000:]
    hyps, refs = {}, {}
    for line in done.stdout.splitlines():
        kind, _, rest = line.partition("-")
        if kind in ("D", "T") and "\t" in rest:
            fields = rest.split("\t")
            (hyps if kind == "D" else refs)[int(fields[0])] = fields[-1]
    assert len(hyps) == TEST_SIZE and hyps.keys() == refs.keys()
    (tmp_path / "hyp").write_text("".join(hyps[i] + "\n" for i in sorted(hyps)))
    (tmp_path / "ref").write_text("".join(refs[i] + "\n" for i in sorted(refs)))
    score = run([cli("sacrebleu"), str(tmp_path / "ref"), "-i", str(tmp_path / "hyp"), "-m", "bleu", "chrf", "-b"])
    assert score.returncode == 0, score.stderr
    bleu, chrf = json.loads(score.stdout)
    assert 0 <= bleu <= 100 and 0 <= chrf <= 100
    assert f"__{tgt}__" not in "".join(hyps.values())  # the language token is stripped from output


def test_validate_and_interactive_load_the_checkpoint(data_bin, trained):
    ckpt, _ = trained
    done = run([cli("fairseq-validate"), *generate_args(data_bin, ckpt, "en", "de", "--valid-subset", "valid",
                                                        "--max-tokens", "3000")])
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"valid on 'valid' subset \| loss \d", done.stdout + done.stderr)
    done = run([cli("fairseq-interactive"), *generate_args(data_bin, ckpt, "en", "fr", "--beam", "2",
                                                           "--max-len-b", "10")],
               input="▁The ▁file ▁is ▁open\n")
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"^H-0\t", done.stdout, re.M)


def test_training_log_reports_the_pool(trained):
    _, log = trained
    assert "HLT-MT: pool of 2 modules for de,fr; universal layer for en,gu,hi" in log
    assert re.search(r"num_updates=30", log) or "num_updates 30" in log
    assert "Traceback" not in log


@pytest.mark.parametrize("extra, message", [
    (["--high-resource-langs", "de,xx"], "--high-resource-langs names xx, not in the language list"),
    (["--slp-pool-size", "0"], "--slp-pool-size must lie in [1, 2]"),
    (["--slp-pool-size", "5"], "--slp-pool-size must lie in [1, 2]"),
    (["--encoder-langtok", "src"], "--encoder-langtok tgt or from --encoder-langtok src --decoder-langtok"),
])
def test_bad_options_fail_with_one_clear_line(data_bin, tmp_path, extra, message):
    done = run([cli("fairseq-train"), *train_args(data_bin, "--max-update", "1", "--save-dir", str(tmp_path),
                                                  "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000",
                                                  *extra)])
    assert done.returncode != 0
    assert "hltmt_plugin: error:" in done.stderr and message in done.stderr
    assert "Traceback" not in done.stderr
    assert not os.listdir(tmp_path)  # nothing written that looks like a result
