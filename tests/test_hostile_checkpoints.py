"""A checkpoint whose stored options hold Python code runs none of it, on every route that
loads a checkpoint: each kind of option fairseq evaluates (``utils.eval_bool``,
``eval_str_list``, ``eval_str_dict``, ``eval`` in the optimizer, a legacy ``args`` record),
crafted into the ``trained`` fixture's checkpoint, through fairseq-generate,
fairseq-interactive, fairseq-train --restore-file / --finetune-from-model, the Python API,
hltmt-translate and hltmt-adapters export: one line naming the file and the option, a non-zero
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
}


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
    assert errors[0].split(": error: ", 1)[0] in ("hltmt_plugin", "hltmt-translate", "hltmt-adapters"), errors[0]
    assert errors[0].split(": error: ", 1)[1].startswith(
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
