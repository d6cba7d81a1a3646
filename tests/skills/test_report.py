"""Skill parameters by name and the skill report (hltmt_plugin/skills/report.py)."""

import pytest

from hltmt_plugin.skills import format_skill_report, is_skill_parameter, skill_report
from hltmt_plugin.skills.report import skill_of
from skills_common import skilled_model

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


@pytest.fixture(scope="module")
def skilled(data_bin):
    return skilled_model(data_bin)


def test_the_report_counts_parameters_per_skill_and_the_active_share(skilled):
    _, task, model = skilled
    plan = model.encoder.skill_layout
    report = skill_report(model, plan)
    d, f, layers = 128, 256, 2
    ffn = layers * (d * f + f + f * d + d)
    qkv = layers * 3 * (d * d + d)
    assert report["per_skill"]["ffn"] == {s: ffn for s in ["generic", *task.langs, "to_en", "from_en"]}
    assert report["per_skill"]["attention"] == {lang: qkv for lang in task.langs}
    total = sum(p.numel() for p in model.parameters())
    inactive = 5 * ffn + 4 * qkv  # en-de: 3 of 8 skill FFNs, 1 of 5 languages
    assert report["directions"]["en-de"]["active"] == total - inactive
    assert set(report["directions"]) == {"en-de", "en-fr", "en-gu", "en-hi", "de-en", "gu-en"}


@pytest.mark.parametrize(
    "name, skill",
    [
        ("encoder.layers.0.skill_ffn.experts.to_en.fc1.weight", ("ffn", "to_en")),
        ("encoder.layers.1.self_attn.skills.gu.k_proj.bias", ("attention", "gu")),
        ("encoder.layers.1.self_attn.out_proj.weight", None),
        ("encoder.layers.0.adapters.ffn.language_adapters.en.up.weight", None),
    ],
)
def test_a_parameter_name_says_its_skill(name, skill):
    assert skill_of(name) == skill
    assert is_skill_parameter(name) == (skill is not None)


def test_the_report_lines_name_the_layers_the_skills_and_the_directions_beyond_training(skilled):
    _, task, model = skilled
    layout = model.encoder.skill_layout
    report = skill_report(model, layout)
    lines = format_skill_report(report, layout)
    assert lines[0] == (
        f"skills: encoder layers 0,1; model {report['total']:,} parameters, {report['skill_parameters']:,} in skills"
    )
    assert any(line.startswith("  language Q/K/V: en,de,fr,gu,hi: ") for line in lines)
    share = 100.0 * report["directions"]["gu-en"]["share"]
    assert f"  gu-en: skills generic+gu+to_en; active {report['directions']['gu-en']['active']:,}" in "\n".join(lines)
    assert f"({share:.1f}%)" in "\n".join(lines)
    assert lines[-1] == "  (+14 more direction(s) in the skill matrix, e.g. for decoding without retraining)"  # 20 - 6
