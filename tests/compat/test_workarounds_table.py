"""docs/architecture.md's "Where each fairseq workaround lives": every row names the test that
fails without its workaround, and that test exists; every patch that ``compat.install`` applies
(``compat.PATCHES``) has a row; every change to a process says whether it is scoped to the call
that made it or the command's own. The checks run on planted tables too, so that each can fail."""

import ast
import os
import re

import pytest

from conftest import ROOT
from hltmt_plugin import compat

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

PAGE = os.path.join(ROOT, "docs", "architecture.md")
SECTION = "## Where each fairseq workaround lives"
COLUMNS = ["workaround", "where", "fairseq / torch behaviour", "test that fails without it"]
NODE = re.compile(r"^`(tests/[\w/]+\.py)::(\w+)(?:\[[^\]`]+\])?`$")
PATCH = re.compile(r"\bpatch `(\w+)`")
PROCESS = "What the plugin changes in a process"  # the table whose rows say for how long
SCOPES = ("scoped", "the command's own")


def section(text):
    """The section's text, up to the next heading of its level."""
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start : end if end != -1 else len(text)]


def cells(line):
    """A table row's cells (a ``|`` inside backquotes is the cell's text)."""
    parts, cell, quoted = [], "", False
    for char in line.strip()[1:-1]:
        if char == "`":
            quoted = not quoted
        if char == "|" and not quoted:
            parts.append(cell.strip())
            cell = ""
        else:
            cell += char
    return parts + [cell.strip()]


def tables(text):
    """Each table of the section: the heading above it, its header's cells and its rows' cells."""
    found, lines, heading = [], section(text).splitlines(), ""
    for i, line in enumerate(lines):
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|(\s*-+\s*\|)+$", lines[i + 1]):
            rows = []
            for row in lines[i + 2 :]:
                if not row.startswith("|"):
                    break
                rows.append(cells(row))
            found.append((heading, cells(line), rows))
    return found


def defined_tests(path):
    """The test functions a test file defines at its top level."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def problems(text, patches):
    """What is wrong with the section ``text`` for the patches named ``patches``."""
    said, named = [], set()
    found = tables(text)
    if not found:
        return ["no table"]
    for heading, header, rows in found:
        if header != COLUMNS:
            said.append(f"a table's columns are {header}, not {COLUMNS}")
            continue
        for row in rows:
            if len(row) != len(COLUMNS):
                said.append(f"{row[0]}: {len(row)} cells")
                continue
            named |= set(PATCH.findall(row[1]))
            if heading == PROCESS and not any(scope in row[1] for scope in SCOPES):
                said.append(f"{row[0]}: its where says neither {' nor '.join(SCOPES)}")
            test = NODE.match(row[3])
            if test is None:
                said.append(f"{row[0]}: {row[3]!r} is not one test's node id")
            elif not os.path.isfile(os.path.join(ROOT, test.group(1))):
                said.append(f"{row[0]}: no file {test.group(1)}")
            elif test.group(2) not in defined_tests(test.group(1)):
                said.append(f"{row[0]}: {test.group(1)} defines no {test.group(2)}")
    said += [f"the patch {name} has no row" for name in sorted(set(patches) - named)]
    said += [
        f"a row names the patch {name}, which compat.install does not apply" for name in sorted(named - set(patches))
    ]
    return said


def read_page():
    with open(PAGE, encoding="utf-8") as f:
        return f.read()


def test_every_row_names_a_test_that_exists_and_every_patch_has_a_row():
    assert problems(read_page(), [patch.name for patch in compat.PATCHES]) == []


def test_every_patch_has_a_name_of_its_own_a_function_that_applies_it_and_a_row_in_the_modules_table():
    names = [patch.name for patch in compat.PATCHES]
    assert len(names) == len(set(names)) and all(callable(patch.apply) for patch in compat.PATCHES)
    lines = compat.__doc__.splitlines()
    rulers = [i for i, line in enumerate(lines) if line.startswith("====")]
    rows = lines[rulers[1] + 1 : rulers[2]]  # the table's body, between its last two rulers
    assert [line.split()[0] for line in rows if line[:1].isalpha()] == names


ROW = (
    "| one-line errors | patch `excepthook` of `compat.install` | a traceback | `tests/test_plugin_import.py::{test}` |"
)
PLANTED = "{section}\n\n| {columns} |\n|---|---|---|---|\n{row}\n"


def planted(row, columns=" | ".join(COLUMNS)):
    return PLANTED.format(section=SECTION, columns=columns, row=row)


@pytest.mark.parametrize(
    "text, patches, said",
    [
        (planted(ROW.format(test="test_fairseqs_command_with_the_plugin_is_a_command")), ["excepthook"], []),
        (
            planted(ROW.format(test="test_fairseqs_command_with_the_plugin_is_a_command")),
            ["excepthook", "new_patch"],
            ["the patch new_patch has no row"],
        ),
        (planted(ROW.format(test="test_that_is_not_there")), ["excepthook"], ["defines no test_that_is_not_there"]),
        (planted(ROW.replace("`tests/test_plugin_import.py::{test}`", "none")), ["excepthook"], ["is not one test"]),
        (planted(ROW.replace(" a traceback |", "")), [], ["3 cells"]),
        (planted("| a | `a|b` | c |", columns="workaround | where | behaviour"), [], ["a table's columns"]),
        (SECTION + "\n\nno table here\n", [], ["no table"]),
        (
            planted(ROW.format(test="test_fairseqs_command_with_the_plugin_is_a_command")).replace(
                SECTION + "\n", f"{SECTION}\n\n### {PROCESS}\n"
            ),
            ["excepthook"],
            ["says neither scoped nor the command's own"],
        ),
    ],
)
def test_the_check_finds_a_row_or_a_test_that_is_missing(text, patches, said):
    found = problems(text, patches)
    assert len(found) == len(said) and all(part in line for part, line in zip(said, found)), found
