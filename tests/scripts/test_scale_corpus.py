"""scripts/scale_corpus.py: the K languages (DebMT-10's ten, then pseudo-languages), each with
its own files, token and lines; the check that DebMT-10 holds enough lines; HLT-MT's
high-resource languages and pool."""

import os
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))

import scale_corpus  # noqa: E402

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


def test_pseudo_languages_have_their_own_token_files_and_lines(tmp_path):
    langs = scale_corpus.write_corpus(23, 4, 2, str(tmp_path))
    assert (
        langs[:10] == scale_corpus.REAL
        and langs[10:13] == ["fr01", "cs01", "de01"]
        and langs[-3:] == ["fr02", "cs02", "de02"]
    )
    assert len(set(langs)) == 23 and scale_corpus.languages(3) == scale_corpus.REAL[:3]
    assert scale_corpus.source_of("gu19") == ("gu", 19) and scale_corpus.source_of("de") == ("de", 0)
    for lang in langs:
        for split, n in (("train", 4), ("valid", 2), ("test", 2)):
            for side in ("en", lang):
                with open(tmp_path / f"{split}.en-{lang}.{side}", encoding="utf-8") as f:
                    assert len(f.readlines()) == n
    # fr01 is the second slice of en-fr, both sides aligned; no line is shared with fr or fr02
    with open(os.path.join(scale_corpus.DEBMT10, "train.en-fr.fr"), encoding="utf-8") as f:
        real = [next(f) for _ in range(12)]
    read = lambda name: open(tmp_path / name, encoding="utf-8").readlines()  # noqa: E731
    assert read("train.en-fr01.fr01") == real[4:8] and read("train.en-fr02.fr02") == real[8:12]
    assert read("train.en-fr.fr") == real[0:4]
    high, pool = scale_corpus.high_and_pool(langs)
    assert len(high) == 8 and pool == 3
    assert scale_corpus.high_and_pool(["de", "fr"]) == (["de"], 1)


def test_a_corpus_debmt10_cannot_hold_is_refused_before_anything_runs(tmp_path):
    scale_corpus.check_fits([10, 25], 100, 5)
    with pytest.raises(scale_corpus.ScaleError, match="K=200 needs 20 slices of 500 train lines"):
        scale_corpus.check_fits([200], 500, 5)
    with pytest.raises(scale_corpus.ScaleError, match="DebMT-10 has"):
        scale_corpus.write_corpus(200, 500, 5, str(tmp_path))
