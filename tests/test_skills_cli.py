"""Encoder skills through the real CLI: short fairseq-train runs on the DebMT-10 slice with
skills on (from scratch), with skills + SLP + adapters converted from a trained dense
checkpoint, and the one-line error for a bad skill matrix."""
import json
import os
import re

import torch

from fairseq import checkpoint_utils

import hltmt_plugin  # noqa: F401  (safe checkpoint loading under torch >= 2.6)
from conftest import LANGS, PLUGIN, cli, run

PAIRS = "en-de,en-fr,en-gu,en-hi,de-en,gu-en"


def train(data_bin, save, *extra):
    return run([cli("fairseq-train"), data_bin, "--user-dir", PLUGIN, "--task", "hltmt_translation",
                 "--arch", "hltmt_transformer_tiny", "--langs", LANGS, "--lang-pairs", PAIRS,
                 "--encoder-langtok", "tgt", "--high-resource-langs", "de,fr", "--slp-pool-size", "2", "--cpu",
                 "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--optimizer", "adam",
                 "--lr", "2e-3", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "4", "--max-tokens", "1500",
                 "--save-dir", str(save), "--log-interval", "1", "--no-epoch-checkpoints", "--seed", "3",
                 "--num-workers", "0", "--enable-lang-ids", "--max-update", "3", *extra])


def losses(log):
    return [float(v) for v in re.findall(r"\| loss ([0-9.]+) \|", log)]


def test_fairseq_train_with_skills_trains_them_and_logs_the_report(data_bin, tmp_path):
    done = train(data_bin, tmp_path, "--skill-ffn", "--skill-attention")
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    assert "skills: encoder layers 0,1" in log
    assert "skill FFN: generic,en,de,fr,gu,hi,to_en,from_en: 131,840 each" in log
    assert re.search(r"en-de: skills generic\+en\+from_en; active [0-9,]+ of [0-9,]+ parameters", log)
    assert losses(log) and all(v == v and v < 20 for v in losses(log))
    state = checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "checkpoint_last.pt"))["model"]
    assert "encoder.layers.0.skill_ffn.experts.to_en.fc1.weight" in state
    assert "encoder.layers.0.fc1.weight" not in state and "encoder.layers.1.self_attn.q_proj.weight" not in state
    # the skills trained apart: en's FFN (every en-* direction) moved differently from hi's (no hi source)
    en = state["encoder.layers.0.skill_ffn.experts.en.fc1.weight"]
    hi = state["encoder.layers.0.skill_ffn.experts.hi.fc1.weight"]
    assert not torch.equal(en, hi)


def test_a_trained_dense_model_continues_with_skills_slp_and_adapters_together(data_bin, trained, tmp_path):
    done = train(data_bin, tmp_path, "--skill-ffn", "--skill-attention", "--language-adapters",
                 "--shared-adapters", "--decoder-adapters", "--restore-file", trained[0], "--reset-optimizer",
                 "--reset-dataloader", "--reset-meters", "--reset-lr-scheduler")
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    assert "every skill FFN initialised from the checkpoint's dense FFN" in log
    assert "every language's Q/K/V initialised from the checkpoint's dense ones" in log
    assert "adapters: base model" in log and "HLT-MT: pool of 2 modules" in log
    state = checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "checkpoint_last.pt"))["model"]
    dense = checkpoint_utils.load_checkpoint_to_cpu(trained[0])["model"]
    assert {"encoder.layers.1.skill_ffn.experts.generic.fc2.weight", "encoder.layers.1.self_attn.skills.gu.k_proj.weight",
            "encoder.layers.0.adapters.ffn.language_adapters.en.up.weight",
            "decoder.layers.1.adapters.ffn.shared_adapter.up.weight"} <= set(state)
    assert any(k.startswith("decoder.slp.") for k in state)
    # started from the dense weights, then trained: close to them but moved
    moved = state["encoder.layers.1.skill_ffn.experts.generic.fc2.weight"] - dense["encoder.layers.1.fc2.weight"]
    assert 0 < moved.abs().max() < 0.1
    assert losses(log) and losses(log)[0] < 10.8  # a trained model's loss (about 10.1), not a fresh one's (about 11)


def test_a_bad_skill_matrix_fails_with_one_line_naming_the_entry(data_bin, tmp_path):
    path = tmp_path / "matrix.json"
    path.write_text(json.dumps({"skills": ["generic", "en"], "directions": {"en-de": ["generic", "legal"]}}))
    done = train(data_bin, tmp_path, "--skill-ffn", "--skill-matrix", str(path))
    assert done.returncode != 0
    assert f'hltmt_plugin: error: --skill-matrix {path}: direction "en-de" names skill legal' in done.stderr
    assert "Traceback" not in done.stderr
