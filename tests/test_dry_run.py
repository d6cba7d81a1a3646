"""``--dry-run`` of the job scripts (hltmt-main-job, scripts/gpu_run.sh, examples/wmt10/xlmr_recipe.py
and the run.sh / run_xlmr.sh wrappers): for the CPU, one GPU and 8 GPUs at each precision they
offer, every fairseq-train and fairseq-generate line they print is parsed by fairseq's own
parser and passed through the plugin's option checks (the task set up on a folder of
dictionaries, the SLP options against it, the DDP backend, the precision); a dry run writes
nothing and needs no GPU; ``--bf16`` is one line and a non-zero exit.

The paper's setting (8 GPUs, fp16) runs each command as installed, in a subprocess; the rest
of the matrix calls the same ``main(argv)`` in this process (each subprocess pays fairseq's
import again)."""

import os
import shlex
import sys

import pytest

from conftest import ROOT, cli, run

sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.join(ROOT, "examples", "wmt10"))

MAIN_JOB = [cli("hltmt-main-job")]
GPU_RUN = ["bash", os.path.join(ROOT, "scripts", "gpu_run.sh")]
XLMR = [
    sys.executable,
    os.path.join(ROOT, "examples", "wmt10", "xlmr_recipe.py"),
    "--raw",
    "/nowhere/clean",
    "--xlmr",
    "/nowhere/xlmr.base",
]
RUN_SH = ["bash", os.path.join(ROOT, "examples", "wmt10", "run.sh")]
RUN_XLMR_SH = ["bash", os.path.join(ROOT, "examples", "wmt10", "run_xlmr.sh")]
WMT10 = ["en", "fr", "cs", "de", "fi", "lv", "et", "ro", "hi", "tr", "gu"]

# device options -> world size; each precision a GPU offers -> (fp16, fp16_no_flatten_grads, amp)
DEVICES = {"cpu": (["--cpu"], 0), "1 GPU": (["--gpu"], 1), "8 GPUs": (["--gpu", "--ngpu", "8"], 8)}
GPU_PRECISIONS = {"fp32": (False, False, False), "amp": (False, False, True), "fp16": (True, True, False)}
CASES = [("cpu", "auto")] + [(d, p) for d in ("1 GPU", "8 GPUs") for p in GPU_PRECISIONS]


@pytest.fixture(scope="module")
def dicts(tmp_path_factory):
    """A data folder with a dictionary per WMT-10 language: enough for the task's setup, which
    reads no binarized data."""
    folder = tmp_path_factory.mktemp("dicts")
    for lang in WMT10:
        (folder / f"dict.{lang}.txt").write_text("▁a 10\n▁b 5\n", encoding="utf-8")
    return str(folder)


def command_lines(stdout):
    return [shlex.split(line) for line in stdout.splitlines() if line.strip() and not line.startswith("#")]


def dry_run(cmd, tmp_path, env_extra=None):
    """The command lines a --dry-run prints (``#`` notes left out), as argv lists; checks that
    it succeeded and wrote nothing into tmp_path."""
    before = sorted(os.listdir(tmp_path))
    done = run(cmd, env_extra=env_extra)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert sorted(os.listdir(tmp_path)) == before, "a dry run wrote files"
    return command_lines(done.stdout)


def main_of(script):
    if script == "main_job":
        from hltmt_plugin.experiments.main_job import main
    elif script == "gpu_run":
        from gpu_run import main
    else:
        from xlmr_recipe import main
    return main


def dry_run_here(script, argv, tmp_path, capsys):
    """The same, through the script's main(argv) in this process."""
    before = sorted(os.listdir(tmp_path))
    code = main_of(script)(argv)
    out, err = capsys.readouterr()
    assert code == 0, out[-2000:] + err[-2000:]
    assert sorted(os.listdir(tmp_path)) == before, "a dry run wrote files"
    return command_lines(out)


def fairseq_tool(argv):
    """'train', 'generate', ... for a fairseq command line, else None."""
    for i, word in enumerate(argv[:3]):
        if word == "-m" and argv[i + 1].startswith("fairseq_cli."):
            return argv[i + 1].split(".", 1)[1]
        if os.path.basename(word).startswith("fairseq-"):
            return os.path.basename(word)[len("fairseq-") :]
    return None


def options_of(argv):
    """The fairseq options of a command line (after ``-m fairseq_cli.X`` or ``fairseq-X``)."""
    for i, word in enumerate(argv[:3]):
        if word == "-m":
            return argv[i + 2 :]
        if os.path.basename(word).startswith("fairseq-"):
            return argv[i + 1 :]
    raise AssertionError(f"not a fairseq command: {shlex.join(argv)}")


def check_training(options, dicts, world=None, precision=None):
    """Parse fairseq-train options with fairseq's parser and run the checks the plugin makes
    before any data is read (and with ``world``, check the device and precision options);
    return the parsed arguments."""
    from fairseq import options as fairseq_options, tasks

    import hltmt_plugin  # noqa: F401
    from hltmt_plugin.models.hltmt_transformer import validate
    from hltmt_plugin.pool.config import SlpConfig
    from hltmt_plugin.tasks.distributed import check_ddp_backend, check_precision

    args = fairseq_options.parse_args_and_arch(fairseq_options.get_training_parser(), options)
    args.data = dicts  # the printed folder does not exist yet: the same dictionaries' languages
    task = tasks.setup_task(args)  # hltmt_translation: the temperature, data-language and stage checks
    if args.arch.startswith("hltmt_transformer"):
        validate(SlpConfig.from_namespace(args), task)
    check_ddp_backend(args)
    check_precision(args)
    if world is None:
        return args
    if world:
        assert not args.cpu and args.distributed_world_size == world
        assert (args.fp16, args.fp16_no_flatten_grads, args.amp) == GPU_PRECISIONS[precision]
        if world > 1:
            assert args.ddp_backend == "legacy_ddp" or args.find_unused_parameters
    else:
        assert args.cpu and not args.fp16
    return args


def check_lines(lines, dicts, world, precision):
    """Every fairseq-train / fairseq-generate line (and the fairseq-train options xlmr_init.py
    builds its model from) checked; every decoded checkpoint is one that a training line saves
    (or its stage-high run restores); returns {tool: count}."""
    from fairseq import options as fairseq_options

    counts, saved = {}, set()
    generated = []
    for argv in lines:
        tool = fairseq_tool(argv)
        if tool is None and argv[1].endswith("xlmr_init.py"):
            tool = "train (xlmr_init.py)"  # builds its model (on the CPU) from these fairseq-train options
            check_training(argv[argv.index("--") + 1 :], dicts)
        elif tool == "train":
            args = check_training(options_of(argv), dicts, world, precision)
            saved.add(os.path.join(args.save_dir, "checkpoint_last.pt"))
            if args.restore_file != "checkpoint_last.pt":
                assert args.restore_file in saved, f"--restore-file {args.restore_file}: no earlier run saves it"
        elif tool == "generate":
            args = fairseq_options.parse_args_and_arch(fairseq_options.get_generation_parser(), options_of(argv))
            assert args.cpu == (world == 0) and args.fp16 == (world > 0 and precision != "fp32")
            generated.append(args.path)
        else:
            assert tool is None, f"fairseq-{tool} is not checked here: {shlex.join(argv)}"
            continue
        counts[tool] = counts.get(tool, 0) + 1
    assert generated and set(generated) <= saved, (
        f"decoded checkpoints no training line saves: {set(generated) - saved}"
    )
    return counts


def device_options(device, precision, flag="--precision"):
    options, world = DEVICES[device]
    return [*options, *([flag, precision] if precision != "auto" else [])], world


def main_job_argv(tmp_path):
    return [
        "--dry-run",
        "--size",
        "base",
        "--langs",
        "de,gu",
        "--high",
        "de",
        "--ls-mnmt",
        "--hltmt-schedule",
        "two-run",
        "--run-dir",
        str(tmp_path / "job"),
    ]


def gpu_run_argv(tmp_path):
    return ["--dry-run", "--size", "tiny", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out")]


def xlmr_argv(tmp_path):
    return [
        *XLMR[2:],
        "--dry-run",
        "--langs",
        "de,gu",
        "--high",
        "de",
        "--temperature-epochs",
        "2",
        "--run-dir",
        str(tmp_path / "xlmr"),
    ]


def check_main_job(lines, dicts, world, precision):
    assert check_lines(lines, dicts, world, precision) == {"train": 4, "generate": 12}
    train = [shlex.join(x) for x in lines if fairseq_tool(x) == "train"]
    assert all(f"--distributed-world-size {world}" in x for x in train) if world else True
    assert all("--update-freq 8" in x for x in train) if world == 8 else True  # 8 x 8 GPUs: the paper's 64


def check_gpu_run(lines, dicts, world, precision):
    # the calibration's three runs, then the three trainings; 4 directions of 3 systems
    assert check_lines(lines, dicts, world, precision) == {"train": 6, "generate": 12}


def check_xlmr(lines, dicts, world, precision):
    # xlmr_init.py's model options, two runs (temperature epochs) per system, 4 directions of 3 systems
    assert check_lines(lines, dicts, world, precision) == {"train (xlmr_init.py)": 1, "train": 6, "generate": 12}
    mnmt = [x for x in lines if fairseq_tool(x) == "train" and "--finetune-from-model" in x]
    init = next(x for x in lines if x[1].endswith("xlmr_init.py"))
    assert mnmt and all(x[x.index("--finetune-from-model") + 1] == init[init.index("--out") + 1] for x in mnmt)


SCRIPTS = {
    "main_job": (main_job_argv, check_main_job),
    "gpu_run": (gpu_run_argv, check_gpu_run),
    "xlmr_recipe": (xlmr_argv, check_xlmr),
}


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("device, precision", CASES)
def test_every_printed_line_parses_and_passes_the_checks(dicts, tmp_path, capsys, script, device, precision):
    argv, check = SCRIPTS[script]
    options, world = device_options(device, precision)
    check(dry_run_here(script, [*argv(tmp_path), *options], tmp_path, capsys), dicts, world, precision)


def test_the_paper_setting_as_installed(dicts, tmp_path):
    """8 GPUs in fp16 (the authors' V100 setting), each command run as a user runs it."""
    options = ["--gpu", "--ngpu", "8", "--precision", "fp16"]
    check_main_job(dry_run([*MAIN_JOB, *main_job_argv(tmp_path), *options], tmp_path), dicts, 8, "fp16")
    check_gpu_run(
        dry_run([*GPU_RUN, *gpu_run_argv(tmp_path), *options], tmp_path, {"PYTHON": sys.executable}), dicts, 8, "fp16"
    )
    check_xlmr(dry_run([*XLMR[:2], *xlmr_argv(tmp_path), "--gpu", "--ngpu", "8", "--fp16"], tmp_path), dicts, 8, "fp16")


def test_the_wrappers_pass_the_dry_run_on_and_download_nothing(dicts, tmp_path):
    """run.sh: the paper's size on 8 GPUs, all ten languages; run_xlmr.sh: the XLM-R setting."""
    env = {"RUN": str(tmp_path / "wmt10"), "PY": sys.executable}
    lines = dry_run([*RUN_SH, "--gpu", "--ngpu", "8", "--precision", "fp16", "--dry-run"], tmp_path, env)
    assert [os.path.basename(x[1]) for x in lines[:2]] == ["download.py", "clean.py"]
    assert check_lines(lines, dicts, 8, "fp16") == {"train": 3, "generate": 60}
    train = next(x for x in lines if fairseq_tool(x) == "train" and "hltmt_cross_entropy" in x)
    opts = dict(zip(train, train[1:]))
    assert opts["--arch"] == "hltmt_transformer" and opts["--high-resource-langs"] == "fr,cs,de,fi,lv,et"
    assert opts["--max-update"] == "100000" and opts["--high-stage-updates"] == "50000"
    assert opts["--max-tokens"] == "4096" and opts["--update-freq"] == "8"  # 8 GPUs x 8 = the paper's 64
    lines = dry_run(
        [*RUN_XLMR_SH, "--gpu", "--ngpu", "8", "--fp16", "--dry-run", "--temperature-epochs", "2"], tmp_path, env
    )
    assert [os.path.basename(x[1]) for x in lines[:2]] == ["download.py", "clean.py"]
    assert check_lines(lines, dicts, 8, "fp16") == {"train (xlmr_init.py)": 1, "train": 6, "generate": 60}


def test_the_demo_trains_both_systems_side_by_side_on_the_short_segments(dicts, tmp_path, capsys):
    """make demo (--size quick): one-to-many En->X over the segments of at most 12 English and 16
    target words, MNMT and HLT-MT trained at once, a core each."""
    from hltmt_plugin.experiments.main_job import main

    assert main(["--dry-run", "--size", "quick", "--cpu", "--run-dir", str(tmp_path / "q")]) == 0
    out = capsys.readouterr().out
    lines = command_lines(out)
    assert check_lines(lines, dicts, 0, "fp32") == {"train": 2, "generate": 20}  # 10 En->X directions of 2 systems
    prepare = next(x for x in lines if x[2] == "hltmt_plugin.cli.prepare_data")
    assert prepare[prepare.index("--segment-words") + 1] == "12,16"
    assert all(x[x.index("-s") + 1] == "en" for x in lines if fairseq_tool(x) == "generate")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if cores >= 2:
        assert "# these 2 fairseq-train runs go side by side in 2 lanes (2 at a time" in out
    assert main(["--dry-run", "--size", "quick", "--gpu", "--train-jobs", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--train-jobs 2 is for the CPU" in err[0], err


@pytest.mark.parametrize(
    "cmd, prefix",
    [
        ([*MAIN_JOB, "--size", "smoke", "--gpu"], "hltmt-main-job: error:"),
        ([*GPU_RUN, "--size", "tiny"], "gpu_run: error:"),
        ([*XLMR, "--gpu"], "xlmr_recipe: error:"),
        ([*RUN_XLMR_SH, "--gpu", "--dry-run"], "xlmr_recipe: error:"),
    ],
)
def test_bf16_is_one_line_and_a_non_zero_exit(tmp_path, cmd, prefix):
    done = run(
        [*cmd, "--bf16"], env_extra={"RUN": str(tmp_path / "run"), "PY": sys.executable, "PYTHON": sys.executable}
    )
    assert done.returncode != 0
    # (the scripts are programs that import fairseq: its own start-up notice is fairseq's, left as it is)
    lines = [line for line in done.stderr.strip().splitlines() if not line.startswith("INFO:fairseq")]
    assert len(lines) == 1 and lines[0].startswith(prefix) and "--bf16" in lines[0], done.stderr
    assert "TPU" in lines[0] and "--precision amp" in lines[0]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "script, argv, prefix",
    [
        ("main_job", ["--size", "smoke", "--dry-run", "--cpu"], "hltmt-main-job: error:"),
        ("gpu_run", ["--size", "tiny", "--dry-run", "--cpu"], "gpu_run: error:"),
        ("xlmr_recipe", [*XLMR[2:], "--dry-run"], "xlmr_recipe: error:"),  # the CPU unless --gpu
    ],
)
def test_several_gpus_on_the_cpu_is_one_line(capsys, script, argv, prefix):
    assert main_of(script)([*argv, "--ngpu", "8"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix) and "--ngpu 8" in lines[0], lines


# --ngpu (and a given --update-freq) -> the --update-freq of every fairseq-train line, and the
# note a driver prints when an update's batches are not the paper's 64
OFF = "--ngpu {} x --update-freq {} makes an update of {} batches of --max-tokens, not the paper's 64: a batch {}"
PAPER_BATCH = {
    ("1",): ("64", None),
    ("2",): ("32", None),
    ("3",): ("21", OFF.format(3, 21, 63, "1.6% smaller")),
    ("8",): ("8", None),
    ("64",): ("1", None),
    ("128",): ("1", OFF.format(128, 1, 128, "100.0% larger")),
    ("8", "--update-freq", "4"): ("4", OFF.format(8, 4, 32, "50.0% smaller")),
}


@pytest.mark.parametrize("script, prefix", [("main_job", "# main job: "), ("xlmr_recipe", "# xlmr recipe: ")])
@pytest.mark.parametrize("gpus", PAPER_BATCH)
def test_update_freq_makes_the_papers_batch_or_says_how_far_off_it_is(tmp_path, capsys, script, prefix, gpus):
    assert main_of(script)([*SCRIPTS[script][0](tmp_path), "--gpu", "--ngpu", *gpus]) == 0
    out = capsys.readouterr().out
    freq, note = PAPER_BATCH[gpus]
    train = [x for x in command_lines(out) if fairseq_tool(x) == "train"]
    assert train and {x[x.index("--update-freq") + 1] if "--update-freq" in x else "1" for x in train} == {freq}
    notes = [line for line in out.splitlines() if "the paper's 64" in line]
    assert notes == ([prefix + note] if note else []), notes
