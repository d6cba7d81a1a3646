"""Adapter parameters by name and the parameter report (hltmt_plugin/adapters/report.py)."""

import pytest

from adapters_common import madx_model
from hltmt_plugin.adapters import (
    adapter_kind,
    adapter_language,
    bottleneck_parameters,
    format_parameter_report,
    is_adapter_parameter,
    parameter_report,
)

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


@pytest.fixture(scope="module")
def madx(data_bin):
    return madx_model(data_bin)


def test_parameter_report_counts_what_each_language_adds(madx):
    _, task, model = madx
    report = parameter_report(model)
    d, layers = 128, 2
    lang = bottleneck_parameters(d, d // 2) * layers  # pfeiffer: one per layer
    inv = 2 * bottleneck_parameters(d // 2, d // 4)
    for counts in report["per_language"].values():
        assert counts == {
            "encoder language": lang,
            "decoder language": lang,
            "encoder invertible": inv,
            "decoder invertible": inv,
        }
    assert report["shared"] == 2 * layers * bottleneck_parameters(d, d // 16)
    assert report["base"] == sum(p.numel() for n, p in model.named_parameters() if "adapter" not in n)
    lines = format_parameter_report(report)
    per = 2 * lang + 2 * inv
    assert f"per language ({','.join(task.langs)}): +{per:,} ({100.0 * per / report['base']:.2f}%)" in lines[1]


@pytest.mark.parametrize(
    "name, kind, lang",
    [
        ("encoder.layers.0.adapters.ffn.language_adapters.gu.up.weight", "language", "gu"),
        ("decoder.layers.1.adapters.self_attn.shared_adapter.down.bias", "shared", None),
        ("encoder.invertible_adapters.adapters.de.f.up.weight", "invertible", "de"),
        ("decoder.layers.0.fc1.weight", None, None),
        ("decoder.slp.modules.0.fc1.weight", None, None),
    ],
)
def test_a_parameter_name_says_its_adapter_kind_and_language(name, kind, lang):
    assert adapter_kind(name) == kind
    assert adapter_language(name) == lang
    assert is_adapter_parameter(name) == (kind is not None)


def test_the_names_the_report_reads_are_the_models_own(madx):
    _, task, model = madx
    names = [n for n, _ in model.named_parameters()]
    languages = {adapter_language(n) for n in names if adapter_kind(n) in ("language", "invertible")}
    assert languages == set(task.langs)
    assert any(adapter_kind(n) == "shared" for n in names)
    assert not any(is_adapter_parameter(n) for n in names if "adapter" not in n)


def test_the_report_of_a_model_without_base_parameters_says_n_a():
    lines = format_parameter_report(
        {"base": 0, "per_language": {"en": {"encoder language": 10}}, "shared": 4, "total": 14}
    )
    assert lines[1] == "  per language (en): +10 (n/a) = encoder language 10"
    assert lines[2] == "  shared adapters (all languages): +4 (n/a)"
    assert lines[-1] == "  all adapters, 1 language(s): +14 (n/a)"
