"""Which of fairseq's commands this process is (hltmt_plugin/tasks/fairseq_command.py): from the
name it was started by, ``fairseq-COMMAND`` or ``python -m fairseq_cli.COMMAND``."""

import os
import sys

import pytest

from conftest import BIN
from hltmt_plugin.tasks.fairseq_command import running_fairseq

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


@pytest.mark.parametrize(
    "argv0, command, expected",
    [
        (os.path.join(BIN, "fairseq-train"), "train", True),
        (os.path.join(BIN, "fairseq-train"), "generate", False),
        ("fairseq-interactive", "interactive", True),  # a relative name
        (
            os.path.join(sys.prefix, "lib", "fairseq_cli", "generate.py"),
            "generate",
            True,
        ),  # python -m fairseq_cli.generate
        (os.path.join("fairseq_cli", "train.py"), "generate", False),
        (os.path.join(BIN, "fairseq-train-extra"), "train", False),
        (os.path.join(BIN, "hltmt-translate"), "translate", False),
        ("", "train", False),
    ],
)
def test_the_command_is_read_from_the_name_the_process_was_started_by(monkeypatch, argv0, command, expected):
    monkeypatch.setattr(sys, "argv", [argv0, "--cpu"])
    assert running_fairseq(command) is expected


def test_a_process_without_arguments_is_no_fairseq_command(monkeypatch):
    monkeypatch.setattr(sys, "argv", [])
    assert running_fairseq("train") is False


def test_the_installed_fairseq_cli_module_is_recognised(monkeypatch):
    """``python -m fairseq_cli.validate`` starts with sys.argv[0] the module's own file."""
    import fairseq_cli.validate

    monkeypatch.setattr(sys, "argv", [fairseq_cli.validate.__file__])
    assert running_fairseq("validate") and not running_fairseq("train")
