"""More of the bad-input table (docs/bad-input.md), through the real command lines: the update
count after a reset, --train-only that trains nothing, broken binarized data, crafted
checkpoints, a checkpoint without --user-dir, over-long lines at decoding, and fairseq's
warning noise in the plugin's scripts."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import PAIRS, PLUGIN, ROOT, cli, run, train_args

TRAIN = ["--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--optimizer", "adam",
         "--lr", "2e-3", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "10", "--max-tokens", "1500",
         "--log-interval", "1", "--no-epoch-checkpoints", "--sampling-method", "temperature",
         "--sampling-temperature", "5", "--seed", "3", "--num-workers", "0"]
RESET = ["--reset-optimizer", "--reset-dataloader", "--reset-meters"]


def assert_clear(done, message, prefix="hltmt_plugin: error:"):
    """One line naming the problem, a non-zero exit, no traceback."""
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-2000:]
    assert prefix in done.stderr and message in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in out, out[-3000:]


def updates(log):
    return [int(m.group(1)) for m in re.finditer(r"train_inner .*?num_updates=(\d+)", log)]


# ---- 1. the stage line counts as fairseq counts after --reset-optimizer -------------------
def test_stage_line_counts_updates_as_fairseq_after_a_reset(data_bin, trained, tmp_path):
    ckpt, _ = trained  # saved after 30 updates of stage high
    done = run([cli("fairseq-train"), *train_args(
        data_bin, *TRAIN, "--save-dir", str(tmp_path / "s"), "--restore-file", ckpt, *RESET,
        "--high-stage-updates", "2", "--max-update", "3")])
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    assert "(epoch 1 @ 0 updates)" in log  # fairseq's own count restarts
    assert "HLT-MT stage high (epoch 1, update 0)" in log, log[-3000:]
    assert "fairseq's update count restarts at 0 (--reset-optimizer)" in log
    # --high-stage-updates counts fairseq's updates: stage all begins after update 2 of this run
    assert "HLT-MT stage all (epoch 2, update 2)" in log, log[-3000:]
    assert updates(log) == [1, 2, 3]


# ---- 2. --train-only that trains nothing: one line before the first update -------------------
def test_train_only_gate_on_a_stage_all_model_is_one_line(data_bin, trained, tmp_path):
    ckpt, _ = trained
    done = run([cli("fairseq-train"), *train_args(
        data_bin, *TRAIN, "--save-dir", str(tmp_path / "s"), "--restore-file", ckpt, *RESET, "--hlt-stage", "all",
        "--train-only", "gate", "--max-update", "3")])
    assert_clear(done, "--train-only gate trains nothing in this run: the gate learns only in stage high; in stage "
                       "all the routing map is fixed and the gate frozen")
    assert updates(done.stdout) == []


def test_train_only_gate_across_the_stage_switch_is_one_line(data_bin, tmp_path):
    done = run([cli("fairseq-train"), *train_args(
        data_bin, *TRAIN, "--save-dir", str(tmp_path / "s"), "--high-stage-updates", "2", "--train-only", "gate",
        "--max-update", "4")])
    assert_clear(done, "--train-only gate trains nothing in stage all, which this run enters at update 2 "
                       "(--high-stage-updates)")
    assert updates(done.stdout) == []


def test_train_only_adapters_of_a_language_stage_high_never_trains_is_one_line(data_bin, tmp_path):
    done = run([cli("fairseq-train"), *train_args(
        data_bin, *TRAIN, "--save-dir", str(tmp_path / "s"), "--language-adapters", "--enable-lang-ids",
        "--adapter-langs", "en,de,fr,gu,hi", "--train-only", "adapters:hi", "--max-update", "2")])
    assert_clear(done, "--train-only adapters:hi trains nothing in this run: no language of the directions of "
                       "stage high (en-de,en-fr,de-en) is hi")


def test_train_only_a_group_that_some_batches_do_not_reach_trains(data_bin, tmp_path):
    """The first batches of this run go to de and fr only (the pool): the universal layer is
    not in their graph, which was fairseq's `element 0 of tensors does not require grad`."""
    done = run([cli("fairseq-train"), *train_args(
        data_bin, *TRAIN, "--save-dir", str(tmp_path / "s"), "--hlt-stage", "high", "--train-only", "universal",
        "--max-update", "4")])
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    assert updates(log) == [1, 2, 3, 4]


# ---- 3. truncated or empty binarized files: one line naming the file ----------------------
def broken_copy(data_bin, tmp_path, name, cut):
    """A copy of the data folder whose file ``name`` is cut to ``cut`` bytes."""
    folder = tmp_path / "bin"
    shutil.copytree(data_bin, folder)
    with open(folder / name, "r+b") as f:
        f.truncate(cut)
    return str(folder)


GENERATE = ["--user-dir", PLUGIN, "--task", "hltmt_translation", "--langs", "en,de,fr,gu,hi", "--lang-pairs", PAIRS,
            "--encoder-langtok", "tgt", "-s", "en", "-t", "de", "--cpu", "--gen-subset", "test", "--beam", "1"]


@pytest.mark.parametrize("name, cut, message", [
    ("test.en-de.de.bin", 1000, "test.en-de.de.bin is truncated: its index lists 37 sentences in"),
    ("test.en-de.en.bin", 0, "test.en-de.en.bin is empty: its index lists 37 sentences"),
    ("test.en-de.de.idx", 0, "test.en-de.de.idx is empty (0 bytes), not a fairseq index"),
    ("test.en-de.en.idx", 100, "test.en-de.en.idx is truncated: an index of 37 sentences has 470 bytes, this one "
                               "100"),
])
def test_broken_binarized_files_are_one_line_naming_the_file(data_bin, trained, tmp_path, name, cut, message):
    folder = broken_copy(data_bin, tmp_path, name, cut)
    done = run([cli("fairseq-generate"), folder, *GENERATE, "--path", trained[0]])
    assert_clear(done, message)
    assert "binarize the data again" in done.stderr


def test_a_truncated_training_file_is_one_line_before_the_first_update(data_bin, tmp_path):
    folder = broken_copy(data_bin, tmp_path, "train.en-fr.fr.bin", 5000)
    done = run([cli("fairseq-train"), *train_args(folder, *TRAIN, "--save-dir", str(tmp_path / "s"),
                                                  "--max-update", "2")])
    assert_clear(done, "train.en-fr.fr.bin is truncated: its index lists")
    assert updates(done.stdout) == []


# ---- 4. crafted checkpoints: one line --------------------------------------------------------
def craft(ckpt, folder, kind):
    """A copy of a real checkpoint with one of fairseq's records (or torch's) taken out."""
    import zipfile

    import torch

    import hltmt_plugin  # noqa: F401  (allowlists argparse.Namespace for torch.load)

    out = str(folder / f"{kind}.pt")
    if kind == "no_version":  # the zip without torch's version records
        with zipfile.ZipFile(ckpt) as zin, zipfile.ZipFile(out, "w") as zout:
            for item in zin.infolist():
                if item.filename.rsplit("/", 1)[-1] not in ("version", ".format_version"):
                    zout.writestr(item, zin.read(item.filename))
        return out
    state = torch.load(ckpt, map_location="cpu", weights_only=True)
    if kind == "no_model":
        del state["model"]
    elif kind == "model_none":
        state["model"] = None
    elif kind == "no_cfg":
        state["cfg"] = state["args"] = None
        del state["cfg"]
    elif kind == "a_list":
        state = [1, 2]
    torch.save(state, out)
    return out


@pytest.mark.parametrize("kind, message", [
    ("no_version", "is truncated or not a checkpoint (its zip has no 'version' record)"),
    ("no_model", "is not a fairseq checkpoint (no 'model' record)"),
    ("model_none", "is not a fairseq checkpoint (its 'model' record is a NoneType, not the model's weights)"),
    ("no_cfg", "is not a fairseq checkpoint (no 'cfg' or 'args' record: the options the model was trained with)"),
    ("a_list", "is not a fairseq checkpoint (it holds a list, not fairseq's dict of records)"),
])
def test_crafted_checkpoints_are_one_line(data_bin, trained, tmp_path, kind, message):
    path = craft(trained[0], tmp_path, kind)
    done = run([cli("fairseq-generate"), data_bin, *GENERATE, "--path", path])
    assert_clear(done, f"checkpoint {path} {message}")


def test_a_crafted_checkpoint_to_restore_is_one_line(data_bin, trained, tmp_path):
    path = craft(trained[0], tmp_path, "no_cfg")
    done = run([cli("fairseq-train"), *train_args(data_bin, *TRAIN, "--save-dir", str(tmp_path / "s"),
                                                  "--restore-file", path, "--max-update", "2")])
    assert_clear(done, f"checkpoint {path} is not a fairseq checkpoint (no 'cfg' or 'args' record")


# ---- 5. a checkpoint without --user-dir: fairseq's message, documented with the workaround ------
def docs(name):
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        return f.read()


def test_a_checkpoint_without_user_dir_is_documented_as_fairseq_says_it(data_bin, trained):
    no_user_dir = [a for a in GENERATE if a not in ("--user-dir", PLUGIN)]
    done = run([cli("fairseq-generate"), data_bin, *no_user_dir, "--path", trained[0]])
    assert done.returncode == 2
    said = "fairseq-generate: error: argument --task: invalid choice: 'hltmt_translation'"
    assert said in done.stderr
    parent = [a if a != "hltmt_translation" else "translation_multi_simple_epoch" for a in no_user_dir]
    done = run([cli("fairseq-generate"), data_bin, *parent, "--path", trained[0]])
    assert done.returncode == 1
    weights_only = "WeightsUnpickler error: Unsupported global: GLOBAL argparse.Namespace was not an allowed global"
    assert weights_only in done.stderr
    table = docs("docs/bad-input.md")  # the one page of every refusal and its message
    assert said in table and weights_only in table and "add `--user-dir" in table


# ---- 6. a 3,000-word line at decoding: the other lines are translated, that one reported -------
WORDS = " ".join(["house"] * 3000)
LINES = ["The file is open.", WORDS, "Good morning.", "Thank you very much."]


@pytest.mark.parametrize("buffer", [[], ["--buffer-size", "4", "--batch-size", "4"]])
def test_interactive_translates_the_other_lines_and_reports_the_long_one(data_bin, trained, buffer):
    spm = os.path.join(os.path.dirname(data_bin), "spm", "spm.model")
    done = run([cli("fairseq-interactive"), data_bin, *GENERATE[:-4], "--beam", "1", "--path", trained[0],
                "--bpe", "sentencepiece", "--sentencepiece-model", spm, *buffer],
               input="\n".join(LINES) + "\n")
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(int(m) for m in re.findall(r"^H-(\d+)\t", done.stdout, re.M)) == [0, 2, 3]
    assert re.search(r"input line 2 \(S-1\) has \d+ tokens \(pieces and end of sentence\), more than the model's "
                     r"\d+ source positions: not translated; split it into sentences", done.stderr), done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_translate_script_translates_the_other_lines_and_reports_the_long_one(data_bin, trained):
    import json

    done = run([cli("hltmt-translate"), "--checkpoint", trained[0],
                "--src", "en", "--tgt", "de", "--beam", "1", "--json", "--no-progress"], input="\n".join(LINES) + "\n")
    assert done.returncode == 1, done.stderr[-2000:]
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(records) == 4 and [r.get("error") is None for r in records] == [True, False, True, True]
    assert re.search(r"^hltmt-translate: line 2: \d+ tokens .* more than the model's \d+ source positions", done.stderr, re.M)
    assert "hltmt-translate: 3 of 4 sentence(s) translated" in done.stderr


# ---- 7. fairseq's own noise stays out of the plugin's scripts --------------------------------
NOISE = ("tensorboardX", "UserWarning", "FutureWarning", "DeprecationWarning")


def without_pythonwarnings(cmd, **kwargs):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}  # not the suite's PYTHONWARNINGS=ignore
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=dict(env, OMP_NUM_THREADS="1"),
                          **kwargs)


def test_prepare_data_keeps_fairseqs_noise_out(tmp_path):
    done = without_pythonwarnings([cli("hltmt-prepare-data"), "--out",
                                   str(tmp_path / "out"), "--langs", "de", "--max-train", "200", "--max-valid", "20",
                                   "--max-test", "20", "--vocab-size", "500", "--workers", "1"])
    assert done.returncode == 0, done.stderr[-2000:]
    for noise in NOISE:
        assert noise not in done.stdout + done.stderr, noise


def test_translate_keeps_fairseqs_noise_out_even_when_verbose(trained):
    done = without_pythonwarnings([cli("hltmt-translate"), "--checkpoint",
                                   trained[0], "--src", "en", "--tgt", "de", "--beam", "1", "--no-progress",
                                   "--verbose"], input="Good morning.\n")
    assert done.returncode == 0, done.stderr[-2000:]
    for noise in NOISE:
        assert noise not in done.stdout + done.stderr, noise
    assert "NOT trained in this run" not in done.stdout + done.stderr  # a training warning, not for decoding


def test_decoding_with_a_data_folder_whose_dictionaries_differ_from_the_checkpoints_is_one_line(
        data_bin, trained, tmp_path):
    """Another binarized folder (its own fingerprint in order) whose dictionaries are not the
    ones the model was trained with: token ids would mean other words."""
    from hltmt_plugin.data_fingerprint import write_fingerprint

    folder = tmp_path / "bin"
    shutil.copytree(data_bin, folder)
    for lang in ("en", "de", "fr", "gu", "hi"):
        lines = (folder / f"dict.{lang}.txt").read_text(encoding="utf-8").splitlines(keepends=True)
        lines[10], lines[11] = lines[11], lines[10]
        (folder / f"dict.{lang}.txt").write_text("".join(lines), encoding="utf-8")
    write_fingerprint(str(folder))
    done = run([cli("fairseq-generate"), str(folder), *GENERATE, "--path", trained[0]])
    assert_clear(done, "differ from the dictionaries the checkpoint was trained with")
