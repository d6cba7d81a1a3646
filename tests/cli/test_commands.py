"""What every installed command shares (hltmt_plugin/cli/__init__.py): every option that counts
processes or threads holds the one bound of an engine's threads
(:func:`hltmt_plugin.hub.arguments.count_option`), refused at parsing in one line, found in the
parsers the commands build; and every command's error lines start with its own name."""

import argparse
import importlib
import re

import pytest
from test_startup import installed_commands

from conftest import cli, run
from hltmt_plugin.hub.arguments import count_option, max_threads, threads_option

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

# an option that counts processes, threads or the jobs and runs of either, by its name
COUNTS = re.compile(r"proc|worker|thread|job|parallel|gpu")
ABSURD = "2147483647"
# what the discovery must find at least (a renamed option is noticed)
KNOWN = {
    ("hltmt-launch", "--nproc"),
    ("hltmt-prepare-data", "--workers"),
    ("hltmt-prepare-data", "--threads"),
    ("hltmt-translate", "--threads"),
    ("hltmt-main-job", "--decode-workers"),
    ("hltmt-main-job", "--train-jobs"),
    ("hltmt-main-job", "--ngpu"),
    ("hltmt-study", "--parallel"),
}


def parsers(parser, words=()):
    """(the subcommand's words, its parser) of ``parser`` and of each of its subcommands."""
    yield list(words), parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from parsers(sub, (*words, name))


def count_options():
    """(command, subcommand words, option, parser, action) of every option of every installed
    command that takes a value and whose name says it counts processes or threads."""
    found = []
    for command, module in installed_commands():
        for words, parser in parsers(importlib.import_module(module).build_parser()):
            for action in parser._actions:
                named = [o for o in action.option_strings if o.startswith("--") and COUNTS.search(o)]
                if named and action.nargs != 0:
                    found.append((command, words, named[0], parser, action))
    return found


def test_every_option_that_counts_processes_or_threads_holds_the_one_bound():
    found = count_options()
    assert KNOWN <= {(command, option) for command, _, option, _, _ in found}
    # every count is count_option's; an engine's --threads, whose 0 is not the engine's choice, threads_option's
    assert [(c, o) for c, _, o, _, action in found if action.type not in (count_option, threads_option)] == []


@pytest.mark.parametrize("value", [ABSURD, str(max_threads() + 1), "-1"])
@pytest.mark.parametrize("command, words, option, parser", [f[:4] for f in count_options()], ids=lambda v: str(v))
def test_an_absurd_count_is_refused_at_parsing_in_one_line(command, words, option, parser, value, capsys):
    with pytest.raises(SystemExit) as done:
        parser.parse_args([*words, f"{option}={value}"])
    lines = capsys.readouterr().err.splitlines()
    assert done.value.code == 2 and len(lines) == 1, lines
    assert f": error: argument {option}: {value} is out of range: a count of processes or threads is from " in lines[0]


def test_hltmt_launch_refuses_an_absurd_nproc_before_any_rank_starts(tmp_path):
    done = run([cli("hltmt-launch"), "--nproc", ABSURD, "--log-dir", str(tmp_path / "logs"), "--", "data"], timeout=60)
    assert done.returncode == 2 and done.stdout == "", done.stdout[-500:]
    assert done.stderr.startswith(f"hltmt-launch: error: argument --nproc: {ABSURD} is out of range"), done.stderr
    assert list(tmp_path.iterdir()) == []


# one bad argument per installed command, found after parsing where the command allows it ({tmp}: a
# new folder of the test; {missing}: a checkpoint that does not exist)
BAD = {
    "hltmt-adapters": ["export", "--path", "{missing}", "--lang", "hi", "--out", "{tmp}/hi.pt"],
    "hltmt-average-checkpoints": ["--inputs", "{missing}", "{missing}", "--output", "{tmp}/a.pt"],
    "hltmt-export": ["--checkpoint", "{missing}", "--out", "{tmp}/export"],
    "hltmt-import": ["--model", "{tmp}/model", "--out", "{tmp}/out"],
    "hltmt-launch": ["--nproc", "0", "--", "data"],
    "hltmt-main-job": ["--langs", "xx", "--run-dir", "{tmp}/run", "--dry-run"],
    "hltmt-options": ["--check", "{missing}"],
    "hltmt-prepare-data": ["--raw", "{tmp}/raw", "--out", "{tmp}/out", "--langs", "de"],
    "hltmt-report": ["--decode-dir", "{tmp}/decode", "--out", "{tmp}/report", "--high", "de"],
    "hltmt-serve": ["--model", "{missing}"],
    "hltmt-study": ["--langs", "xx", "--run-dir", "{tmp}/run", "--dry-run"],
    "hltmt-train-language-adapter": [
        *("--path", "{missing}", "--lang", "gu", "--text", "{tmp}/gu.txt", "--spm", "{missing}"),
        *("--out", "{tmp}/gu.pt"),
    ],
    "hltmt-translate": ["--checkpoint", "{missing}", "--src", "en", "--tgt", "de"],
}


def test_every_installed_command_has_a_bad_argument():
    assert sorted(BAD) == sorted(command for command, _ in installed_commands())


@pytest.mark.parametrize("command", sorted(BAD))
def test_every_installed_command_names_itself_in_its_error_line(command, tmp_path):
    args = [a.format(tmp=tmp_path, missing=tmp_path / "missing.pt") for a in BAD[command]]
    done = run([cli(command), *args], timeout=300)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode != 0 and lines and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert lines[-1].split()[0] == f"{command}:" and "error:" in lines[-1], lines
    assert [line for line in lines if line.startswith("hltmt_plugin:")] == [], lines
