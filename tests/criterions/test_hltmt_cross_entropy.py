"""The criterion: the disparity term (formula, scale, gradient) and what it logs."""

import copy
import math

import pytest
import torch
from fairseq import metrics

from conftest import build, make_sample
from hltmt_plugin.criterions.hltmt_cross_entropy import HltmtCrossEntropyCriterion
from hltmt_plugin.pool.router import HARD, SOFT, disparity

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


def test_disparity_is_lowest_for_an_even_spread():
    H, T = 6, 3
    even = torch.zeros(H, T)
    even[torch.arange(H), torch.arange(H) % T] = 1  # two languages per module
    collapsed = torch.zeros(H, T)
    collapsed[:, 0] = 1
    assert disparity(even).item() == pytest.approx(H * H / T)
    assert disparity(collapsed).item() == pytest.approx(H * H)
    torch.manual_seed(0)
    for _ in range(50):
        random = torch.softmax(torch.randn(H, T) * 3, dim=-1)
        assert disparity(even) <= disparity(random) + 1e-6 <= disparity(collapsed) + 2e-6


def criterion(task, weight, batch_size=4096):
    return HltmtCrossEntropyCriterion(
        task, sentence_avg=False, label_smoothing=0.1, disparity_weight=weight, disparity_batch_size=batch_size
    )


@pytest.fixture(scope="module")
def built(data_bin):
    return build(data_bin)


@pytest.mark.parametrize("batch_size", [4096, 1])
def test_disparity_scales_with_the_sample_size_and_reaches_the_gate(built, batch_size):
    """The per-token coefficient is weight / --disparity-batch-size at any batch size: the
    authors' w * D once per 4,096-token batch is w / 4096 per token (issue 12). The gate leans
    to one module, so that the term stands well above the float32 rounding of the loss."""
    _, task, model = built
    model = copy.deepcopy(model)
    with torch.no_grad():
        model.slp_router.gate.bias.copy_(torch.tensor([6.0] + [0.0] * (model.slp.pool_size - 1)))
    model.train()
    model.slp_router.mode = SOFT
    coefficients = []
    for directions in (["en-de", "en-gu"], ["en-de", "en-fr", "de-en", "en-hi", "gu-en", "en-fr"]):
        sample = make_sample(task, directions)
        torch.manual_seed(0)
        with_term, size, log = criterion(task, 2.0, batch_size)(model, sample)
        torch.manual_seed(0)
        without, size0, _ = criterion(task, 0.0, batch_size)(model, sample)
        probs = model.gate_probs()
        floor = probs.size(0) ** 2 / probs.size(1)  # the term's minimum, a constant
        # the coefficient measured: (loss with - without) / sample size / (D - H^2/T)
        coefficients.append(((with_term - without) / size).item() / (disparity(probs).item() - floor))
        assert log["disparity_n"] == 1
    for measured in coefficients:
        assert measured == pytest.approx(2.0 / batch_size, rel=2e-3)
    model.zero_grad()
    ((with_term - without) / size).backward()
    assert model.slp_router.gate.weight.grad.abs().sum() > 0


def test_hard_steps_add_no_disparity(built):
    _, task, model = built
    model.train()
    model.slp_router.mode = HARD
    sample = make_sample(task, ["en-de", "en-gu"])
    torch.manual_seed(0)
    a, _, log = criterion(task, 5.0)(model, sample)
    torch.manual_seed(0)
    b, _, _ = criterion(task, 0.0)(model, sample)
    assert a.item() == b.item() and log["disparity_n"] == 0


def test_logs_per_language_loss_and_routing_shares(built):
    _, task, model = built
    model.eval()
    directions = ["en-de", "en-de", "en-gu", "de-en", "en-fr"]
    sample = make_sample(task, directions)
    crit = criterion(task, 1.0)
    with torch.no_grad():
        loss, size, log = crit(model, sample)
    route = model.map_by_language()
    expected_rows = {"universal": 2}
    for d in ("de", "de", "fr"):
        expected_rows[f"m{route[d]}"] = expected_rows.get(f"m{route[d]}", 0) + 1
    for name in ("m0", "m1", "universal"):
        assert log[f"route:{name}"] == expected_rows.get(name, 0)
    tokens = {lang: 0 for lang in task.langs}
    for b, i in enumerate(sample["id"].tolist()):
        tokens[directions[i].split("-")[1]] += int(sample["target"][b].ne(1).sum())
    for lang in task.langs:
        assert log[f"lang_ntokens:{lang}"] == tokens[lang]
    assert float(sum(log[f"lang_loss:{lang}"] for lang in task.langs)) == pytest.approx(loss.item(), rel=1e-5)
    with metrics.aggregate() as agg:
        HltmtCrossEntropyCriterion.reduce_metrics([log, log])
    values = agg.get_smoothed_values()
    assert values["route_universal"] == pytest.approx(2 / 5, abs=1e-3)
    assert values["loss_de"] == pytest.approx(float(log["lang_loss:de"]) / tokens["de"] / math.log(2), abs=1e-3)
    assert "loss_hi" not in values  # no hi rows, no hi figure


def test_another_model_is_refused_in_one_line(built):
    """The criterion serves the plugin's model only (plugin_model), wrapped or not: another model,
    even one whose output looks alike, is one line naming the option."""
    from hltmt_plugin.errors import HltmtConfigError

    _, task, model = built
    sample = make_sample(task, ["en-de", "en-gu"])

    class Lookalike(torch.nn.Module):  # the plugin model's output, but not the plugin's model
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, **net_input):
            return self.inner(**net_input)

        def get_normalized_probs(self, *args, **kwargs):
            return self.inner.get_normalized_probs(*args, **kwargs)

        def get_targets(self, *args, **kwargs):
            return self.inner.get_targets(*args, **kwargs)

    with pytest.raises(HltmtConfigError, match="needs --arch hltmt_transformer"):
        criterion(task, 0.0)(Lookalike(model), sample)

    class Wrapper(Lookalike):  # fairseq's distributed wrappers hold the model as .module
        @property
        def module(self):
            return self.inner

    loss, _, _ = criterion(task, 0.0)(Wrapper(model), sample)
    assert torch.isfinite(loss)
