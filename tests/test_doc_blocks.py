"""Every ```bash and ```python block of the README, docs/ and examples/ runs as written, or says
why not (tests/page_blocks.py: the marks, and SIZES, the one substitution that cuts sizes).

Each page's unmarked blocks run in page order as one bash script, with this environment's
commands and python first on the PATH, from a fresh folder outside the checkout that holds what
a user's folder holds: ``data/``, ``examples/`` and ``scripts/`` of the clone (read only), ``docs/`` as a
tree of links to the clone's files (so the pages' ``docs/results/...`` paths read the committed
models, and what a command writes lands in the fresh folder), and, for every page but the
README, ``runs/quickstart/`` as the README's quickstart left it (the README's own blocks, run
first, once). What a page says a command prints or writes is checked (:data:`STATED`)."""

import os
import re
import shutil

import pytest

from conftest import BIN, ROOT, run
from page_blocks import PAGES, RUN_BY, SIZES, Block, blocks, cut_sizes, every_block, script

README = "README.md"
RUNNABLE = ("bash", "python")


def unmarked(page: str):
    return [b for b in blocks(os.path.join(ROOT, page)) if b.mark is None and b.language in RUNNABLE]


RUN_PAGES = [os.path.relpath(p, ROOT) for p in PAGES if unmarked(os.path.relpath(p, ROOT))]


def lay_out(folder, quickstart=None):
    """A user's folder: the clone's data/, examples/ and scripts/ linked, docs/ as links to its files,
    and a copy of the quickstart's runs/quickstart."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("data", "examples", "scripts"):
        os.symlink(os.path.join(ROOT, name), folder / name)
    shutil.copytree(os.path.join(ROOT, "docs"), folder / "docs", copy_function=os.symlink)
    if quickstart is not None:
        shutil.copytree(quickstart, folder / "runs" / "quickstart")
    return folder


def run_page(page, folder):
    (folder.parent / "scripts").mkdir(exist_ok=True)
    text = script(unmarked(page), folder.parent / "scripts")
    env = {"PATH": BIN + os.pathsep + os.environ["PATH"], "HOME": str(folder.parent)}
    done = run(["bash", "-c", text], env_extra=env, cwd=str(folder), timeout=1500)
    said = done.stdout[-4000:] + done.stderr[-6000:]
    assert done.returncode == 0, f"{page}: its blocks, run in order, stopped:\n{said}"
    assert "Traceback" not in done.stderr, f"{page}:\n{said}"
    return done


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    """The README's blocks run from a fresh folder: (the folder, what they printed)."""
    folder = lay_out(tmp_path_factory.mktemp("readme") / "work")
    return folder, run_page(README, folder)


def read_page(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def readme_stated(folder, done):
    q = folder / "runs" / "quickstart"
    assert (q / "ckpt" / "checkpoint_best.pt").is_file() and (q / "spm" / "spm.model").is_file()
    hypotheses = [line for line in lines(q / "en-hi.gen") if line.startswith("H-")]
    assert len(hypotheses) == len(lines(folder / "data" / "debmt10" / "test.en-hi.en"))
    assert len(lines(q / "en-hi.hyp")) == len(hypotheses)
    assert '"name": "BLEU"' in done.stdout and '"name": "chrF2"' in done.stdout  # sacrebleu's two scores
    # the last command: one line out per line in (eight updates translate to little, maybe nothing)
    assert len(done.stdout.split("\n]\n")[-1].splitlines()) == 2, done.stdout[-2000:]
    assert "hltmt-translate: 2 of 2 sentence(s) translated" in done.stderr


def translating_stated(folder, done):
    shown = re.findall(r"^# ([HE]-\d+<TAB>.*)$", read_page("docs", "translating.md"), re.M)
    assert len(shown) == 4 and all(line.replace("<TAB>", "\t") in done.stdout.splitlines() for line in shown), shown
    assert len(lines(folder / "runs" / "quickstart" / "out.txt")) == 2
    assert re.search(r"^averaged 5 checkpoint\(s\) into ckpt/averaged\.pt: ", done.stdout, re.M)
    assert (folder / "ckpt" / "averaged.pt").is_file()
    assert re.search(r"^H-\d+\t", done.stdout, re.M) and re.search(r"^D-\d+\t", done.stdout, re.M)


def deploying_stated(folder, done):
    for name in ("hltmt", "hltmt-int8", "hltmt-whole", "hltmt-card", "mnmt-hf", "hltmt-hf"):
        assert (folder / "exported" / name / "manifest.json").is_file(), name
    assert len(lines(folder / "out.txt")) == len(lines(folder / "in.tsv")) == 2
    card = (folder / "exported" / "hltmt-card" / "README.md").read_text(encoding="utf-8")
    assert 'license_name: "debmt10-licences"' in card and ROOT not in card and str(folder) not in card
    assert 'license_link: "https://example.org/debmt10/README.md"' in card


def distributed_stated(folder, done):
    assert {"checkpoint_last.pt", "checkpoint_best.pt", "rank0.log", "rank1.log"} <= set(
        os.listdir(folder / "ckpt" / "two")
    )
    assert "as rank 1" in (folder / "ckpt" / "two" / "rank1.log").read_text(encoding="utf-8")
    from hltmt_plugin.compat.safe_loading import load_state

    history = load_state(str(folder / "ckpt" / "two" / "checkpoint_last.pt"))["optimizer_history"]
    assert history[-1]["num_updates"] == SIZES["--max-update"]  # the page's run, to its (cut) end


def skills_stated(folder, done):
    assert (folder / "ckpt" / "skills" / "checkpoint_last.pt").is_file()
    assert re.search(r"^H-0\t", done.stdout, re.M)  # de-fr, never trained, translated by the matrix's skills


def wmt10_stated(folder, done):
    sizes = re.findall(r"^(\w+)(?:\.seed1)?: \S+, ([\d,]+) parameters, checkpoint_last\.pt about ", done.stdout, re.M)
    assert sorted(name for name, _ in sizes) == sorted(["mnmt", "hltmt", "lsmnmt"] * 2), sizes  # each recipe's three
    assert not (folder / "runs").exists()  # a dry run writes nothing


STATED = {
    README: readme_stated,
    os.path.join("docs", "translating.md"): translating_stated,
    os.path.join("docs", "deploying.md"): deploying_stated,
    os.path.join("docs", "distributed.md"): distributed_stated,
    os.path.join("docs", "skills.md"): skills_stated,
    os.path.join("examples", "wmt10", "README.md"): wmt10_stated,
}


def test_the_readmes_blocks_run_from_a_fresh_folder_and_do_what_it_says(quickstart):
    readme_stated(*quickstart)


@pytest.mark.parametrize("page", [p for p in RUN_PAGES if p != README])
def test_a_pages_blocks_run_in_order_from_a_fresh_folder(request, tmp_path, page):
    uses = any("runs/quickstart" in b.text for b in unmarked(page))  # the README's folder, made once if needed
    quickstart = request.getfixturevalue("quickstart")[0] / "runs" / "quickstart" if uses else None
    folder = lay_out(tmp_path / "work", quickstart)
    done = run_page(page, folder)
    if page in STATED:
        STATED[page](folder, done)


@pytest.mark.fast
def test_every_block_is_run_or_says_why_not():
    found = every_block()
    assert len(found) >= 50, len(found)
    for b in found:
        if b.language == "pycon":  # the Python sessions: doctests of tests/test_doc_translating.py
            assert b.page == os.path.join("docs", "translating.md") and b.mark is None, b
        elif b.mark == "runs":
            assert b.page in RUN_BY, f"{b.page}:{b.line} is marked to run, but no test runs that page's blocks"
        else:
            assert b.language in RUNNABLE, f"{b.page}:{b.line}: a {b.language} block; mark it not run: why"
            assert b.mark is None or b.mark.startswith("not run: "), b
    for page, test in RUN_BY.items():
        with open(os.path.join(ROOT, test), encoding="utf-8") as f:
            assert os.path.basename(page) in f.read(), (page, test)


@pytest.mark.fast
def test_the_one_substitution_cuts_only_what_it_names():
    text = "fairseq-train d --max-update 2000 --high-stage-updates 1000 --max-tokens 4096 --steps=20000 --lr 2e-3"
    assert (
        cut_sizes(text) == "fairseq-train d --max-update 8 --high-stage-updates 3 --max-tokens 4096 --steps=4 --lr 2e-3"
    )
    assert cut_sizes("--max-update 2 --max-updates 900 x--steps 9") == "--max-update 2 --max-updates 900 x--steps 9"
    assert SIZES["--high-stage-updates"] < SIZES["--max-update"]  # the stage switch stays before the end


@pytest.mark.fast
def test_the_script_runs_python_blocks_with_the_environments_python(tmp_path):
    made = script(
        [Block("p.md", 3, "python", "print(1)\n", None), Block("p.md", 9, "bash", "echo 2\n", None)], tmp_path
    )
    assert made.startswith("set -euo pipefail\n") and "python " + str(tmp_path / "p.md-3.py") in made
    assert (tmp_path / "p.md-3.py").read_text() == "print(1)\n"
    stated = script([Block("p.md", 5, "bash", "false\n# exit status 1\n", None)], tmp_path)
    assert run(["bash", "-c", stated]).returncode == 0
    assert run(["bash", "-c", stated.replace("false", "true")]).returncode == 1  # the page's status, or it fails
    with pytest.raises(AssertionError, match="nothing runs it"):
        script([Block("p.md", 3, "pycon", ">>> 1\n", None)], tmp_path)


def test_the_readmes_count_of_fast_tests_is_the_suites():
    """The README's "about N tests" of `make test` is, within 15%, what the fast tier collects."""
    import subprocess
    import sys

    with open(os.path.join(ROOT, README), encoding="utf-8") as f:
        said = [int(n) for n in re.findall(r"\(about (\d+) tests: those their file marks `fast`", f.read())]
    assert len(said) == 1, said
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not slow", "-p", "no:cacheprovider", "tests"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    collected = re.search(r"^(\d+)/\d+ tests collected", done.stdout, re.M)
    assert collected, done.stdout[-2000:] + done.stderr[-2000:]
    assert abs(int(collected.group(1)) - said[0]) <= said[0] * 0.15, (said, collected.group(0))
