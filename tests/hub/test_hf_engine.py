"""hltmt_plugin.hub.hf_engine: an export to transformers served with the translator's contract,
side by side with its checkpoint (the study's HLT-MT): the same lines, routes, lengths and
scores, mixed directions in one call, the same refusals; through hltmt-translate too."""

import json
import os

import pytest

from conftest import ROOT, cli, run

pytest.importorskip("transformers")

from hltmt_plugin.errors import HltmtConfigError  # noqa: E402
from hltmt_plugin.hub import HltmtTranslator  # noqa: E402

STUDY = os.path.join(ROOT, "docs", "results", "cpu-study")
CHECKPOINT = os.path.join(STUDY, "models", "hltmt.pt")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from hltmt_plugin.export.transformers import export

    out = str(tmp_path_factory.mktemp("hf_engine") / "hltmt")
    export(CHECKPOINT, out)
    return out


def items():
    found = []
    for tgt in ("de", "fi", "fr", "gu", "ro"):
        with open(os.path.join(STUDY, "refs", f"en-{tgt}.en"), encoding="utf-8") as f:
            found += [("en", tgt, line.rstrip("\n")) for line in list(f)[:4]]
    return found[::2] + found[1::2]  # the directions mixed


def test_the_export_serves_the_checkpoints_lines_routes_and_scores(folder):
    served = HltmtTranslator.load(folder)
    assert type(served).__name__ == "HfTranslator" and served.engine == "transformers"
    mt = HltmtTranslator.load(CHECKPOINT, device="cpu")
    bad = [("en", "xx", "The file."), ("de", "en", "Die Datei."), ("en", "de", "  ")]
    expected = mt.translate_batch(items() + bad, beam=5, details=True, errors="keep")
    found = served.translate_batch(items() + bad, beam=5, details=True, errors="keep")
    assert [r.text for r in found] == [r.text for r in expected]
    assert [r.routing for r in found] == [r.routing for r in expected]
    assert [r.tokens for r in found] == [r.tokens for r in expected]
    assert [r.error for r in found] == [r.error for r in expected] and found[-1].error is not None
    for mine, theirs in zip(found[: len(items())], expected):
        assert mine.score == pytest.approx(theirs.score, abs=2e-3)
    assert {r.routing["slp"] for r in found[: len(items())]} == {"m0", "m1", "m2", "universal"}


def test_options_of_another_engine_are_refused_in_one_line(folder):
    with pytest.raises(HltmtConfigError, match="compute type 'int8' is CTranslate2's"):
        HltmtTranslator.load(folder, compute_type="int8")
    with pytest.raises(HltmtConfigError, match="carries its own sentencepiece model"):
        HltmtTranslator.load(folder, spm=os.path.join(STUDY, "models", "spm.model"))


def test_hltmt_translate_serves_the_folder(folder, tmp_path):
    rows = tmp_path / "in.tsv"
    rows.write_text("".join(f"{s}\t{t}\t{x}\n" for s, t, x in items()[:4]), encoding="utf-8")
    done = run([cli("hltmt-translate"), "--checkpoint", folder, "--input", str(rows), "--json"])
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    expected = HltmtTranslator.load(CHECKPOINT, device="cpu").translate_batch(items()[:4], beam=5)
    assert [line["translation"] for line in lines] == expected
