#!/usr/bin/env python3
"""Fetch the WMT-10 corpora listed in a manifest and write them in the recipe's layout.

    python examples/wmt10/download.py --manifest examples/wmt10/manifest.tsv --out runs/wmt10/raw

For every manifest line (language, split, corpus, URL, format, English side, other side) it
downloads the URL once into OUT/downloads/ (resuming is free: a finished download is kept,
a partial one is restarted), extracts the two sides and appends them to
``OUT/{split}.en-XX.{en,XX}``, checking that both sides have the same number of lines.
Archive members are found by their path, or else by their file name alone (archives differ
in their top folder). Every file is written whole or not at all (hltmt_plugin.atomic_files:
a download, a split, OUT/PROVENANCE.tsv, which records what each file holds), so an
interrupted run never leaves a file that looks done.

Formats: ``tgz-pair`` / ``zip-pair`` (two plain-text members), ``gz-pair`` (two gzipped
URLs: the ``en``/``xx`` columns hold the URLs), ``tsv-gz`` (one gzipped TSV; ``en``/``xx``
are column numbers), ``tmx-gz`` (gzipped TMX; ``en``/``xx`` are language codes), ``sgm-tgz``
(WMT newstest SGML members in a tar archive).
"""

import argparse
import csv
import gzip
import os
import re
import sys
import tarfile
import time
import urllib.request
import zipfile
from collections import OrderedDict
from html import unescape
from xml.etree import ElementTree

from hltmt_plugin.atomic_files import AtomicFile, write_text

FORMATS = ("tgz-pair", "zip-pair", "gz-pair", "tsv-gz", "tmx-gz", "sgm-tgz")


class DownloadError(Exception):
    pass


def log(msg):
    print(f"[download] {msg}", flush=True)


def read_manifest(path):
    with open(path, encoding="utf-8") as f:
        rows = [line for line in f if line.strip() and not line.startswith("#")]
    reader = csv.DictReader(rows, delimiter="\t")
    entries = list(reader)
    for i, e in enumerate(entries, 2):
        if None in e.values() or set(e) != {"lang", "split", "corpus", "url", "format", "en", "xx"}:
            raise DownloadError(f"{path}: line {i} does not have the 7 tab-separated columns")
        if e["format"] not in FORMATS:
            raise DownloadError(f"{path}: line {i}: unknown format {e['format']!r} (one of {', '.join(FORMATS)})")
        if e["split"] not in ("train", "valid", "test"):
            raise DownloadError(f"{path}: line {i}: split must be train, valid or test, not {e['split']!r}")
    return entries


def fetch(url, folder, retries=3):
    """The local path of url's content, downloading it into folder once."""
    if "://" not in url or url.startswith("file://"):
        path = url[len("file://") :] if url.startswith("file://") else url
        if not os.path.isfile(path):
            raise DownloadError(f"{path} does not exist")
        return path
    os.makedirs(folder, exist_ok=True)
    name = re.sub(r"[^\w.-]+", "_", url.split("://", 1)[1])
    target = os.path.join(folder, name)
    if os.path.exists(target):
        return target
    for attempt in range(1, retries + 1):
        try:
            log(f"fetching {url}")
            with urllib.request.urlopen(url, timeout=60) as response, AtomicFile(target) as whole:
                out = whole.open(binary=True)
                total = int(response.headers.get("Content-Length") or 0)
                done, last = 0, time.time()
                while True:
                    chunk = response.read(1 << 20)
                    if not chunk:
                        break
                    out.write(chunk)
                    done += len(chunk)
                    if time.time() - last > 10:
                        log(f"  {done >> 20} MiB" + (f" of {total >> 20} MiB" if total else ""))
                        last = time.time()
                if total and done != total:  # the download is not kept
                    raise DownloadError(f"{url}: got {done} of {total} bytes")
            return target
        except (OSError, DownloadError) as error:
            if attempt == retries:
                raise DownloadError(f"could not fetch {url}: {error}")
            log(f"  attempt {attempt} failed ({error}); retrying")
            time.sleep(2 * attempt)


def find_member(names, wanted, archive):
    if wanted in names:
        return wanted
    same = [n for n in names if os.path.basename(n) == os.path.basename(wanted)]
    if len(same) == 1:
        return same[0]
    raise DownloadError(f"{archive}: no single member {wanted!r}" + (f" (candidates: {same})" if same else ""))


def text_lines(data):
    return data.decode("utf-8", errors="replace").splitlines()


def sgm_lines(data):
    return [unescape(m.group(1)).strip() for m in re.finditer(r"<seg[^>]*>(.*?)</seg>", data.decode("utf-8"))]


def extract(entry, path):
    fmt, en, xx = entry["format"], entry["en"], entry["xx"]
    if fmt in ("tgz-pair", "sgm-tgz"):
        with tarfile.open(path) as tar:
            names = [m.name for m in tar.getmembers() if m.isfile()]
            read = sgm_lines if fmt == "sgm-tgz" else text_lines
            return [read(tar.extractfile(find_member(names, w, path)).read()) for w in (en, xx)]
    if fmt == "zip-pair":
        with zipfile.ZipFile(path) as z:
            return [text_lines(z.read(find_member(z.namelist(), w, path))) for w in (en, xx)]
    if fmt == "gz-pair":
        return [text_lines(gzip.open(p).read()) for p in (path, fetch(xx, os.path.dirname(path)))]
    if fmt == "tsv-gz":
        ce, cx = int(en), int(xx)
        sides = ([], [])
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
            for line in f:
                cols = line.rstrip("\n").split("\t")
                if len(cols) > max(ce, cx):
                    sides[0].append(cols[ce])
                    sides[1].append(cols[cx])
        return list(sides)
    if fmt == "tmx-gz":
        sides = ([], [])
        with gzip.open(path) as f:
            for _, elem in ElementTree.iterparse(f):
                if elem.tag == "tu":
                    segs = {
                        tuv.get("{http://www.w3.org/XML/1998/namespace}lang", tuv.get("lang", "")).split("-")[
                            0
                        ]: "".join(tuv.find("seg").itertext())
                        for tuv in elem.findall("tuv")
                    }
                    if en in segs and xx in segs:
                        sides[0].append(segs[en])
                        sides[1].append(segs[xx])
                    elem.clear()
        return list(sides)
    raise DownloadError(f"unknown format {fmt}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--manifest", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "manifest.tsv"))
    p.add_argument("--out", required=True)
    p.add_argument("--langs", default=None, help="only these languages (comma-separated)")
    args = p.parse_args(argv)
    try:
        entries = read_manifest(args.manifest)
        if args.langs:
            keep = set(args.langs.split(","))
            unknown = keep - {e["lang"] for e in entries}
            if unknown:
                raise DownloadError(f"--langs: no manifest entry for {','.join(sorted(unknown))}")
            entries = [e for e in entries if e["lang"] in keep]
        groups = OrderedDict()
        for e in entries:
            groups.setdefault((e["split"], e["lang"]), []).append(e)
        os.makedirs(args.out, exist_ok=True)
        provenance = []
        for n, ((split, lang), group) in enumerate(groups.items(), 1):
            final = [os.path.join(args.out, f"{split}.en-{lang}.{side}") for side in ("en", lang)]
            if all(os.path.exists(f) for f in final):
                log(f"[{n}/{len(groups)}] {split} en-{lang}: done earlier")
                continue
            with AtomicFile(final[0]) as whole_en, AtomicFile(final[1]) as whole_xx:
                fe, fx = whole_en.open(), whole_xx.open()
                for e in group:
                    en_lines, xx_lines = extract(e, fetch(e["url"], os.path.join(args.out, "downloads")))
                    if len(en_lines) != len(xx_lines):
                        raise DownloadError(
                            f"{e['corpus']} ({e['url']}): {len(en_lines)} English lines but "
                            f"{len(xx_lines)} {lang} lines"
                        )
                    if not en_lines:
                        raise DownloadError(f"{e['corpus']} ({e['url']}): no lines")
                    fe.writelines(x.replace("\n", " ") + "\n" for x in en_lines)
                    fx.writelines(x.replace("\n", " ") + "\n" for x in xx_lines)
                    provenance.append((split, lang, e["corpus"], len(en_lines), e["url"]))
                    log(f"[{n}/{len(groups)}] {split} en-{lang}: {e['corpus']} {len(en_lines)} lines")
        record = os.path.join(args.out, "PROVENANCE.tsv")
        earlier = ""
        if os.path.exists(record):  # what earlier runs fetched, kept
            with open(record, encoding="utf-8") as f:
                earlier = f.read()
        write_text(record, earlier + "".join("\t".join(map(str, row)) + "\n" for row in provenance))
    except (DownloadError, tarfile.TarError, zipfile.BadZipFile, OSError, UnicodeDecodeError) as error:
        print(f"download: error: {error}", file=sys.stderr)
        return 1
    log(f"done: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
