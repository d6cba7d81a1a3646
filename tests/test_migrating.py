"""docs/migrating.md as a fairseq user types it: every command block of the page, taken from the
page, run in order as one shell script with the installed commands and this environment's
python first on the PATH (the page's first block makes a folder in $HOME and works there: HOME
is a temporary folder here). Each diff block stands beside the whole command it gives: its +
side is the next command block, its - side the page's command you have."""

import os
import re

import pytest

from conftest import BIN, ROOT, run

PAGE = os.path.join(ROOT, "docs", "migrating.md")
MARK = "<!-- runs -->"
BLOCK = re.compile(r"^(<!-- runs -->\n)?```(\w+)\n(.*?)^```$", re.M | re.S)


def blocks():
    """(language, text, marked) of each fenced block of the page, in order."""
    with open(PAGE, encoding="utf-8") as f:
        return [(m.group(2), m.group(3), bool(m.group(1))) for m in BLOCK.finditer(f.read())]


def sides(diff):
    """The old (' ' and '-' lines) and new (' ' and '+' lines) text of a diff block."""
    old = [line[1:] for line in diff.splitlines() if line[:1] in (" ", "-")]
    new = [line[1:] for line in diff.splitlines() if line[:1] in (" ", "+")]
    return "\n".join(old) + "\n", "\n".join(new) + "\n"


def script(folder):
    """The page's marked blocks as one bash script (python blocks written to files beside it)."""
    lines = ["set -euo pipefail"]
    for n, (language, text, _) in enumerate(b for b in blocks() if b[2]):
        if language == "bash":
            lines.append(text)
        elif language == "python":
            path = folder / f"block{n}.py"
            path.write_text(text, encoding="utf-8")
            lines.append(f"python {path}")
        else:
            raise AssertionError(f"a marked {language} block: nothing to run")
    return "\n".join(lines) + "\n"


@pytest.mark.fast
def test_every_command_block_of_the_page_is_marked_to_run():
    unmarked = [text[:80] for language, text, marked in blocks() if language in ("bash", "python") and not marked]
    assert not unmarked, unmarked
    assert [b[0] for b in blocks()].count("diff") >= 4


@pytest.mark.fast
def test_every_diff_stands_beside_the_whole_command_it_gives():
    found, commands = blocks(), []
    for n, (language, text, marked) in enumerate(found):
        if language == "diff":
            old, new = sides(text)
            assert not marked, f"diff block {n} is marked: the whole command beside it runs"
            assert old in commands, f"the - side of diff block {n} is no command of the page:\n{old}"
            assert n + 1 < len(found) and found[n + 1][:2] == ("bash", new), (
                f"diff block {n}: no whole command after it"
            )
        elif language == "bash":
            commands.append(text)


def test_the_pages_commands_run_as_shown_from_a_folder_outside_the_checkout(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "page.sh").write_text(script(tmp_path), encoding="utf-8")
    env = {"PATH": BIN + os.pathsep + os.environ["PATH"], "HOME": str(home)}
    done = run(["bash", str(tmp_path / "page.sh")], cwd=ROOT, env_extra=env)  # the page's first block leaves it
    folder = home / "hltmt-migrating"
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    for system in ("dense", "hltmt", "lsmnmt", "adapters", "skills"):
        assert (folder / "ckpt" / system / "checkpoint_best.pt").is_file(), system
    hypotheses = [
        line for line in (folder / "en-de.gen").read_text(encoding="utf-8").splitlines() if line.startswith("H-")
    ]
    assert len(hypotheses) == 20
    compared = [line for line in done.stdout.splitlines() if "dense:" in line and "hltmt:" in line]
    assert [line.split()[0] for line in compared] == ["en-de", "de-en"], done.stdout[-2000:]
    assert "stage all" in done.stderr + done.stdout  # the HLT-MT run went on to stage all
