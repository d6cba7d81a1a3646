"""What the translator and hltmt-translate are compared with: fairseq-generate's translations of
a direction's test sentences, with the same beam and length, for one checkpoint."""

import functools
import os
import re

import pytest

from conftest import LANGS, PAIRS, PLUGIN, ROOT, TEST_SIZE, cli, run

BEAM, MAX_LEN = 4, 20
N = 12  # sentences per direction given to the API (fairseq-generate decodes the whole test set)
RAW = os.path.join(ROOT, "data", "debmt10")
DIRECTIONS = [("en", "de"), ("en", "gu"), ("de", "en")]  # pool module, universal layer, into en


def sentences(src, tgt, n=N):
    other = tgt if src == "en" else src
    with open(os.path.join(RAW, f"test.en-{other}.{src}"), encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f][: min(n, TEST_SIZE)]


def task_args(data_bin, ckpt, src, tgt, langs=LANGS, pairs=PAIRS):
    return [
        data_bin,
        "--user-dir",
        PLUGIN,
        "--task",
        "hltmt_translation",
        "--langs",
        langs,
        "--lang-pairs",
        pairs,
        "--encoder-langtok",
        "tgt",
        "-s",
        src,
        "-t",
        tgt,
        "--path",
        ckpt,
        "--cpu",
        "--beam",
        str(BEAM),
        "--max-len-b",
        str(MAX_LEN),
    ]


def parse_hypotheses(stdout):
    """{sentence id: (detokenized text, score)} from fairseq's D- lines."""
    found = {}
    for line in stdout.splitlines():
        if line.startswith("D-"):
            fields = line[2:].split("\t")
            found[int(fields[0])] = (fields[2] if len(fields) > 2 else "", float(fields[1]))
    return found


@functools.lru_cache(maxsize=None)
def reference(data_bin, ckpt, src, tgt, pairs=PAIRS):
    """fairseq-generate's hypotheses for the test set of ``src-tgt``, in test-set order."""
    done = run(
        [
            cli("fairseq-generate"),
            *task_args(data_bin, ckpt, src, tgt, pairs=pairs),
            "--gen-subset",
            "test",
            "--max-tokens",
            "3000",
            "--remove-bpe",
            "sentencepiece",
        ]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = parse_hypotheses(done.stdout)
    assert sorted(found) == list(range(TEST_SIZE))
    return [found[i] for i in range(TEST_SIZE)]


def without_language_tokens(text):
    """fairseq's D- text as the translator writes it: the translator leaves the decoder's
    language tokens out of its output (fairseq-generate keeps them)."""
    return re.sub(r"__[a-z]{2,3}__", "", text).strip()


def assert_same(results, expected, what):
    for k, (result, (text, score)) in enumerate(zip(results, expected)):
        assert result.error is None, f"{what} #{k}: {result.error}"
        text = without_language_tokens(text)
        assert result.text == text, f"{what} #{k}: {result.text!r} != fairseq's {text!r}"
        assert result.score == pytest.approx(score, abs=1e-3), f"{what} #{k}: score"
    assert len(results) == len(expected)


# the study's committed HLT-MT model: trained on English into ten languages only, its dictionaries and
# sentencepiece model beside it
STUDY_MODEL = os.path.join(ROOT, "docs", "results", "cpu-study", "models", "hltmt.pt")
