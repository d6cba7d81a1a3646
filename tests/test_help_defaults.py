"""Every option of every installed command that has a default shows it in ``--help``: the rule
lives in the commands' one parser (:class:`hltmt_plugin.paths.ArgumentParser`); a parser
without it is caught."""

import argparse
import importlib
import re

import pytest

from test_docs import console_scripts

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


def has_default(action) -> bool:
    """An option (not a switch) with a value by default (not None, not empty)."""
    default = action.default
    return (
        bool(action.option_strings)
        and action.nargs != 0
        and action.help != argparse.SUPPRESS
        and default not in (None, argparse.SUPPRESS, "")
        and default != []
    )


def unshown(parser, prefix="") -> list:
    """The options of ``parser`` (and of its subcommands) with a default that their ``--help``
    block does not mention."""
    blocks = re.split(r"\n(?=  -)", parser.format_help())  # each option's block starts with "  -"
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += unshown(sub, f"{prefix}{name} ")
        elif has_default(action):
            first = action.option_strings[0]
            block = [b for b in blocks if re.match(rf"  {re.escape(first)}[ ,\n]", b + "\n")]
            assert len(block) == 1, (first, blocks)
            if "default" not in block[0]:
                found.append(prefix + first)
    return found


def command_parsers():
    from importlib.metadata import entry_points

    modules = {ep.name: ep.value.split(":")[0] for ep in entry_points(group="console_scripts")}
    return {name: importlib.import_module(modules[name]).build_parser() for name in console_scripts()}


def test_every_command_shows_every_default_in_its_help():
    parsers = command_parsers()
    assert len(parsers) >= 11 and "hltmt-translate" in parsers
    assert {name: unshown(parser) for name, parser in parsers.items() if unshown(parser)} == {}
    text = parsers["hltmt-translate"].format_help()
    for shown in (
        "beam size (with --sampling: the samples drawn) (default: 5)",
        "length penalty; from -10 to 10 (default: 1.0)",
    ):
        assert shown in " ".join(text.split()), text


def planted(parser_class):
    parser = parser_class(prog="planted")
    parser.add_argument("--beam", type=int, default=5)  # no help text at all
    parser.add_argument("--lenpen", type=float, default=1.0, help="length penalty")
    parser.add_argument("--data", default=None, help="a folder (default: the checkpoint's)")
    parser.add_argument("--quiet", action="store_true", help="a switch")
    parser.add_argument_group("search").add_argument("--max-len", type=int, default=200, help="longest")
    parser.add_subparsers(dest="what").add_parser("sub").add_argument("--max-tokens", type=int, default=4000)
    return parser


def test_a_parser_without_the_rule_is_caught_and_the_commands_parser_keeps_it():
    from hltmt_plugin.paths import ArgumentParser

    assert unshown(planted(argparse.ArgumentParser)) == ["--beam", "--lenpen", "--max-len", "sub --max-tokens"]
    assert unshown(planted(ArgumentParser)) == []
    text = " ".join(planted(ArgumentParser).format_help().split())
    assert "--beam BEAM default: 5" in text and "length penalty (default: 1.0)" in text
    assert "(default: the checkpoint's)" in text and "default: None" not in text and "default: False" not in text
