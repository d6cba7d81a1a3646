"""The command blocks of the README, docs/ and examples/ pages, and the one substitution that cuts
their sizes for the suite.

Every ```bash and ```python block of a page is one of three kinds, by the line before it:

- no mark: run by tests/test_doc_blocks.py, the page's unmarked blocks in page order as one bash
  script (a python block as ``python`` reading it), from a fresh folder outside the checkout;
- ``<!-- runs -->``: run, with the blocks around it, by the page's own test (:data:`RUN_BY`);
- ``<!-- not run: WHY -->``: not run, for the reason it gives.

:data:`SIZES` is the one substitution, the same for every page: each option it names keeps its
place in the command and gets the suite's smaller value when the page's is larger. Nothing else
of a command changes."""

import glob
import os
import re
from typing import List, NamedTuple, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PAGES = sorted(
    {
        os.path.join(ROOT, "README.md"),
        *glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True),
        *glob.glob(os.path.join(ROOT, "examples", "**", "*.md"), recursive=True),
        *glob.glob(os.path.join(ROOT, "data", "**", "*.md"), recursive=True),
    }
)

# option -> the suite's value: a page's larger value is cut to it (the order of the stage switch
# and the end of training is kept: 3 < 8; eight updates leave five checkpoints after the switch)
SIZES = {
    "--max-update": 8,
    "--high-stage-updates": 3,
    "--save-interval-updates": 1,
    "--max-train": 500,
    "--steps": 4,
}
SIZE = re.compile(r"(?<!\S)(" + "|".join(re.escape(o) for o in SIZES) + r")([ =])(\d+)(?!\S)")

# the pages whose blocks marked <!-- runs --> are run by a test of their own
RUN_BY = {
    os.path.join("docs", "migrating.md"): "tests/test_migrating.py",
    os.path.join("docs", "adapters.md"): "tests/test_adapters_page.py",
    os.path.join("docs", "pretrained.md"): "tests/test_pretrained_loop.py",
}

FENCE = re.compile(r"^(?:<!-- (runs|not run: [^>]*\S) -->\n)?```(\w*)\n(.*?)^```$", re.M | re.S)
COMMAND_LANGUAGES = ("bash", "sh", "shell", "console", "python", "pycon")


class Block(NamedTuple):
    page: str  # relative to the checkout
    line: int  # the line of its opening fence
    language: str
    text: str
    mark: Optional[str]  # None, "runs" or "not run: WHY"


def blocks(page: str) -> List[Block]:
    """The command blocks of ``page`` (a path), in order."""
    with open(page, encoding="utf-8") as f:
        text = f.read()
    found = []
    for m in FENCE.finditer(text):
        if m.group(2) in COMMAND_LANGUAGES:
            line = text.count("\n", 0, m.start()) + 1 + (m.group(1) is not None)
            found.append(Block(os.path.relpath(page, ROOT), line, m.group(2), m.group(3), m.group(1)))
    return found


def every_block() -> List[Block]:
    return [b for page in PAGES for b in blocks(page)]


def cut_sizes(text: str) -> str:
    """``text`` with :data:`SIZES` applied: each named option's value, where larger, cut."""

    def cut(m):
        option, sep, value = m.group(1), m.group(2), int(m.group(3))
        return f"{option}{sep}{min(value, SIZES[option])}"

    return SIZE.sub(cut, text)


STATUS = re.compile(r"^# exit status (\d+)$", re.M)  # a block whose page states its exit status


def _with_status(b: Block, text: str) -> str:
    """A block that states ``# exit status N``: run in a subshell, and the script goes on only
    when it ends with N."""
    said = STATUS.findall(text)
    if not said:
        return text
    where = f"{b.page}:{b.line}"
    return (
        f"set +e\n(\nset -e\n{text}\n)\nstatus=$?\nset -e\n"
        f'[ "$status" -eq {said[-1]} ] || {{ echo "{where}: exit status $status, the page says {said[-1]}" >&2; exit 1; }}'
    )


def script(page_blocks: List[Block], folder) -> str:
    """The blocks as one bash script, sizes cut; each python block is written to a file in
    ``folder`` (a path) and run there by ``python`` (the environment's, first on the PATH)."""
    lines = ["set -euo pipefail"]
    for b in page_blocks:
        if b.language == "python":
            path = os.path.join(str(folder), f"{b.page.replace(os.sep, '-')}-{b.line}.py")
            with open(path, "w", encoding="utf-8") as f:
                f.write(cut_sizes(b.text))
            lines.append(f"echo '## {b.page}:{b.line}'; python {path}")
        elif b.language == "bash":
            lines.append(f"echo '## {b.page}:{b.line}'\n" + _with_status(b, cut_sizes(b.text)))
        else:
            raise AssertionError(f"{b.page}:{b.line}: a {b.language} block: nothing runs it; mark it not run")
    return "\n".join(lines) + "\n"
