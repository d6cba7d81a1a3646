"""docs/adapters.md as a user types it: the command blocks marked ``<!-- runs -->`` (the worked
example: a base, hi added by training only its adapters and token row, hi's adapters exported and
imported into the base; then gu, a language outside the base's ``--langs``, its pairs binarized
with the base's dictionary, given its token row and trained; then hi's adapters from monolingual
text), taken from the page and run in order as one bash script, sizes cut by the one substitution
of every page (tests/page_blocks.py), in a folder outside the checkout laid out as the README's
quickstart leaves it (``runs/quickstart``: the session's data folder) with the clone's ``data/``.
What the page promises holds: no direction a run or an import trained is served as zero-shot,
and each checkpoint's trained directions are the base's and the new language's."""

import os
import re

import pytest

from conftest import BIN, ROOT, run
from hltmt_plugin.compat.safe_loading import load_state
from hltmt_plugin.compatibility import stored_options
from hltmt_plugin.directions import TRAINED, TrainedDirections
from page_blocks import blocks, script

PAGE = os.path.join(ROOT, "docs", "adapters.md")
BASE = ["en-fr", "en-de", "fr-en", "de-en"]


def marked():
    return [b for b in blocks(PAGE) if b.mark == "runs"]


@pytest.mark.fast
def test_the_marked_blocks_hold_the_worked_example_the_new_language_and_the_mlm_route(tmp_path):
    text = script(marked(), tmp_path)
    assert len(marked()) == 3
    for command in (
        "hltmt-adapters export",
        "hltmt-adapters import",
        "hltmt-adapters add-language --path",
        "hltmt-prepare-data --raw data/debmt10 --langs gu",
        "hltmt-train-language-adapter",
    ):
        assert command in text
    assert text.count("fairseq-train ") == 3 and text.count("fairseq-generate ") == 3
    assert "--max-update 8 " in text and "--steps 4" in text  # the one substitution, cut


def directions(path):
    return TrainedDirections.from_options(stored_options(load_state(path)))


def test_the_pages_commands_run_and_every_trained_direction_is_served_as_trained(data_bin, tmp_path):
    work = tmp_path / "work"
    (work / "runs").mkdir(parents=True)
    os.symlink(os.path.dirname(data_bin), work / "runs" / "quickstart")
    os.symlink(os.path.join(ROOT, "data"), work / "data")
    env = {"PATH": BIN + os.pathsep + os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    done = run(["bash", "-c", script(marked(), tmp_path)], env_extra=env, cwd=work, timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    parallel = done.stdout.split("## docs/adapters.md:")[:3]  # the parallel-data blocks: no zero-shot there
    assert "zero-shot" not in "".join(parallel)
    assert len(re.findall(r"^H-\d+\t", done.stdout, re.M)) > 0  # the decodings wrote hypotheses
    assert "imported hi into ckpt/base_plus_hi.pt" in done.stdout and "added gu to ckpt/base_plus_gu.pt" in done.stdout
    assert (work / "ckpt" / "base_plus_hi_mlm.pt").is_file()
    hi, base_plus_hi, gu = (
        directions(str(work / "ckpt" / name))
        for name in ("hi/checkpoint_last.pt", "base_plus_hi.pt", "gu/checkpoint_last.pt")
    )
    assert hi.pairs == base_plus_hi.pairs == [*BASE, "en-hi", "hi-en"]
    assert gu.pairs == [*BASE, "en-gu", "gu-en"]
    for served, pairs in ((hi, hi.pairs), (base_plus_hi, hi.pairs), (gu, gu.pairs)):
        assert {served.kind(*pair.split("-")) for pair in pairs} == {TRAINED}
