"""hltmt-export: a checkpoint exported to CTranslate2 and served by hltmt-translate
(``--checkpoint FOLDER``, or ``--engine ctranslate2`` with the checkpoint) gives the
checkpoint's output lines; bad uses end in one line; without CTranslate2 both commands say
how to install it."""

import json
import os
import random

import pytest

import hltmt_plugin.hub  # noqa: F401  (the plugin's safe loading, for the fixtures' checkpoints)
from conftest import cli, run
from export_common import make_folder
from hub_common import BEAM, DIRECTIONS, MAX_LEN, sentences

EXPORT, TRANSLATE = cli("hltmt-export"), cli("hltmt-translate")


def lines_of(n=4):
    items = [(s, t, text) for s, t in DIRECTIONS for text in sentences(s, t, n)]
    random.Random(5).shuffle(items)
    return "".join(f"{s}\t{t}\t{text}\n" for s, t, text in items) + "xx\tde\tunknown\n"


def translate(checkpoint, *extra, input=None):
    return run(
        [
            TRANSLATE,
            "--checkpoint",
            checkpoint,
            "--beam",
            str(BEAM),
            "--max-len",
            str(MAX_LEN),
            "--device",
            "cpu",
            *extra,
        ],
        input=input,
    )


def one_error_line(done, prog):
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), done.stderr[-2000:]
    return lines[0]


@pytest.fixture(scope="module")
def exported(hltmt, tmp_path_factory):
    pytest.importorskip("ctranslate2")
    out = str(tmp_path_factory.mktemp("cli_export") / "hltmt")
    done = run([EXPORT, "--checkpoint", hltmt, "--out", out])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "model(s): m" in done.stdout and "universal (" in done.stdout
    return out


def test_the_export_serves_the_checkpoints_lines_json_and_output_file(hltmt, exported, tmp_path):
    text = lines_of()
    expected = translate(hltmt, "--json", input=text)
    assert expected.returncode == 1  # the unknown language: a failed line
    out = tmp_path / "out.jsonl"
    found = translate(exported, "--json", "--output", str(out), "--threads", "1", input=text)
    assert found.returncode == 1 and found.stdout == ""
    mine = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    theirs = [json.loads(line) for line in expected.stdout.splitlines()]
    assert [(r["translation"], r["routing"], r.get("error")) for r in mine] == [
        (r["translation"], r["routing"], r.get("error")) for r in theirs
    ]
    assert "line 13: unknown language 'xx'" in found.stderr
    on_the_fly = translate(hltmt, "--engine", "ctranslate2", input=text)
    assert on_the_fly.stdout.splitlines() == [r["translation"] or "" for r in theirs]


def test_bad_uses_end_in_one_line(hltmt, exported, tmp_path):
    assert "--engine fairseq" in one_error_line(
        translate(exported, "--engine", "fairseq", input="en\tde\tx\n"), "hltmt-translate"
    )
    assert "exists" in one_error_line(run([EXPORT, "--checkpoint", hltmt, "--out", exported]), "hltmt-export")
    assert "holds --checkpoint" in one_error_line(
        run([EXPORT, "--checkpoint", hltmt, "--out", os.path.dirname(hltmt), "--force"]), "hltmt-export"
    )
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in os.listdir(exported):
        if os.path.isfile(os.path.join(exported, name)):
            (copy / name).write_bytes(open(os.path.join(exported, name), "rb").read())
    assert "is missing" in one_error_line(translate(str(copy), input="en\tde\tx\n"), "hltmt-translate")


def test_without_ctranslate2_both_commands_say_how_to_install_it(hltmt, tmp_path):
    blocker = tmp_path / "block" / "ctranslate2"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('not installed here')\n")
    env = {"PYTHONPATH": str(blocker.parent)}
    line = one_error_line(
        run([EXPORT, "--checkpoint", hltmt, "--out", str(tmp_path / "x")], env_extra=env), "hltmt-export"
    )
    assert "CTranslate2 is not installed" in line and ".[ctranslate2]" in line
    assert not (tmp_path / "x").exists()
    folder = tmp_path / "fake"
    make_folder(folder)
    line = one_error_line(
        run([TRANSLATE, "--checkpoint", str(folder)], env_extra=env, input="en\tde\tx\n"), "hltmt-translate"
    )
    assert "exported model and CTranslate2 is not installed" in line
