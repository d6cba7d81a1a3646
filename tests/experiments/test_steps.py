"""hltmt_plugin/experiments/steps.py: what the experiment drivers and scripts share: steps
marked done (a rerun resumes), a logged command whose failure is one StepFailed with its log's
tail, fairseq-train's precision and GPU flags, and the option errors of a run."""

import argparse
import os
import sys

import pytest

from hltmt_plugin.errors import HltmtConfigError, HltmtError
from hltmt_plugin.experiments import steps


def device_args(**given):
    values = dict(bf16=False, gpu=False, cpu=True, ngpu=1, precision="auto")
    return argparse.Namespace(**{**values, **given})


def test_precision_and_gpu_flags():
    assert steps.gpu_flags("amp", 1) == ["--amp", "--distributed-world-size", "1"]
    assert steps.gpu_flags("fp16", 8) == [
        "--fp16",
        "--fp16-no-flatten-grads",
        "--distributed-world-size",
        "8",
        "--ddp-backend",
        "legacy_ddp",
    ]
    assert steps.resolve_device(device_args()) == ("cpu", "fp32", [])
    assert steps.resolve_device(device_args(gpu=True, cpu=False, ngpu=2), dry_run=True) == (
        "cuda",
        "amp",
        steps.gpu_flags("amp", 2),
    )


@pytest.mark.parametrize(
    "given, message",
    [
        (dict(bf16=True), steps.BF16_REFUSED),
        (dict(gpu=True), "--gpu and --cpu exclude each other"),
        (dict(ngpu=0), "--ngpu must be at least 1, got 0"),
        (dict(precision="fp16"), "--precision fp16 needs a GPU; on the CPU use fp32 (or amp, which is then fp32)"),
        (dict(ngpu=2), "--ngpu 2 needs a GPU (--gpu); for several processes on the CPU see hltmt-launch"),
    ],
)
def test_options_that_cannot_work_together_are_one_option_error(given, message):
    with pytest.raises(steps.OptionError) as error:
        steps.resolve_device(device_args(**given))
    assert str(error.value) == message
    assert isinstance(error.value, HltmtConfigError)


def test_steps_are_marked_done_and_a_rerun_resumes_after_them(tmp_path, capsys):
    ran = []
    plan = [("one", ran.append, ("one",)), ("two", ran.append, ("two",))]
    steps.run_steps(plan[:1], str(tmp_path))
    assert ran == ["one"] and steps.is_done(str(tmp_path), "one") and not steps.is_done(str(tmp_path), "two")
    steps.run_steps(plan, str(tmp_path), dry_run=True)  # prints the plan, runs only what is not done
    assert ran == ["one", "two"] and not steps.is_done(str(tmp_path), "two")
    out = capsys.readouterr().out
    assert "# step 1/2 one: already done, a run skips it\n# step 2/2 two\n" in out
    steps.run_steps(plan, str(tmp_path))
    assert ran == ["one", "two", "two"] and steps.is_done(str(tmp_path), "two")
    assert "step 1/2 one: already done, skipped" in capsys.readouterr().out


def test_a_logged_command_streams_its_output_and_a_failure_is_one_step_failed(tmp_path, capsys):
    log = str(tmp_path / "logs" / "ok.log")
    steps.run_logged([sys.executable, "-c", "print('hello')"], log, prefix="[x] ")
    assert capsys.readouterr().out == "[x] hello\n"
    assert open(log, encoding="utf-8").read().splitlines()[1:] == ["hello"]
    bad = str(tmp_path / "logs" / "bad.log")
    with pytest.raises(steps.StepFailed) as error:
        steps.run_logged([sys.executable, "-c", "print('last words'); raise SystemExit(3)"], bad)
    assert str(error.value) == f"command failed (exit 3); last lines of {bad}:\n" + open(bad).read().rstrip("\n")
    assert "last words" in str(error.value) and isinstance(error.value, HltmtError)


def test_commands_are_printed_as_a_shell_reads_them_and_drivers_run_by_this_python(capsys):
    steps.print_command(["fairseq-train", "a b", "--x"])
    assert capsys.readouterr().out == "fairseq-train 'a b' --x\n"
    assert steps.experiment_cli("report") == [sys.executable, "-m", "hltmt_plugin.experiments.report"]
    assert os.path.isfile(os.path.join(os.path.dirname(steps.__file__), "report.py"))
    assert steps.detect_machine().count("cores usable") == 1
