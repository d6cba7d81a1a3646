"""The WMT-10 recipe's download and clean steps (examples/wmt10/download.py, then clean.py)
against a local HTTP server on 127.0.0.1 serving small archives of the real layouts (nothing
leaves the machine)."""

import gzip
import http.server
import io
import os
import sys
import tarfile
import threading

import pytest

from conftest import ROOT, run

RECIPE = os.path.join(ROOT, "examples", "wmt10")
HEADER = "lang\tsplit\tcorpus\turl\tformat\ten\txx\n"


def add(tar, name, text):
    data = text.encode("utf-8")
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def sgm(lines, lang):
    segs = "".join(f'<seg id="{i}">{line}</seg>\n' for i, line in enumerate(lines, 1))
    return f'<refset setid="newstest" srclang="any" trglang="{lang}">\n<doc docid="d">\n{segs}</doc>\n</refset>\n'


@pytest.fixture()
def server(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    en = [
        "The house is small .",
        "I like green tea .",
        "The house is small .",
        "Hello",
        "one two three four five six seven eight nine ten",
    ]
    fr = [
        "La maison est petite .",
        "J'aime le thé vert .",
        "La maison est petite .",
        "Bonjour",
        "un",
    ]  # the last pair fails the length-ratio filter; the third is a duplicate
    with tarfile.open(root / "fr-en.tgz", "w:gz") as tar:  # members under a top folder
        add(tar, "release/europarl-v7.fr-en.en", "\n".join(en) + "\n")
        add(tar, "release/europarl-v7.fr-en.fr", "\n".join(fr) + "\n")
    with gzip.open(root / "nc.fr-en.tsv.gz", "wt", encoding="utf-8") as f:
        f.write('Il a dit « oui » .\tHe said "yes" .\nMerci\tThanks\n')
    with tarfile.open(root / "dev.tgz", "w:gz") as tar:
        add(tar, "dev/newstest2013-src.en.sgm", sgm(["A &amp; B .", "Good night ."], "en"))
        add(tar, "dev/newstest2013-ref.fr.sgm", sgm(["A &amp; B .", "Bonne nuit ."], "fr"))
    with gzip.open(root / "bad.tsv.gz", "wt", encoding="utf-8") as f:
        f.write("only one column\n")
    requests = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(root), **kw)

        def log_message(self, *a):
            requests.append(self.path)

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", requests
    httpd.shutdown()


def manifest(path, base, lines):
    path.write_text(HEADER + "".join("\t".join(cols).replace("BASE", base) + "\n" for cols in lines))
    return str(path)


GOOD = [
    ("fr", "train", "europarl-v7", "BASE/fr-en.tgz", "tgz-pair", "europarl-v7.fr-en.en", "europarl-v7.fr-en.fr"),
    ("fr", "train", "news-commentary", "BASE/nc.fr-en.tsv.gz", "tsv-gz", "1", "0"),
    (
        "fr",
        "valid",
        "newstest2013",
        "BASE/dev.tgz",
        "sgm-tgz",
        "dev/newstest2013-src.en.sgm",
        "dev/newstest2013-ref.fr.sgm",
    ),
    (
        "fr",
        "test",
        "newstest2013",
        "BASE/dev.tgz",
        "sgm-tgz",
        "dev/newstest2013-src.en.sgm",
        "dev/newstest2013-ref.fr.sgm",
    ),
]


def test_download_then_clean(server, tmp_path):
    base, requests = server
    out = tmp_path / "raw"
    done = run(
        [
            sys.executable,
            os.path.join(RECIPE, "download.py"),
            "--manifest",
            manifest(tmp_path / "m.tsv", base, GOOD),
            "--out",
            str(out),
        ]
    )
    assert done.returncode == 0, done.stdout + done.stderr
    en = (out / "train.en-fr.en").read_text().splitlines()
    fr = (out / "train.en-fr.fr").read_text().splitlines()
    assert len(en) == len(fr) == 7
    assert en[0] == "The house is small ." and fr[1] == "J'aime le thé vert ."
    assert en[5] == 'He said "yes" .' and fr[5] == "Il a dit « oui » ."
    assert (out / "valid.en-fr.en").read_text().splitlines() == ["A & B .", "Good night ."]
    assert (out / "test.en-fr.fr").read_text().splitlines() == ["A & B .", "Bonne nuit ."]
    assert "europarl-v7" in (out / "PROVENANCE.tsv").read_text()
    fetched = len(requests)
    assert fetched == 3  # dev.tgz once for both splits

    again = run(
        [
            sys.executable,
            os.path.join(RECIPE, "download.py"),
            "--manifest",
            manifest(tmp_path / "m.tsv", base, GOOD),
            "--out",
            str(out),
        ]
    )
    assert again.returncode == 0 and len(requests) == fetched  # a rerun fetches nothing

    clean = tmp_path / "clean"
    done = run([sys.executable, os.path.join(RECIPE, "clean.py"), "--raw", str(out), "--out", str(clean)])
    assert done.returncode == 0, done.stderr
    en = (clean / "train.en-fr.en").read_text().splitlines()
    fr = (clean / "train.en-fr.fr").read_text().splitlines()
    assert len(en) == len(fr) == 5  # the duplicate and the 10-to-1 pair are gone
    assert "one two three four five six seven eight nine ten" not in en
    assert fr[3] == 'Il a dit " oui " .'  # Moses punctuation normalisation of the French quotes
    assert (clean / "test.en-fr.fr").read_text() == (out / "test.en-fr.fr").read_text()


@pytest.mark.parametrize(
    "line, message",
    [
        (("fr", "train", "bad", "BASE/bad.tsv.gz", "tsv-gz", "1", "0"), "no lines"),
        (("fr", "train", "missing", "BASE/nothing.tgz", "tgz-pair", "a", "b"), "could not fetch"),
        (
            ("fr", "train", "member", "BASE/fr-en.tgz", "tgz-pair", "europarl-v7.fr-en.en", "nope.fr"),
            "no single member 'nope.fr'",
        ),
        (("fr", "train", "fmt", "BASE/fr-en.tgz", "rar", "a", "b"), "unknown format 'rar'"),
    ],
)
def test_download_errors_are_clear_and_leave_no_finished_file(server, tmp_path, line, message):
    base, _ = server
    out = tmp_path / "raw"
    done = run(
        [
            sys.executable,
            os.path.join(RECIPE, "download.py"),
            "--manifest",
            manifest(tmp_path / "m.tsv", base, [line]),
            "--out",
            str(out),
        ]
    )
    assert done.returncode != 0
    assert "download: error:" in done.stderr and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (out / "train.en-fr.en").exists()
