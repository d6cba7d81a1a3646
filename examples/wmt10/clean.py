#!/usr/bin/env python3
"""Clean downloaded WMT-10 training data: Moses punctuation normalisation (sacremoses),
length and length-ratio filters, exact duplicates removed. Valid and test sets are copied
unchanged (references must stay as released).

    python examples/wmt10/clean.py --raw runs/wmt10/raw --out runs/wmt10/clean
"""

import argparse
import os
import sys

from hltmt_plugin.atomic_files import AtomicFile, copy_file


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--raw", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--min-words", type=int, default=1)
    p.add_argument("--max-words", type=int, default=250)
    p.add_argument("--max-ratio", type=float, default=3.0, help="longer side / shorter side, in words")
    args = p.parse_args(argv)
    try:
        from sacremoses import MosesPunctNormalizer
    except ImportError:
        print('clean: error: this needs sacremoses: pip install -e ".[wmt10]"', file=sys.stderr)
        return 1

    os.makedirs(args.out, exist_ok=True)
    names = sorted(f for f in os.listdir(args.raw) if f.count(".") == 2 and "-" in f and not f.endswith(".partial"))
    pairs = sorted({(f.split(".")[0], f.split(".")[1].split("-")[1]) for f in names})
    if not pairs:
        print(f"clean: error: no {{split}}.en-XX.{{en,XX}} files in {args.raw}", file=sys.stderr)
        return 1
    for split, lang in pairs:
        src, tgt = (os.path.join(args.raw, f"{split}.en-{lang}.{s}") for s in ("en", lang))
        out = [os.path.join(args.out, f"{split}.en-{lang}.{s}") for s in ("en", lang)]
        if split != "train":
            for a, b in zip((src, tgt), out):
                copy_file(a, b)
            continue
        norm_en, norm_xx = MosesPunctNormalizer(lang="en"), MosesPunctNormalizer(lang=lang)
        seen, kept, total = set(), 0, 0
        with (
            open(src, encoding="utf-8") as fe,
            open(tgt, encoding="utf-8") as fx,
            AtomicFile(out[0]) as whole_en,
            AtomicFile(out[1]) as whole_xx,
        ):
            oe, ox = whole_en.open(), whole_xx.open()
            for e, x in zip(fe, fx):
                total += 1
                e, x = norm_en.normalize(e.strip()), norm_xx.normalize(x.strip())
                ne, nx = len(e.split()), len(x.split())
                if not (args.min_words <= ne <= args.max_words and args.min_words <= nx <= args.max_words):
                    continue
                if max(ne, nx) > args.max_ratio * min(ne, nx) or (e, x) in seen:
                    continue
                seen.add((e, x))
                oe.write(e + "\n")
                ox.write(x + "\n")
                kept += 1
        print(f"[clean] train en-{lang}: kept {kept} of {total} pairs", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
