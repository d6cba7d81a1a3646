"""The corpora of scripts/scale_bench.py: English-centric, K languages, from DebMT-10's real text.

The ten real languages come first, then *pseudo-languages*: ``fr01`` is lines N..2N-1 of
en-fr, ``cs01`` those of en-cs, ..., ``gu19`` lines 19N..20N-1 of en-gu. Each has its own
files, its own language token and its own lines (no line is shared with another language).
"""

import os

from hltmt_plugin.atomic_files import write_text
from hltmt_plugin.corpora import DEBMT10_LANGS
from hltmt_plugin.experiments.recipe import pool_size
from timing import BenchError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEBMT10 = os.path.join(ROOT, "data", "debmt10")
REAL = DEBMT10_LANGS  # DebMT-10's ten languages, in WMT-10's order


class ScaleError(BenchError):
    """What the scale benchmark reports as its one error line."""


def languages(k):
    """The K non-English languages: the ten real ones (fewer if K < 10), then pseudo-languages
    ``fr01``, ``cs01``, ... (slice 1 of each real language), ``fr02``, ..."""
    if k <= len(REAL):
        return REAL[:k]
    return REAL + [f"{REAL[j % len(REAL)]}{j // len(REAL):02d}" for j in range(len(REAL), k)]


def source_of(lang):
    """(real language, slice number) a language's lines come from."""
    return (lang, 0) if lang in REAL else (lang[:2], int(lang[2:]))


def high_and_pool(langs):
    """HLT-MT's high-resource languages (the first third) and pool size T = min(3, H)."""
    high = langs[: max(1, round(len(langs) / 3))]
    return high, pool_size(high)


def _read(path, count):
    with open(path, encoding="utf-8") as f:
        return [line for _, line in zip(range(count), f)]


def write_corpus(k, lines, eval_lines, raw):
    """``{train,valid,test}.en-XX.{en,XX}`` for the K languages; each language takes its own
    slice of its real language's lines. Raises ScaleError when DebMT-10 has too few lines."""
    langs = languages(k)
    need = {"train": lines, "valid": eval_lines, "test": eval_lines}
    slices = {}
    for lang in langs:
        real, s = source_of(lang)
        slices.setdefault(real, []).append((lang, s))
    os.makedirs(raw, exist_ok=True)
    for real, members in slices.items():
        top = max(s for _, s in members) + 1
        for split, n in need.items():
            texts = {side: _read(os.path.join(DEBMT10, f"{split}.en-{real}.{side}"), top * n) for side in ("en", real)}
            check_lines(k, top, n, split, real, min(len(t) for t in texts.values()))
            for lang, s in members:
                for side, out_side in (("en", "en"), (real, lang)):
                    write_text(
                        os.path.join(raw, f"{split}.en-{lang}.{out_side}"), "".join(texts[side][s * n : (s + 1) * n])
                    )
    return langs


def check_fits(ks, lines, eval_lines):
    """Raise ScaleError unless DebMT-10 has the lines every K's corpus takes (checked before
    anything runs)."""
    for k in ks:
        slices = max(source_of(x)[1] for x in languages(k)) + 1
        for real in REAL[: min(k, len(REAL))]:
            for split, n in (("train", lines), ("valid", eval_lines), ("test", eval_lines)):
                check_lines(k, slices, n, split, real, _count(os.path.join(DEBMT10, f"{split}.en-{real}.{real}")))


def check_lines(k, slices, n, split, real, have):
    """Raise ScaleError unless ``have`` lines of ``split`` of en-``real`` hold ``slices`` slices of ``n``."""
    if have < slices * n:
        raise ScaleError(
            f"K={k} needs {slices} slices of {n} {split} lines of en-{real} ({slices * n} lines) but DebMT-10 "
            f"has {have}: lower --lines / --eval-lines or the largest K"
        )


def _count(path):
    if not os.path.isfile(path):
        raise ScaleError(f"{path} is missing: DebMT-10 must be in data/debmt10/")
    with open(path, "rb") as f:
        return sum(1 for _ in f)
