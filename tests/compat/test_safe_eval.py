"""fairseq's evaluated option values are read as literals only; the lists of what fairseq
evaluates are checked against the installed fairseq's source."""
import os
import re
import sys

import pytest

import fairseq
from fairseq import utils

import hltmt_plugin  # noqa: F401  (installs the literal evaluator)
from hltmt_plugin.compat.safe_eval import EVALUATED_OPTIONS, EVALUATING_MODULES, NotALiteral, literal_value

FAIRSEQ = os.path.dirname(fairseq.__file__)
HELPERS = r"eval_str_list|eval_str_dict|eval_bool"


def fairseq_sources():
    for root, dirs, files in os.walk(FAIRSEQ):
        dirs[:] = [d for d in dirs if d not in ("examples", "__pycache__")]
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                with open(path, encoding="utf-8") as f:
                    yield os.path.relpath(path, FAIRSEQ), f.read()


def test_every_module_of_fairseq_that_calls_eval_is_patched():
    calling = {"fairseq." + rel[:-3].replace(os.sep, ".") for rel, src in fairseq_sources()
               if re.search(r"(?<![\w.])eval\(", src)}
    assert calling == set(EVALUATING_MODULES)
    for name in EVALUATING_MODULES:
        assert sys.modules[name].eval is literal_value, name


def test_every_option_fairseq_evaluates_is_checked_in_checkpoints():
    evaluated = set()
    for _, src in fairseq_sources():
        for call in re.finditer(rf"(?:(?<![\w.])eval|\b(?:{HELPERS}))\(\s*(?:self\.)?\w+\.(\w+)", src):
            evaluated.add(call.group(1))
    evaluated -= {"strip", "model_overrides"}  # a data file's line (codedataset), the command line's overrides
    assert evaluated <= EVALUATED_OPTIONS, evaluated - EVALUATED_OPTIONS


@pytest.mark.parametrize("text", [
    "(0.9, 0.98)", "[10000, 50000]", "10000,50000", "True", "False", "None", "1e-8", "-1", " 3", "{'a': 1}",
    "[(512, 3)] * 20", "[(512, 3)] * 9 + [(1024, 3)] * 4 + [(2048, 1)] * 2",
    "[(512, 10, 5)] + [(512, 3, 2)] * 4 + [(512,2,2)] + [(512,2,2)]", "'x' * 3", "2 * [1]", "(None, 1e-3)",
    "[(1, 4), (2, 8)]", "1 - 2", "{1, 2}", "b'x'",
])
def test_literals_read_as_eval_reads_them(text):
    assert literal_value(text) == eval(text)


@pytest.mark.parametrize("text", [
    "__import__('os').system('true')", "open('x')", "().__class__.__bases__", "x", "lambda: 1", "[i for i in 'ab']",
    "{**{}}", "[0] * 10_000_000", "'a' * 10 ** 9", "(1).real", "f'{1}'", "1 if True else 2", "[1] - [1]", "a.b",
])
def test_anything_else_is_refused(text):
    with pytest.raises(NotALiteral, match="is not a literal"):
        literal_value(text)


def test_fairseqs_helpers_keep_their_behaviour_and_run_no_code(tmp_path):
    marker = tmp_path / "ran"
    assert utils.eval_str_list("[1, 2]", int) == [1, 2] and utils.eval_str_list("3", int) == [3]
    assert utils.eval_bool("False") is False and utils.eval_bool(None, default=True) is True
    assert utils.eval_bool(True) is False  # fairseq's own quirk (eval of a bool is a TypeError), kept
    assert utils.eval_str_dict("{'k': 'v'}") == {"k": "v"}
    for helper in (utils.eval_str_list, utils.eval_str_dict, utils.eval_bool):
        with pytest.raises(NotALiteral):
            helper(f"__import__('os').system('touch {marker}')")
    from fairseq.models import fconv

    with pytest.raises(NotALiteral):
        fconv.eval(f"__import__('os').system('touch {marker}')")
    assert not marker.exists()
