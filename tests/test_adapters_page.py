"""docs/adapters.md as a user types it: the command blocks marked ``<!-- runs -->`` (the worked
example: a base, hi added by training only its adapters and token row, hi's adapters exported and
imported into the base; then gu, a language outside the base's ``--langs``, given its token row and
trained), taken from the page and run in order as one bash script, with fewer updates, in a folder
laid out as the README's quickstart leaves it (``runs/quickstart``: the session's data, prepared with
de,fr,gu,hi). What the page promises holds: no direction a run or an import trained is served as
zero-shot, and each checkpoint's trained directions are the base's and the new language's."""

import os
import re

import pytest

from conftest import BIN, PLUGIN, ROOT, run
from hltmt_plugin.compat.safe_loading import load_state
from hltmt_plugin.compatibility import stored_options
from hltmt_plugin.directions import TRAINED, TrainedDirections

PAGE = os.path.join(ROOT, "docs", "adapters.md")
BLOCK = re.compile(r"^<!-- runs -->\n```bash\n(.*?)^```$", re.M | re.S)
# the page's update counts -> the test's (the commands are otherwise the page's)
FEWER = {
    "--high-stage-updates 1000 --max-update 2000": "--high-stage-updates 4 --max-update 8",
    "--max-update 1000": "--max-update 3",
}
BASE = ["en-fr", "en-de", "fr-en", "de-en"]


def script() -> str:
    """The page's marked blocks, in order, as one bash script with fewer updates."""
    with open(PAGE, encoding="utf-8") as f:
        text = "\n".join(BLOCK.findall(f.read()))
    for page, fewer in FEWER.items():
        assert page in text, page
        text = text.replace(page, fewer)
    return "set -euo pipefail\n" + text


@pytest.mark.fast
def test_the_marked_blocks_hold_the_worked_example_and_the_new_language():
    text = script()
    assert len(BLOCK.findall(open(PAGE, encoding="utf-8").read())) == 2
    for command in ("hltmt-adapters export", "hltmt-adapters import", "hltmt-adapters add-language --path"):
        assert command in text
    assert text.count("fairseq-train ") == 3 and text.count("fairseq-generate ") == 2


def directions(path):
    return TrainedDirections.from_options(stored_options(load_state(path)))


def test_the_pages_commands_run_and_every_trained_direction_is_served_as_trained(data_bin, tmp_path):
    (tmp_path / "runs").mkdir()
    os.symlink(os.path.dirname(data_bin), tmp_path / "runs" / "quickstart")
    env = {"USER_DIR": PLUGIN, "PATH": BIN + os.pathsep + os.environ.get("PATH", "")}
    done = run(["bash", "-c", script()], env_extra=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "zero-shot" not in done.stderr + done.stdout
    assert len(re.findall(r"^H-\d+\t", done.stdout, re.M)) > 0  # both decodings wrote hypotheses
    assert "imported hi into ckpt/base_plus_hi.pt" in done.stdout and "added gu to ckpt/base_plus_gu.pt" in done.stdout
    hi, base_plus_hi, gu = (
        directions(str(tmp_path / "ckpt" / name))
        for name in ("hi/checkpoint_last.pt", "base_plus_hi.pt", "gu/checkpoint_last.pt")
    )
    assert hi.pairs == base_plus_hi.pairs == [*BASE, "en-hi", "hi-en"]
    assert gu.pairs == [*BASE, "en-gu", "gu-en"]
    for served, pairs in ((hi, hi.pairs), (base_plus_hi, hi.pairs), (gu, gu.pairs)):
        assert {served.kind(*pair.split("-")) for pair in pairs} == {TRAINED}
