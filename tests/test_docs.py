"""The README and the documentation pages: a README short enough to act on, links that lead
somewhere, fairseq command lines that fairseq's own parser accepts, installed commands that
answer --help, and text about the product only."""

import glob
import os
import re
import shlex
import subprocess

import pytest

from conftest import BIN, PLUGIN, ROOT

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

README = os.path.join(ROOT, "README.md")
PAGES = [README, *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def slug(heading):
    """The anchor GitHub gives a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path):
    text = re.sub(r"```.*?```", "", read(path), flags=re.S)
    return {slug(m) for m in re.findall(r"^#+ (.+)$", text, re.M)}


def test_readme_is_at_most_250_lines():
    assert len(read(README).splitlines()) <= 250


@pytest.mark.parametrize("page", PAGES, ids=lambda p: os.path.relpath(p, ROOT))
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(read(page)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if not os.path.exists(full):
            broken.append(f"{target} (no such file)")
        elif anchor and full.endswith(".md") and anchor not in anchors(full):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{os.path.relpath(page, ROOT)}: {broken}"


# words about how the project is made, not about the product (fairseq's own issue numbers name
# upstream bugs and may stay)
DEVELOPMENT_WORDS = [
    r"\bstand-?ins?\b",
    r"\bstanding in\b",
    r"\blent\b",
    r"\blending\b",
    r"\btravel",
    r"\bcarr(y|ied)\b.{0,40}\bbundle",
    r"\bbundle\b.{0,40}\bcarr(y|ied)\b",
    r"(?<!fairseq )\bissues? \d+",
]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: os.path.relpath(p, ROOT))
def test_pages_speak_of_the_product_only(page):
    text = " ".join(read(page).split())
    found = [m.group(0) for pattern in DEVELOPMENT_WORDS for m in re.finditer(pattern, text, re.I | re.S)]
    assert not found, f"{os.path.relpath(page, ROOT)}: {found}"


def readme_commands(tool):
    """The README's command lines that start with ``tool``, continuation lines joined, cut at a
    redirection or pipe, $USER_DIR replaced by the plugin's folder."""
    blocks = re.findall(r"```bash\n(.*?)```", read(README), re.S)
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    commands = []
    for line in lines:
        words = shlex.split(line, comments=True)
        if words and words[0] == tool:
            cut = next((i for i, w in enumerate(words) if w in (">", "|", "<")), len(words))
            commands.append([PLUGIN if w == "$USER_DIR" else w for w in words[1:cut]])
    return commands


@pytest.mark.parametrize(
    "tool,parser", [("fairseq-train", "get_training_parser"), ("fairseq-generate", "get_generation_parser")]
)
def test_the_readmes_fairseq_command_lines_parse(tool, parser):
    from fairseq import options

    commands = readme_commands(tool)
    assert commands, f"no {tool} command in the README"
    for argv in commands:
        args = options.parse_args_and_arch(getattr(options, parser)(), argv)  # exits on an unknown option
        assert args.task == "hltmt_translation" and args.user_dir == PLUGIN


def console_scripts():
    setup = read(os.path.join(ROOT, "setup.py"))
    return re.findall(r'"(hltmt-[a-z-]+) = hltmt_plugin\.(?:cli|experiments)\.\w+:main"', setup)


def test_every_installed_command_is_named_in_the_readme_and_answers_help():
    names = console_scripts()
    assert len(names) >= 8, names
    readme = read(README)
    assert [n for n in names if f"`{n}`" not in readme] == []
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    procs = {
        n: subprocess.Popen(
            [os.path.join(BIN, n), "--help"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for n in names
    }
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0 and f"usage: {name}" in out, (name, err[-2000:])
