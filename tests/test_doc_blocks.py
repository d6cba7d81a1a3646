"""Every ```python block of the README and the documentation runs as written: each block is run
alone by this environment's python, in a folder laid out as the pages' commands leave it (the
README quickstart's ``runs/quickstart/`` holding a model trained by the tests, deploying.md's
``exported/hltmt``, ``exported/hltmt-whole``, ``exported/hltmt-hf`` and ``exported/mnmt-hf`` made by its own
``hltmt-export`` commands, ``docs/`` the checkout's). A block
marked ``<!-- runs -->`` is run by tests/test_migrating.py with the commands before it; a block
that cannot run here is marked ``<!-- not run: WHY -->`` in its page."""

import glob
import os
import re
import shutil
import sys

import pytest

from conftest import ROOT, cli, run, spm_of

PAGES = sorted(
    {
        os.path.join(ROOT, "README.md"),
        *glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True),
        *glob.glob(os.path.join(ROOT, "examples", "**", "*.md"), recursive=True),
        *glob.glob(os.path.join(ROOT, "data", "**", "*.md"), recursive=True),
    }
)
BLOCK = re.compile(r"^(?:<!-- (runs|not run: [^>]*\S) -->\n)?```python\n(.*?)^```$", re.M | re.S)


def python_blocks():
    """(page relative to the checkout, number on the page, text, mark or None) of every block."""
    found = []
    for page in PAGES:
        with open(page, encoding="utf-8") as f:
            for n, m in enumerate(BLOCK.finditer(f.read())):
                found.append((os.path.relpath(page, ROOT), n, m.group(2), m.group(1)))
    return found


BLOCKS = [b for b in python_blocks() if b[3] is None]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, data_bin, trained):
    folder = tmp_path_factory.mktemp("pages")
    os.symlink(os.path.join(ROOT, "docs"), folder / "docs")  # the committed models, by the pages' paths
    quickstart = folder / "runs" / "quickstart"
    (quickstart / "ckpt").mkdir(parents=True)
    shutil.copy(trained[0], quickstart / "ckpt" / "checkpoint_best.pt")
    os.symlink(data_bin, quickstart / "bin")
    os.symlink(os.path.dirname(spm_of(data_bin)), quickstart / "spm")
    for command in (  # deploying.md's own export commands
        ["--checkpoint", "docs/results/cpu-study/models/hltmt.pt", "--out", "exported/hltmt"],
        ["--to", "transformers", "--checkpoint", "docs/results/cpu-study/models/mnmt.pt", "--out", "exported/mnmt-hf"],
        ["--checkpoint", "docs/results/cpu-study/models/hltmt.pt", "--out", "exported/hltmt-whole", "--whole-groups"],
        [
            "--to",
            "transformers",
            "--checkpoint",
            "docs/results/cpu-study/models/hltmt.pt",
            "--out",
            "exported/hltmt-hf",
        ],
    ):
        done = run([cli("hltmt-export"), *command], cwd=str(folder))
        assert done.returncode == 0, done.stderr[-3000:]
    return folder


@pytest.mark.parametrize("page, n, text, mark", BLOCKS, ids=[f"{b[0]}:{b[1]}" for b in BLOCKS])
def test_a_python_block_runs_as_written(workspace, page, n, text, mark):
    path = workspace / f"block-{page.replace(os.sep, '-')}-{n}.py"
    path.write_text(text, encoding="utf-8")
    done = run([sys.executable, str(path)], cwd=str(workspace), timeout=600)
    assert done.returncode == 0, f"{page}, python block {n}:\n{text}\n{done.stderr[-3000:]}"


def test_every_block_is_run_here_or_by_the_migration_test_or_says_why_not():
    marks = {(page, mark) for page, _, _, mark in python_blocks() if mark is not None}
    assert all(mark.startswith("not run: ") or page == os.path.join("docs", "migrating.md") for page, mark in marks)
    assert len(BLOCKS) >= 4, BLOCKS
