"""hltmt_plugin.progress: a command's progress lines, on a terminal, once the work is long, or as
HLTMT_PROGRESS says; nothing outside a command (the lines of a real command: tests/cli/test_import_model.py)."""

import io

import pytest

from hltmt_plugin import progress

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


class Terminal(io.StringIO):
    def isatty(self):
        return True


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_forced_progress_writes_one_line_a_step():
    stream = io.StringIO()
    shown = progress.Progress("hltmt-import", stream, forced=True)
    shown.step("reading weights: shard", 2, 5)
    shown.step("writing the dictionaries")
    assert stream.getvalue() == "hltmt-import: reading weights: shard: 2 of 5\nhltmt-import: writing the dictionaries\n"
    hidden = progress.Progress("hltmt-import", stream, forced=False)
    hidden.step("writing group m0", 1, 4)
    assert stream.getvalue().count("\n") == 2


def test_unforced_lines_show_on_a_terminal_or_once_the_work_is_long():
    assert progress.Progress("p", Terminal(), forced=None).shown()
    clock, stream = Clock(), io.StringIO()
    lines = progress.Progress("hltmt-export", stream, forced=None, clock=clock)
    lines.step("reading the checkpoint")
    assert stream.getvalue() == ""  # a short run in a script stays quiet
    clock.now += progress.LONG_SECONDS
    lines.step("writing group m1", 2, 4)
    assert stream.getvalue() == "hltmt-export: writing group m1: 2 of 4\n"


def test_the_environment_forces_them_on_or_off():
    assert progress.forced_by_env({progress.ENV: "1"}) is True
    assert progress.forced_by_env({progress.ENV: "0"}) is False
    assert progress.forced_by_env({}) is None and progress.forced_by_env({progress.ENV: "yes"}) is None


def test_steps_outside_a_command_write_nothing(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setenv(progress.ENV, "1")
    progress.step("nothing")
    with progress.started("hltmt-import", stream):
        progress.step("reading weights: model.safetensors")
    progress.step("after the command")
    assert stream.getvalue() == "hltmt-import: reading weights: model.safetensors\n"


def test_a_closed_stderr_does_not_stop_the_work():
    stream = io.StringIO()
    stream.close()
    progress.Progress("p", stream, forced=True).step("writing")  # no exception
    assert not progress.Progress("p", stream, forced=None).shown()
