"""Skills installed into ``hltmt_transformer`` (hltmt_plugin/skills/feature.py): the chosen
layers, a model without skills unchanged, and through fairseq-train: skills from scratch, and
skills with the pool and adapters on a trained dense checkpoint."""

import re

import pytest
import torch

import hltmt_plugin  # noqa: F401  (registers the task, model and criterion with fairseq)
from conftest import build, make_sample
from hltmt_plugin.compat.safe_loading import load_checkpoint
from hltmt_plugin.errors import HltmtInputError
from skills_common import SKILLS, losses, train


def test_skill_layers_choose_the_layers_and_skills_off_change_nothing(data_bin):
    _, _, model = build(data_bin, *SKILLS, "--skill-layers", "1")
    assert hasattr(model.encoder.layers[1], "skill_ffn") and not hasattr(model.encoder.layers[0], "skill_ffn")
    assert isinstance(model.encoder.layers[0].fc1, torch.nn.Linear)
    _, _, plain = build(data_bin)
    assert not any("skill" in n for n in plain.state_dict())
    assert plain.encoder.skill_layout is None


def test_fairseq_train_with_skills_trains_them_and_logs_the_report(data_bin, tmp_path):
    done = train(data_bin, tmp_path, "--skill-ffn", "--skill-attention")
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    assert "skills: encoder layers 0,1" in log
    assert "skill FFN: generic,en,de,fr,gu,hi,to_en,from_en: 131,840 each" in log
    assert re.search(r"en-de: skills generic\+en\+from_en; active [0-9,]+ of [0-9,]+ parameters", log)
    assert losses(log) and all(v == v and v < 20 for v in losses(log))
    state = load_checkpoint(str(tmp_path / "checkpoint_last.pt"))["model"]
    assert "encoder.layers.0.skill_ffn.experts.to_en.fc1.weight" in state
    assert "encoder.layers.0.fc1.weight" not in state and "encoder.layers.1.self_attn.q_proj.weight" not in state
    # the skills trained apart: en's FFN (every en-* direction) moved differently from hi's (no hi source)
    en = state["encoder.layers.0.skill_ffn.experts.en.fc1.weight"]
    hi = state["encoder.layers.0.skill_ffn.experts.hi.fc1.weight"]
    assert not torch.equal(en, hi)


def test_a_trained_dense_model_continues_with_skills_slp_and_adapters_together(data_bin, trained, tmp_path):
    done = train(
        data_bin,
        tmp_path,
        "--skill-ffn",
        "--skill-attention",
        "--language-adapters",
        "--shared-adapters",
        "--decoder-adapters",
        "--restore-file",
        trained[0],
        "--reset-optimizer",
        "--reset-dataloader",
        "--reset-meters",
        "--reset-lr-scheduler",
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    assert "every skill FFN initialised from the checkpoint's dense FFN" in log
    assert "every language's Q/K/V initialised from the checkpoint's dense ones" in log
    assert "adapters: base model" in log and "HLT-MT: pool of 2 modules" in log
    state = load_checkpoint(str(tmp_path / "checkpoint_last.pt"))["model"]
    dense = load_checkpoint(trained[0])["model"]
    assert {
        "encoder.layers.1.skill_ffn.experts.generic.fc2.weight",
        "encoder.layers.1.self_attn.skills.gu.k_proj.weight",
        "encoder.layers.0.adapters.ffn.language_adapters.en.up.weight",
        "decoder.layers.1.adapters.ffn.shared_adapter.up.weight",
    } <= set(state)
    assert any(k.startswith("decoder.slp.") for k in state)
    # started from the dense weights, then trained: close to them but moved
    moved = state["encoder.layers.1.skill_ffn.experts.generic.fc2.weight"] - dense["encoder.layers.1.fc2.weight"]
    assert 0 < moved.abs().max() < 0.1
    assert losses(log) and losses(log)[0] < 10.8  # a trained model's loss (about 10.1), not a fresh one's (about 11)


def test_installed_skills_choose_by_each_rows_source_language_and_need_it(data_bin):
    _, task, model = build(data_bin, *SKILLS)
    encoder = model.encoder
    assert encoder.skill_layout.layers == [0, 1] and encoder.languages.need_source
    langs = task.langs
    record = torch.tensor([[langs.index("en"), langs.index("de")], [langs.index("gu"), langs.index("en")]])
    combos = encoder.skill_directions.combos
    assert [combos[i] for i in encoder.skill_directions.ffn_ids(record).tolist()] == [
        ("generic", "en", "from_en"),
        ("generic", "gu", "to_en"),
    ]
    with pytest.raises(HltmtInputError, match="--enable-lang-ids"):  # no source language per row
        model(**make_sample(task, ["en-de", "gu-en"])["net_input"])
