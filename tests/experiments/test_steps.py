"""hltmt_plugin/experiments/steps.py: what the experiment drivers and scripts share: steps
marked done (a rerun resumes), a logged command whose failure is one StepFailed with its log's
tail, fairseq-train's precision and GPU flags, and the option errors of a run."""

import argparse
import os
import sys

import pytest

from hltmt_plugin.errors import HltmtConfigError, HltmtError
from hltmt_plugin.experiments import steps

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


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


def test_a_quiet_command_logs_alone_and_a_failure_names_the_logs_tail(tmp_path, capsys):
    log = str(tmp_path / "logs" / "q.log")
    steps.run_quiet([sys.executable, "-c", "print('hello')"], log)
    assert capsys.readouterr().out == "" and open(log).read().splitlines()[1:] == ["hello"]
    with pytest.raises(steps.StepFailed) as error:
        steps.run_quiet([sys.executable, "-c", "print('last words'); raise SystemExit(3)"], log, tail=1)
    assert str(error.value) == f"command failed (exit 3); last lines of {log}:\nlast words"
    assert steps.log_tail(str(tmp_path / "none.log")) == f"(no log at {tmp_path / 'none.log'})"


def test_decoding_jobs_leave_out_what_is_decoded_and_a_dry_run_prints_each_line(tmp_path, capsys):
    (tmp_path / "hltmt").mkdir()
    (tmp_path / "hltmt" / "en-de.gen").write_text("done\n")
    checkpoints = {"mnmt": "m.pt", "hltmt": "h.pt"}
    folder = lambda system: str(tmp_path / system)  # noqa: E731
    jobs = steps.decode_jobs(checkpoints, ["en-de", "de-en"], folder, "[{n}/{total}] {system} {direction}")
    assert [job[:4] for job in jobs] == [
        ("[1/4] mnmt en-de", "m.pt", "en", "de"),
        ("[2/4] mnmt de-en", "m.pt", "de", "en"),
        ("[4/4] hltmt de-en", "h.pt", "de", "en"),
    ]
    assert jobs[2][4] == str(tmp_path / "hltmt" / "de-en.gen")
    assert len(steps.decode_jobs(checkpoints, ["en-de", "de-en"], folder, redo=True)) == 4
    steps.decode(jobs, ["DATA", "--beam", "5"], "DATA", 2, "", dry_run=True, plan=("decode", "OUT/SRC-TGT.gen"))
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        "# decode: 3 directions over 2 worker processes, each running these fairseq-generate lines in one "
        "Python; output to OUT/SRC-TGT.gen"
    )
    assert out[3].endswith("-m fairseq_cli.generate DATA --beam 5 --path h.pt -s de -t en") and len(out) == 4
    assert not (tmp_path / "mnmt").exists()  # a dry run writes nothing


def test_the_report_line_is_hltmt_reports(tmp_path):
    from hltmt_plugin.experiments.report import build_parser

    dec, gate = tmp_path / "dec", tmp_path / "h.pt"  # inputs that are there: the parser refuses missing ones
    dec.mkdir()
    gate.write_bytes(b"")
    cmd = steps.report_command(
        str(dec),
        "rep",
        high=["fr", "de"],
        title="T",
        gate_checkpoint=str(gate),
        valid_logs=["mnmt=a.log", "hltmt=b.log"],
        note="N",
        options=["--machine", "M"],
    )
    assert cmd[:3] == steps.experiment_cli("report")
    args = build_parser().parse_args(cmd[3:])
    assert (args.decode_dir, args.out, args.high, args.baseline, args.system, args.title) == (
        str(dec),
        "rep",
        "fr,de",
        "mnmt",
        "hltmt",
        "T",
    )
    assert (args.gate_checkpoint, args.valid_log, args.note, args.machine) == (
        str(gate),
        ["mnmt=a.log", "hltmt=b.log"],
        "N",
        "M",
    )
    assert "--gate-checkpoint" not in steps.report_command("dec", "rep", high=["fr"], title="T", baseline="lsmnmt")


def test_a_report_prints_its_results_and_a_dry_run_its_line(tmp_path, capsys):
    out = str(tmp_path / "report")
    write = "import os, sys; os.makedirs(sys.argv[2]); open(sys.argv[2] + '/results.md', 'w').write('# R')"
    cmd = [sys.executable, "-c", write, "--out", out]
    steps.run_report(cmd, str(tmp_path / "logs" / "report.log"), dry_run=True)
    assert capsys.readouterr().out.startswith(sys.executable) and not os.path.exists(out)
    steps.run_report(cmd, str(tmp_path / "logs" / "report.log"))
    assert capsys.readouterr().out == "# R\n" and os.path.isfile(os.path.join(out, "results.md"))


def test_a_plugin_command_that_refuses_its_input_fails_the_step_with_its_own_line(tmp_path):
    log = str(tmp_path / "logs" / "p.log")
    refuse = (
        "print('working'); print('hltmt-prepare-data: error: a.en has 2 lines but a.de has 1'); raise SystemExit(2)"
    )
    for run in (steps.run_logged, steps.run_quiet):
        with pytest.raises(steps.StepFailed) as error:
            run([sys.executable, "-c", refuse], log)
        assert (
            str(error.value) == f"hltmt-prepare-data: error: a.en has 2 lines but a.de has 1 (exit 2; its log: {log})"
        )
