"""The session's checkpoint decoded by fairseq-generate, and crafted with code in one of the stored
options fairseq evaluates (shared by tests/compat/test_safe_eval.py and
tests/cli/test_average_checkpoints.py)."""

import argparse

import torch

import hltmt_plugin  # noqa: F401  (registers the task, model and criterion with fairseq)
from conftest import LANGS, PAIRS, PLUGIN
from hltmt_plugin.compat.safe_loading import load_state

# each helper fairseq evaluates a stored option with -> (record, section, option)
KINDS = {
    "eval_bool": ("cfg", "task", "left_pad_source"),
    "eval_str_list": ("cfg", "model", "adaptive_softmax_cutoff"),
    "eval_str_dict": ("cfg", "model", "xformers_att_config"),
    "eval": ("cfg", "optimizer", "adam_betas"),
    "legacy_args": ("args", None, "left_pad_target"),
}
DECODE = [
    "--user-dir",
    PLUGIN,
    "--task",
    "hltmt_translation",
    "--langs",
    LANGS,
    "--lang-pairs",
    PAIRS,
    "--encoder-langtok",
    "tgt",
    "-s",
    "en",
    "-t",
    "de",
    "--beam",
    "1",
    "--max-len-b",
    "3",
    "--cpu",
]


def craft(trained_ckpt, tmp_path, kind):
    """The trained checkpoint with one stored option replaced by code that creates a marker."""
    record, section, option = KINDS[kind]
    marker = tmp_path / f"ran-{kind}"
    payload = f"__import__('os').system('touch {marker}')"
    state = load_state(trained_ckpt)
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
