"""Every function of the package, the scripts and the examples fits on a screen: a command is a
thin ``main`` over functions a test can call (docs/architecture.md, "How the code is kept").

A function's length is counted in logical lines (statements, each however many lines the
formatter spreads it over; comments and blank lines not counted), so the formatter's layout of
a long call does not change it."""

import ast
import io
import os
import tokenize

import pytest

from conftest import ROOT

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

MAX_LINES = 60
FOLDERS = ("hltmt_plugin", "scripts", "examples")


def python_files():
    for top in FOLDERS:
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            yield from (os.path.join(folder, name) for name in sorted(files) if name.endswith(".py"))


def long_functions(source: str, path: str):
    """(name, first line, length) of every function or method in ``source`` over MAX_LINES logical lines."""
    ends = [
        tok.start[0] for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.NEWLINE
    ]
    for node in ast.walk(ast.parse(source, path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = sum(node.lineno <= end <= node.end_lineno for end in ends)
            if length > MAX_LINES:
                yield node.name, node.lineno, length


def test_no_function_is_longer_than_a_screen():
    found = [
        f"{os.path.relpath(path, ROOT)}:{line} {name} ({length} lines)"
        for path in python_files()
        for name, line, length in long_functions(open(path, encoding="utf-8").read(), path)
    ]
    assert not found, f"functions over {MAX_LINES} lines: " + "; ".join(found)


def test_the_check_counts_nested_functions_and_methods():
    def body(lines, indent):
        return "\n".join(f"{indent}x{i} = {i}" for i in range(lines))

    method = f"class A:\n    def short(self):\n        pass\n\n    def long(self):\n{body(MAX_LINES, ' ' * 8)}\n"
    assert [(name, length) for name, _, length in long_functions(method, "a.py")] == [("long", MAX_LINES + 1)]
    nested = f"def outer():\n    def inner():\n{body(MAX_LINES, ' ' * 8)}\n    return inner\n"
    assert [name for name, _, _ in long_functions(nested, "b.py")] == ["outer", "inner"]
    assert not list(long_functions(f"def f():\n{body(MAX_LINES - 1, ' ' * 4)}\n", "c.py"))  # 60 lines: fine
    spread = "def g(\n" + "".join(f"    a{i},\n" for i in range(2 * MAX_LINES)) + "):\n    return (\n        1\n    )\n"
    assert not list(long_functions(spread, "d.py"))  # one statement over many lines counts once
