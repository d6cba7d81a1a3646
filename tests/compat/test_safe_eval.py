"""fairseq's evaluated option values are read as literals only; the lists of what fairseq
evaluates are checked against the installed fairseq's source.

Then through every route that loads a checkpoint: each kind of option fairseq evaluates
(``utils.eval_bool``, ``eval_str_list``, ``eval_str_dict``, ``eval`` in the optimizer, a legacy
``args`` record), crafted into the ``trained`` fixture's checkpoint, through fairseq-generate,
fairseq-interactive, fairseq-train --restore-file / --finetune-from-model, the Python API,
hltmt-translate, hltmt-adapters export, hltmt-train-language-adapter and hltmt-report's gate
heatmap: one line naming the file and the option, a non-zero exit, and the marker file the code
would create is not there."""

import os
import re
import sys

import fairseq
import pytest
from fairseq import utils

from checkpoint_common import DECODE, KINDS, craft
from conftest import cli, run, train_args
from hltmt_plugin.compat import safe_eval
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


@pytest.fixture
def a_commands_process():
    """The literal evaluator, as every command's process gets it (compat.install); a program that
    imports the plugin keeps fairseq's own (tests/test_plugin_import.py)."""
    safe_eval.install()


def test_every_module_of_fairseq_that_calls_eval_is_patched(a_commands_process):
    calling = {
        "fairseq." + rel[:-3].replace(os.sep, ".")
        for rel, src in fairseq_sources()
        if re.search(r"(?<![\w.])eval\(", src)
    }
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


@pytest.mark.parametrize(
    "text",
    [
        "(0.9, 0.98)",
        "[10000, 50000]",
        "10000,50000",
        "True",
        "False",
        "None",
        "1e-8",
        "-1",
        " 3",
        "{'a': 1}",
        "[(512, 3)] * 20",
        "[(512, 3)] * 9 + [(1024, 3)] * 4 + [(2048, 1)] * 2",
        "[(512, 10, 5)] + [(512, 3, 2)] * 4 + [(512,2,2)] + [(512,2,2)]",
        "'x' * 3",
        "2 * [1]",
        "(None, 1e-3)",
        "[(1, 4), (2, 8)]",
        "1 - 2",
        "{1, 2}",
        "b'x'",
    ],
)
def test_literals_read_as_eval_reads_them(text):
    assert literal_value(text) == eval(text)


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('true')",
        "open('x')",
        "().__class__.__bases__",
        "x",
        "lambda: 1",
        "[i for i in 'ab']",
        "{**{}}",
        "[0] * 10_000_000",
        "'a' * 10 ** 9",
        "(1).real",
        "f'{1}'",
        "1 if True else 2",
        "[1] - [1]",
        "a.b",
    ],
)
def test_anything_else_is_refused(text):
    with pytest.raises(NotALiteral, match="is not a literal"):
        literal_value(text)


def test_fairseqs_helpers_keep_their_behaviour_and_run_no_code(a_commands_process, tmp_path):
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


# ---------------------------------------------------------------------------------------
# code in a checkpoint's stored options, on every route that loads a checkpoint

TRAIN = [
    "--optimizer",
    "adam",
    "--lr",
    "1e-3",
    "--max-tokens",
    "1000",
    "--max-update",
    "31",
    "--num-workers",
    "0",
    "--no-epoch-checkpoints",
]
ROUTES = {
    "fairseq-generate": lambda data, ckpt, tmp: (
        [cli("fairseq-generate"), data, *DECODE, "--path", ckpt, "--gen-subset", "test"],
        None,
    ),
    "fairseq-interactive": lambda data, ckpt, tmp: (
        [cli("fairseq-interactive"), data, *DECODE, "--path", ckpt],
        "hello\n",
    ),
    "fairseq-train --restore-file": lambda data, ckpt, tmp: (
        [cli("fairseq-train"), *train_args(data, *TRAIN, "--save-dir", str(tmp / "save"), "--restore-file", ckpt)],
        None,
    ),
    "fairseq-train --finetune-from-model": lambda data, ckpt, tmp: (
        [
            cli("fairseq-train"),
            *train_args(data, *TRAIN, "--save-dir", str(tmp / "save"), "--finetune-from-model", ckpt),
        ],
        None,
    ),
    "the Python API": lambda data, ckpt, tmp: (
        [
            sys.executable,
            "-c",
            # a program: it catches the plugin's one error family itself (the plugin installs no hook in it)
            "import sys\nfrom hltmt_plugin.errors import HltmtError\nfrom hltmt_plugin.hub import HltmtTranslator\n"
            "try:\n    print(HltmtTranslator.load(sys.argv[1]).translate(['hello'], src='en', tgt='de'))\n"
            "except HltmtError as error:\n    sys.exit(f'hltmt_plugin: error: {error}')",
            ckpt,
        ],
        None,
    ),
    "hltmt-translate": lambda data, ckpt, tmp: (
        [cli("hltmt-translate"), "--checkpoint", ckpt, "--src", "en", "--tgt", "de"],
        "hello\n",
    ),
    "hltmt-adapters export": lambda data, ckpt, tmp: (
        [cli("hltmt-adapters"), "export", "--path", ckpt, "--lang", "de", "--out", str(tmp / "de.adapters.pt")],
        None,
    ),
    "hltmt-train-language-adapter": lambda data, ckpt, tmp: (
        [
            cli("hltmt-train-language-adapter"),
            "--path",
            ckpt,
            "--lang",
            "de",
            "--text",
            write(tmp / "mono.de", "Hallo.\n"),
            "--spm",
            os.path.join(os.path.dirname(data), "spm", "spm.model"),
            "--out",
            str(tmp / "de.adapters.pt"),
        ],
        None,
    ),
    "hltmt-report --gate-checkpoint": lambda data, ckpt, tmp: (
        [
            cli("hltmt-report"),
            "--decode-dir",
            write(
                tmp / "decode" / "hltmt" / "seed1" / "en-de.gen",
                "T-0\tDas ist gut.\nD-0\t-1.0\tDas ist gut.\n",
                folder=tmp / "decode",
            ),
            "--high",
            "de",
            "--machine",
            "test",
            "--out",
            str(tmp / "report"),
            "--gate-checkpoint",
            ckpt,
        ],
        None,
    ),
}


def write(path, text, folder=None):
    """Write a small input file of a route; returns its path (or ``folder``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(folder or path)


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("kind", list(KINDS))
def test_code_in_a_stored_option_is_refused_and_never_runs(data_bin, trained, tmp_path, route, kind):
    ckpt, marker, option = craft(trained[0], tmp_path, kind)
    cmd, stdin = ROUTES[route](data_bin, ckpt, tmp_path)
    done = run(cmd, input=stdin)
    out = done.stdout + done.stderr
    assert not marker.exists(), f"{route} ran the code stored in {option}"
    assert done.returncode != 0, out[-2000:]
    assert "Traceback" not in out, out[-3000:]
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, out[-2000:]
    assert (
        errors[0]
        .split("error: ", 1)[1]
        .startswith(f"refused to load checkpoint {ckpt}: its stored option {option} = \"__import__('os').system(")
    ), errors[0]
    assert errors[0].endswith(
        "is not a literal, and fairseq evaluates that option as Python when it builds the model "
        "or task, so loading it could run code (nothing was run)"
    ), errors[0]
    assert not os.path.exists(tmp_path / "de.adapters.pt")


def test_code_given_on_the_command_line_for_an_evaluated_option_does_not_run(data_bin, tmp_path):
    """The same evaluator reads the user's own options (here --left-pad-source, which fairseq's
    multilingual data manager evaluates): literals as before, anything else refused in one line."""
    marker = tmp_path / "ran"
    done = run(
        [
            cli("fairseq-train"),
            *train_args(
                data_bin,
                *TRAIN,
                "--save-dir",
                str(tmp_path / "save"),
                "--left-pad-source",
                f"__import__('os').system('touch {marker}')",
            ),
        ]
    )
    assert not marker.exists()
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert re.search(
        r"^hltmt_plugin: error: the option value \"__import__\('os'\)\.system\(.* is not a literal "
        r"\(call: __import__\('os'\)\.system\(",
        done.stderr,
        re.M,
    ), done.stderr[-2000:]
