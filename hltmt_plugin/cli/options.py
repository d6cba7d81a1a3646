#!/usr/bin/env python3
"""Every option the plugin adds to fairseq, grouped by what it belongs to, with its default
and help text, read from the code (the task's and criterion's ``add_args``, the model's
option dataclasses).

    hltmt-options                          # the options, as text
    hltmt-options --markdown > docs/options.md
    hltmt-options --check docs/options.md  # exit 1 when that file is not what --markdown writes

fairseq 0.12's ``fairseq-train --task hltmt_translation --arch hltmt_transformer --help``
does not list them: fairseq parses the command line once before it adds any task's or
model's options, and ``--help`` prints and exits during that first parse (the same happens to
fairseq's own ``--task translation --arch transformer``). This command lists them instead.
"""

import argparse
import sys
import textwrap
from dataclasses import dataclass
from typing import Callable, List, Sequence, Tuple

from hltmt_plugin.cli import add_version, register

MARKDOWN_HEAD = """\
# Options of hltmt_plugin

Every option the plugin adds to fairseq's commands, with its default and help text, grouped by
what it belongs to. This page is generated from the code: `hltmt-options --markdown >
docs/options.md` writes it, `hltmt-options` prints the same on the command line, and
`tests/cli/test_options.py` fails when this page is out of date.

All options of fairseq's `translation_multi_simple_epoch` task (`--langs`, `--lang-pairs`,
`--encoder-langtok`, `--sampling-method`, ...), of its `transformer` model and of its
`label_smoothed_cross_entropy` criterion keep working and are not repeated here; fairseq's
own documentation lists them.

fairseq 0.12's `fairseq-train --task hltmt_translation --arch hltmt_transformer --help` does
not list these options: fairseq parses the command line once, before it knows the task and
the model, and `--help` prints and exits during that first parse, before any task's or
model's options are added (fairseq's own `--task translation --arch transformer --help`
leaves out `--encoder-layers` the same way). No extension point of fairseq runs between
loading `--user-dir` and that first parse, so the plugin cannot add them there: use
`hltmt-options`.
"""


@dataclass
class Group:
    title: str  # what the options belong to
    used_with: str  # how they reach fairseq
    add: Callable[[argparse.ArgumentParser], None]  # adds this group's options (and possibly others)
    others: Sequence[Callable[[argparse.ArgumentParser], None]] = ()  # options of these are not this group's


def _dataclass_adder(config):
    def add(parser):
        from fairseq.dataclass.utils import gen_parser_from_dataclass

        gen_parser_from_dataclass(parser, config())

    return add


def groups() -> List[Group]:
    from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterionConfig
    from fairseq.tasks.translation_multi_simple_epoch import TranslationMultiSimpleEpochTask

    from hltmt_plugin.adapters.config import AdapterConfig
    from hltmt_plugin.criterions.hltmt_cross_entropy import HltmtCrossEntropyConfig
    from hltmt_plugin.peft import PeftConfig
    from hltmt_plugin.pool.config import SlpConfig
    from hltmt_plugin.pretrained import PretrainedConfig
    from hltmt_plugin.skills.config import SkillConfig
    from hltmt_plugin.tasks import temperature
    from hltmt_plugin.tasks.hltmt_translation import HltmtTranslationTask

    task, model, criterion = (
        "--task hltmt_translation",
        "--arch hltmt_transformer*",
        "--criterion hltmt_cross_entropy",
    )
    return [
        Group(
            "Task: HLT-MT's two stages and distributed checks",
            task,
            HltmtTranslationTask.add_args,
            (TranslationMultiSimpleEpochTask.add_args, temperature.add_args),
        ),
        Group("Task: a sampling temperature that moves with the epoch", task, temperature.add_args),
        Group("Model: the selective language-specific pool (HLT-MT, LS-MNMT)", model, _dataclass_adder(SlpConfig)),
        Group("Model: initialisation from XLM-R", model, _dataclass_adder(PretrainedConfig)),
        Group("Model: adapters (MAD-X, Houlsby, Pfeiffer)", model, _dataclass_adder(AdapterConfig)),
        Group("Model: encoder skills (SkillNet-X)", model, _dataclass_adder(SkillConfig)),
        Group("Model: which parameters train", model, _dataclass_adder(PeftConfig)),
        Group(
            "Criterion: the disparity term",
            criterion,
            _dataclass_adder(HltmtCrossEntropyConfig),
            (_dataclass_adder(LabelSmoothedCrossEntropyCriterionConfig),),
        ),
    ]


def _actions(add) -> List[argparse.Action]:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    add(parser)
    return [a for a in parser._actions if any(s.startswith("--") for s in a.option_strings)]


def _name(action) -> str:
    return max(action.option_strings, key=len)


def group_options(group: Group) -> List[argparse.Action]:
    """The options ``group.add`` adds that none of ``group.others`` adds, in their order."""
    taken = {_name(a) for add in group.others for a in _actions(add)}
    return [a for a in _actions(group.add) if _name(a) not in taken]


def usage(action) -> str:
    """``--name VALUE`` as a user types it."""
    if action.nargs == 0:  # a switch
        return _name(action)
    if action.choices:
        value = "{" + ",".join(map(str, action.choices)) + "}"
    else:
        value = action.metavar or {int: "N", float: "X"}.get(action.type, "VALUE")
    return f"{_name(action)} {value}"


def default(action) -> str:
    if action.nargs == 0:
        return "on" if action.default else "off"
    if action.default is None or action.default == argparse.SUPPRESS:
        return "-"
    return str(action.default)


def help_text(action) -> str:
    return " ".join((action.help or "").split())


def architectures() -> List[Tuple[str, str, str]]:
    """(architecture, model, description) of every architecture the plugin registers."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY

    rows = []
    for arch, fn in ARCH_CONFIG_REGISTRY.items():
        if fn.__module__.startswith("hltmt_plugin."):
            rows.append((arch, ARCH_MODEL_NAME_REGISTRY[arch], " ".join((fn.__doc__ or "").split()).replace("``", "`")))
    return rows


def text() -> str:
    out = [
        "Options that hltmt_plugin adds to fairseq's commands (fairseq's own options are not repeated).",
        "fairseq-train ... --help does not list them: fairseq stops at --help before it adds any task's",
        "or model's options.",
        "",
    ]
    for group in groups():
        out.append(f"{group.title} (with {group.used_with}):")
        for action in group_options(group):
            out.append(f"  {usage(action)}  (default: {default(action)})")
            out.extend(textwrap.wrap(help_text(action), 96, initial_indent="      ", subsequent_indent="      "))
        out.append("")
    out.append("Architectures (--arch):")
    for arch, model, about in architectures():
        out.append(f"  {arch}  (model {model})")
        out.extend(textwrap.wrap(about, 96, initial_indent="      ", subsequent_indent="      "))
    return "\n".join(out) + "\n"


def _cell(value: str) -> str:
    return value.replace("|", "\\|")


def markdown() -> str:
    out = [MARKDOWN_HEAD]
    for group in groups():
        out += [
            f"## {group.title}",
            "",
            f"With `{group.used_with}`.",
            "",
            "| option | default | help |",
            "|---|---|---|",
        ]
        for action in group_options(group):
            out.append(f"| `{_cell(usage(action))}` | `{_cell(default(action))}` | {_cell(help_text(action))} |")
        out.append("")
    out += ["## Architectures", "", "| `--arch` | model | sizes |", "|---|---|---|"]
    for arch, model, about in architectures():
        out.append(f"| `{arch}` | `{model}` | {_cell(about)} |")
    return "\n".join(out) + "\n"


def check(path: str) -> str:
    """What is wrong with the reference ``path`` ('' when it is what --markdown writes)."""
    try:
        with open(path, encoding="utf-8") as f:
            current = f.read()
    except (OSError, UnicodeDecodeError) as error:
        return f"cannot read {path} ({error})"
    if current != markdown():
        return f"{path} is out of date with the code: write it again with hltmt-options --markdown > {path}"
    return ""


def build_parser():
    """The command line of hltmt-options."""
    from hltmt_plugin.paths import READ_FILE, ArgumentParser, path_option

    parser = ArgumentParser(
        prog="hltmt-options", description="List the options hltmt_plugin adds to fairseq, with defaults and help."
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--markdown", action="store_true", help="write the Markdown reference (docs/options.md)")
    path_option(
        what, "--check", kind=READ_FILE, help="exit 1 when FILE is not what --markdown writes (a stale reference)"
    )
    return add_version(parser)


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    register()  # the task, model and criterion; keeps fairseq's start-up noise out
    if args.check:
        problem = check(args.check)
        if problem:
            parser.exit(1, f"hltmt-options: error: {problem}\n")
        print(f"{args.check} is up to date")
    else:
        sys.stdout.write(markdown() if args.markdown else text())


if __name__ == "__main__":
    main()
