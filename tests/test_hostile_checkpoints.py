"""A checkpoint whose stored options hold Python code runs none of it, on every route that
loads a checkpoint: each kind of option fairseq evaluates (``utils.eval_bool``,
``eval_str_list``, ``eval_str_dict``, ``eval`` in the optimizer, a legacy ``args`` record),
crafted into the ``trained`` fixture's checkpoint, through fairseq-generate,
fairseq-interactive, fairseq-train --restore-file / --finetune-from-model, the Python API,
hltmt-translate, hltmt-adapters export, hltmt-train-language-adapter and hltmt-report's gate
heatmap: one line naming the file and the option, a non-zero
exit, and the marker file the code would create is not there."""
import argparse
import os
import re
import sys

import pytest
import torch

from conftest import LANGS, PAIRS, PLUGIN, cli, run, train_args

import hltmt_plugin  # noqa: F401  (allowlists the types fairseq checkpoints hold)

# each helper fairseq evaluates a stored option with -> (record, section, option)
KINDS = {
    "eval_bool": ("cfg", "task", "left_pad_source"),
    "eval_str_list": ("cfg", "model", "adaptive_softmax_cutoff"),
    "eval_str_dict": ("cfg", "model", "xformers_att_config"),
    "eval": ("cfg", "optimizer", "adam_betas"),
    "legacy_args": ("args", None, "left_pad_target"),
}
TRAIN = ["--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000", "--max-update", "31", "--num-workers", "0",
         "--no-epoch-checkpoints"]
DECODE = ["--user-dir", PLUGIN, "--task", "hltmt_translation", "--langs", LANGS, "--lang-pairs", PAIRS,
          "--encoder-langtok", "tgt", "-s", "en", "-t", "de", "--beam", "1", "--max-len-b", "3", "--cpu"]
ROUTES = {
    "fairseq-generate": lambda data, ckpt, tmp: ([cli("fairseq-generate"), data, *DECODE, "--path", ckpt,
                                                  "--gen-subset", "test"], None),
    "fairseq-interactive": lambda data, ckpt, tmp: ([cli("fairseq-interactive"), data, *DECODE, "--path", ckpt],
                                                    "hello\n"),
    "fairseq-train --restore-file": lambda data, ckpt, tmp: (
        [cli("fairseq-train"), *train_args(data, *TRAIN, "--save-dir", str(tmp / "save"), "--restore-file", ckpt)],
        None),
    "fairseq-train --finetune-from-model": lambda data, ckpt, tmp: (
        [cli("fairseq-train"), *train_args(data, *TRAIN, "--save-dir", str(tmp / "save"),
                                           "--finetune-from-model", ckpt)], None),
    "the Python API": lambda data, ckpt, tmp: (
        [sys.executable, "-c", "import sys; from hltmt_plugin.hub import HltmtTranslator; "
                               "print(HltmtTranslator.load(sys.argv[1]).translate(['hello'], src='en', tgt='de'))",
         ckpt], None),
    "hltmt-translate": lambda data, ckpt, tmp: ([cli("hltmt-translate"), "--checkpoint", ckpt, "--src", "en",
                                                 "--tgt", "de"], "hello\n"),
    "hltmt-adapters export": lambda data, ckpt, tmp: ([cli("hltmt-adapters"), "export", "--path", ckpt, "--lang", "de",
                                                       "--out", str(tmp / "de.adapters.pt")], None),
    "hltmt-train-language-adapter": lambda data, ckpt, tmp: (
        [cli("hltmt-train-language-adapter"), "--path", ckpt, "--lang", "de", "--text", write(tmp / "mono.de", "Hallo.\n"),
         "--spm", os.path.join(os.path.dirname(data), "spm", "spm.model"), "--out", str(tmp / "de.adapters.pt")], None),
    "hltmt-report --gate-checkpoint": lambda data, ckpt, tmp: (
        [cli("hltmt-report"), "--decode-dir", write(tmp / "decode" / "hltmt" / "seed1" / "en-de.gen",
                                                    "T-0\tDas ist gut.\nD-0\t-1.0\tDas ist gut.\n", folder=tmp / "decode"),
         "--high", "de", "--machine", "test", "--out", str(tmp / "report"), "--gate-checkpoint", ckpt], None),
}


def write(path, text, folder=None):
    """Write a small input file of a route; returns its path (or ``folder``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(folder or path)


def craft(trained_ckpt, tmp_path, kind):
    """The trained checkpoint with one stored option replaced by code that creates a marker."""
    record, section, option = KINDS[kind]
    marker = tmp_path / f"ran-{kind}"
    payload = f"__import__('os').system('touch {marker}')"
    state = torch.load(trained_ckpt, map_location="cpu", weights_only=True)
    if record == "args":  # a checkpoint of fairseq before 0.10: its options as one Namespace
        state["args"] = argparse.Namespace(**vars(state["cfg"]["model"]))
        target = state["args"]
    else:
        target = state["cfg"][section]
    if isinstance(target, argparse.Namespace):
        setattr(target, option, payload)
    else:
        target[option] = payload
    path = tmp_path / f"{kind}.pt"
    torch.save(state, path)
    return str(path), marker, ".".join(p for p in (record, section, option) if p)


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
    assert errors[0].split("error: ", 1)[1].startswith(
        f"refused to load checkpoint {ckpt}: its stored option {option} = \"__import__('os').system("), errors[0]
    assert errors[0].endswith("is not a literal, and fairseq evaluates that option as Python when it builds the model "
                              "or task, so loading it could run code (nothing was run)"), errors[0]
    assert not os.path.exists(tmp_path / "de.adapters.pt")


def test_code_given_on_the_command_line_for_an_evaluated_option_does_not_run(data_bin, tmp_path):
    """The same evaluator reads the user's own options (here --left-pad-source, which fairseq's
    multilingual data manager evaluates): literals as before, anything else refused in one line."""
    marker = tmp_path / "ran"
    done = run([cli("fairseq-train"), *train_args(data_bin, *TRAIN, "--save-dir", str(tmp_path / "save"),
                                                  "--left-pad-source", f"__import__('os').system('touch {marker}')")])
    assert not marker.exists()
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert re.search(r"^hltmt_plugin: error: the option value \"__import__\('os'\)\.system\(.* is not a literal "
                     r"\(call: __import__\('os'\)\.system\(", done.stderr, re.M), done.stderr[-2000:]


# ---- averaged checkpoints
AVERAGE_RUN = ["--criterion", "hltmt_cross_entropy", "--optimizer", "adam", "--lr", "2e-3", "--max-tokens", "1000",
               "--num-workers", "0", "--seed", "5", "--no-epoch-checkpoints", "--high-stage-updates", "5",
               "--max-update", "8", "--save-interval-updates", "2", "--keep-interval-updates", "-1"]


@pytest.fixture(scope="module")
def two_stages(data_bin, tmp_path_factory):
    """Checkpoints of one run on both sides of its stage switch (update 5): 1_2 and 1_4 of stage
    high (the map open), 2_6 and 2_8 of stage all (the map fixed)."""
    save = tmp_path_factory.mktemp("two_stages")
    done = run([cli("fairseq-train"), *train_args(data_bin, *AVERAGE_RUN, "--save-dir", str(save))])
    assert done.returncode == 0, done.stderr[-3000:]
    return save


def weights(path):
    return torch.load(path, map_location="cpu", weights_only=True)["model"]


def average_cmd(*args):
    return run([cli("hltmt-average-checkpoints"), *map(str, args)])


def one_error(done):
    out = done.stdout + done.stderr
    assert done.returncode != 0 and "Traceback" not in out, out[-3000:]
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, out[-3000:]
    return errors[0]


def test_averaging_checkpoints_of_stage_all_gives_their_mean_and_keeps_the_map(data_bin, two_stages, tmp_path):
    out = tmp_path / "averaged.pt"
    done = average_cmd("--inputs", two_stages, "--num-update-checkpoints", "2", "--output", out)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"averaged 2 checkpoint(s) into {out}: {two_stages}/checkpoint_2_8.pt, {two_stages}/checkpoint_2_6.pt" \
        in done.stdout
    a, b, avg = weights(two_stages / "checkpoint_2_8.pt"), weights(two_stages / "checkpoint_2_6.pt"), weights(out)
    for key in ("decoder.slp.universal.fc1.weight", "encoder.embed_tokens.weight"):
        torch.testing.assert_close(avg[key], ((a[key].double() + b[key].double()) / 2).float(), rtol=0, atol=1e-7)
        assert not torch.equal(a[key], b[key])
    assert torch.equal(avg["decoder.slp.fixed_map_onehot"], a["decoder.slp.fixed_map_onehot"])
    decoded = run([cli("fairseq-generate"), data_bin, *DECODE, "--path", str(out), "--gen-subset", "test"])
    assert decoded.returncode == 0, decoded.stderr[-3000:]
    printed = re.search(r"HLT-MT routing map \(fixed, from the checkpoint\): (de->m\d, fr->m\d)", decoded.stderr)
    last = run([cli("fairseq-generate"), data_bin, *DECODE, "--path", str(two_stages / "checkpoint_2_8.pt"),
                "--gen-subset", "test"])
    assert printed and printed.group(1) in last.stderr, decoded.stderr[-2000:]


@pytest.mark.parametrize("pair, why", [
    (("checkpoint_1_4.pt", "checkpoint_2_6.pt"), r"their routing maps \(decoder\.slp\.fixed_map_onehot\) differ "
                                                 r"\(.*\): checkpoints from both sides of the stage switch"),
    (("checkpoint_1_2.pt", "checkpoint_1_4.pt"), r"the gate trained for \d+ and \d+ steps \(decoder\.slp\.gate_steps\): "
                                                 r"checkpoints of stage high"),
])
def test_averaging_checkpoints_whose_map_or_gate_differ_is_refused(two_stages, tmp_path, pair, why):
    out = tmp_path / "averaged.pt"
    first, second = (two_stages / name for name in pair)
    line = one_error(average_cmd("--inputs", first, second, "--output", out))
    assert re.fullmatch(rf"hltmt_plugin: error: cannot average {re.escape(str(first))} and {re.escape(str(second))}: "
                        rf"{why}.*", line), line
    assert not out.exists() and os.listdir(tmp_path) == []


def test_a_map_averaged_across_the_stage_switch_by_other_tools_is_refused_on_load(data_bin, two_stages, tmp_path):
    """What fairseq's scripts/average_checkpoints.py computes (the sum, then ``//`` for integer
    tensors and ``/`` for the others): once [-1, -1] and [1, 1] made the map [0, 0]."""
    states = [torch.load(two_stages / name, map_location="cpu", weights_only=True)
              for name in ("checkpoint_1_4.pt", "checkpoint_2_6.pt")]
    model = {k: sum(s["model"][k] for s in states) for k in states[0]["model"]}
    states[0]["model"] = {k: v / 2 if v.is_floating_point() else v // 2 for k, v in model.items()}
    path = tmp_path / "fairseq_average.pt"
    torch.save(states[0], path)
    line = one_error(run([cli("fairseq-generate"), data_bin, *DECODE, "--path", str(path), "--gen-subset", "test"]))
    assert re.fullmatch(r"hltmt_plugin: error: the checkpoint's routing map \(decoder\.slp\.fixed_map_onehot\) is no map "
                        r"a training stage wrote: the row of (de|fr) is \[\d, \d, \d\], not a single 1 .*were "
                        r"checkpoints with different maps averaged \(e\.g\. from both sides of the stage switch\)\?.*",
                        line), line


@pytest.mark.parametrize("args, message", [
    (["--num-update-checkpoints", "9"], r"holds 4 checkpoint\(s\) named checkpoint_\\d\+_\(\\d\+\)\\.pt, fewer than the 9 "
                                        r"asked for"),
    (["--num-update-checkpoints", "2", "--checkpoint-upper-bound", "1"], r"holds 0 checkpoint\(s\) .* up to 1, fewer"),
    (["--num-epoch-checkpoints", "0"], r"--num-epoch-checkpoints must be at least 1, got 0"),
    (["--checkpoint-upper-bound", "4"], r"--checkpoint-upper-bound needs --num-epoch-checkpoints or "
                                        r"--num-update-checkpoints"),
])
def test_averaging_options_that_cannot_work_are_one_line(two_stages, tmp_path, args, message):
    line = one_error(average_cmd("--inputs", two_stages, *args, "--output", tmp_path / "a.pt"))
    assert re.search(message, line), line
    assert os.listdir(tmp_path) == []


def test_averaging_a_checkpoint_holding_code_runs_none_of_it(trained, two_stages, tmp_path):
    """The averaging command loads as fairseq's loader does under the plugin."""
    ckpt, marker, option = craft(trained[0], tmp_path, "eval_str_list")
    line = one_error(average_cmd("--inputs", ckpt, ckpt, "--output", tmp_path / "a.pt"))
    assert line.startswith(f"hltmt_plugin: error: refused to load checkpoint {ckpt}: its stored option {option}"), line
    assert not marker.exists() and not (tmp_path / "a.pt").exists()


def test_averaging_checkpoints_trained_with_other_options_is_refused(two_stages, tmp_path):
    state = torch.load(two_stages / "checkpoint_2_6.pt", map_location="cpu", weights_only=True)
    state["cfg"]["model"].high_resource_langs = "fr,de"  # the same weights would mean the other language
    other = tmp_path / "other.pt"
    torch.save(state, other)
    line = one_error(average_cmd("--inputs", two_stages / "checkpoint_2_8.pt", other, "--output", tmp_path / "a.pt"))
    assert line == (f"hltmt_plugin: error: cannot average {two_stages / 'checkpoint_2_8.pt'} and {other}: they were "
                    "trained with other --high-resource-langs (de,fr and fr,de), so the same weight means something "
                    "else in each"), line
    assert sorted(os.listdir(tmp_path)) == ["other.pt"]
