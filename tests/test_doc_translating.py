"""docs/translating.md's statements about messages and return values, checked against the code
by running them: its Python sessions (```pycon blocks) as doctests, every error line it quotes
against the one hltmt-translate prints, and its command examples' ``# line N:`` and ``# exit
status`` comments against what the command writes, on the study's committed model."""

import codecs
import doctest
import json
import logging
import os
import re
import shlex

import pytest

from conftest import ROOT

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

PAGE = os.path.join(ROOT, "docs", "translating.md")
SESSION = re.compile(r"^```pycon\n(.*?)^```$", re.M | re.S)
QUOTED_LINE = re.compile(r"`([\w.-]+): line N: [^`]*`")  # an error line as the page quotes it
EXAMPLE = re.compile(r"^```bash\n(printf '([^']*)' *\\?\n\s*\| hltmt-translate ([^\n]*)\n(.*?))^```$", re.M | re.S)


def page():
    with open(PAGE, encoding="utf-8") as f:
        return f.read()


def wrong_programs(text, prog):
    """The programs of the error lines ``text`` quotes (`NAME: line N: ...`) that are not ``prog``."""
    return [name for name in QUOTED_LINE.findall(text) if name != prog]


def run_command(argv, capsys):
    """hltmt-translate's main in this process: (status, stdout lines, stderr lines)."""
    from hltmt_plugin.cli import translate

    try:
        status = translate.main(argv)
    finally:
        logging.disable(logging.NOTSET)  # the command turns fairseq's log off for its process
    out, err = capsys.readouterr()
    return status, out.splitlines(), err.splitlines()


def test_the_pages_python_sessions_return_what_they_show(monkeypatch):
    sessions = SESSION.findall(page())
    assert sessions, "no ```pycon block in docs/translating.md"
    monkeypatch.chdir(ROOT)  # the page's paths: the checkout's
    parser, runner = doctest.DocTestParser(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for n, text in enumerate(sessions):
        runner.run(parser.get_doctest(text, {}, f"translating.md session {n}", PAGE, 0))
    logging.disable(logging.NOTSET)
    done = runner.summarize(verbose=False)
    assert done.failed == 0 and done.attempted >= 10, done


def test_the_error_lines_the_page_quotes_are_the_commands(tmp_path, capsys):
    from hltmt_plugin.cli.translate import PROG

    text = page()
    assert QUOTED_LINE.findall(text) and wrong_programs(text, PROG) == []
    assert wrong_programs("reported on stderr (`translate: line N: ...`)", PROG) == ["translate"]  # planted
    source = tmp_path / "in.tsv"
    source.write_text("en\tde\tThe file is open.\nen\txx\tThe file is open.\n", encoding="utf-8")
    model = "docs/results/cpu-study/models/hltmt.pt"
    argv = ["--checkpoint", os.path.join(ROOT, model), "--input", str(source), "--no-progress"]
    status, out, err = run_command(argv, capsys)
    assert status == 1 and len(out) == 2 and out[1] == ""
    assert [line for line in err if re.fullmatch(rf"{PROG}: line \d+: .+", line)] == [
        f"{PROG}: line 2: unknown language 'xx' (this model knows en,fr,cs,de,fi,lv,et,ro,hi,tr,gu)"
    ]


def test_the_pages_command_examples_print_what_their_comments_say(tmp_path, capsys, monkeypatch):
    examples = EXAMPLE.findall(page())
    assert examples, "no printf ... | hltmt-translate example in docs/translating.md"
    monkeypatch.chdir(ROOT)
    for n, (_, printed, options, comments) in enumerate(examples):
        source = tmp_path / f"in{n}.tsv"
        source.write_bytes(codecs.decode(printed, "unicode_escape").encode("utf-8"))
        status, out, _ = run_command([*shlex.split(options), "--input", str(source), "--no-progress"], capsys)
        said = re.findall(r"^# (line (\d+): (.*)|exit status (\d+))$", comments, re.M)
        assert said, comments
        for _, line, what, exit_status in said:
            if exit_status:
                assert status == int(exit_status), (options, status)
                continue
            record = json.loads(out[int(line) - 1])
            if what.startswith('{"error": "'):  # the message, up to the page's "..."
                shown = what[len('{"error": "') :].split("...")[0]
                assert record.get("error", "").startswith(shown), (line, record, shown)
            else:  # a translation
                assert "error" not in record and record["translation"], (line, record)
