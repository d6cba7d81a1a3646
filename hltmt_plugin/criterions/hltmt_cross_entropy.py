"""``hltmt_cross_entropy``: label-smoothed cross-entropy + HLT-MT's disparity term.

On the updates where the gate takes part (soft steps of stage ``high``) the criterion adds
``w * (disparity(P) - H^2/T) * sample_size / B`` to the summed loss, with ``w =
--disparity-weight`` and ``B = --disparity-batch-size`` (H^2/T is the term's minimum, reached
at an even spread: subtracting it changes no gradient). fairseq divides the gradient by the
sample size, so each target token carries ``w / B`` of the term whatever the batch size (and
with ``--update-freq`` or several workers). The authors add ``w * D`` once per batch to a
loss summed over a batch of 4,096 tokens, i.e. ``w / 4096`` per token: the defaults
(``w = 1``, ``B = 4096``) mean exactly that. It logs through fairseq's metrics, so the
values appear in progress lines, JSON logs and tensorboard:

- ``disparity``: the load-balancing term ``||sum_l p_l||^2`` itself (H^2/T at an even
  spread, H^2 when every language picks one module), on soft steps;
- ``route_m0`` .. ``route_m{T-1}``, ``route_universal``: the share of sentences sent to each
  pool module and to the universal layer (each row's entry of the router's target -> module
  table, counted under the router's labels);
- ``loss_xx``: the loss (base 2, per target token) of each target language ``xx``.
"""

import math
from dataclasses import dataclass, field

import torch
from fairseq import metrics, utils
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
    label_smoothed_nll_loss,
)

from hltmt_plugin.errors import HltmtConfigError
from hltmt_plugin.languages import ROWS, TGT
from hltmt_plugin.models.hltmt_transformer import plugin_model
from hltmt_plugin.pool.router import disparity

LANG_LOSS, LANG_TOKENS, ROUTE, DISP_SUM, DISP_N = (
    "lang_loss:",
    "lang_ntokens:",
    "route:",
    "disparity_sum",
    "disparity_n",
)


@dataclass
class HltmtCrossEntropyConfig(LabelSmoothedCrossEntropyCriterionConfig):
    disparity_weight: float = field(
        default=1.0,
        metadata={
            "help": "weight of the disparity (load-balancing) term over the high-resource "
            "languages' gate distributions, added on soft routing steps; the authors' "
            "value (1.0) with their batch size (--disparity-batch-size 4096) is the default"
        },
    )
    disparity_batch_size: float = field(
        default=4096,
        metadata={
            "help": "the batch size (in the loss's units: target tokens, or sentences with "
            "--sentence-avg) at which the term weighs as in the authors' code, which adds "
            "--disparity-weight x D once per batch: each unit carries weight / this"
        },
    )


@register_criterion("hltmt_cross_entropy", dataclass=HltmtCrossEntropyConfig)
class HltmtCrossEntropyCriterion(LabelSmoothedCrossEntropyCriterion):
    def __init__(
        self,
        task,
        sentence_avg,
        label_smoothing,
        ignore_prefix_size=0,
        report_accuracy=False,
        disparity_weight=1.0,
        disparity_batch_size=4096,
    ):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        if not 0 <= disparity_weight < float("inf"):
            raise HltmtConfigError(f"--disparity-weight must be a finite number >= 0, got {disparity_weight}")
        if not disparity_batch_size > 0:
            raise HltmtConfigError(f"--disparity-batch-size must be positive, got {disparity_batch_size}")
        self.disparity_weight = disparity_weight
        self.disparity_scale = disparity_weight / disparity_batch_size  # per unit of sample size
        self.langs = list(task.langs)
        self.labels = None  # the pool's modules and the universal layer, as the router labels them (first use)

    def forward(self, model, sample, reduce=True):
        if not reduce:
            return super().forward(model, sample, reduce=False)
        net_output = model(**sample["net_input"])
        extra = net_output[1]
        if plugin_model(model) is None:  # the plugin's model: the one whose output holds each row's languages
            raise HltmtConfigError("--criterion hltmt_cross_entropy needs --arch hltmt_transformer*")
        lprobs, target = self.get_lprobs_and_target(model, net_output, sample)
        tok_loss, tok_nll = label_smoothed_nll_loss(
            lprobs, target, self.eps, ignore_index=self.padding_idx, reduce=False
        )
        bsz = sample["target"].size(0)
        row_loss = tok_loss.view(bsz, -1).sum(dim=1)
        loss, nll_loss = row_loss.sum(), tok_nll.sum()
        sample_size = bsz if self.sentence_avg else sample["ntokens"]
        log = {
            "loss": None,
            "nll_loss": nll_loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": bsz,
            "sample_size": sample_size,
        }

        if extra.get("slp_gate") is not None:
            probs = extra["slp_gate"]
            term = disparity(probs)
            # minus its minimum H^2/T (a constant: same gradient), so an even spread adds
            # nothing and the logged loss is not inflated on soft steps
            floor = probs.size(0) ** 2 / probs.size(1)
            loss = loss + self.disparity_scale * (term - floor) * sample_size
            log[DISP_SUM], log[DISP_N] = term.detach(), 1
        else:
            log[DISP_SUM], log[DISP_N] = 0.0, 0
        log["loss"] = loss.data

        # always the same keys on every worker, so --fast-stat-sync can sum them; values stay
        # tensors on the device (no host synchronisation per step) until fairseq reduces them
        lang = extra[ROWS][:, TGT]
        row_tokens = target.view(bsz, -1).ne(self.padding_idx).sum(dim=1)
        lang_loss = torch.zeros(len(self.langs), dtype=row_loss.dtype, device=lang.device).index_add_(
            0, lang, row_loss.detach()
        )
        lang_tokens = torch.bincount(lang, weights=row_tokens.double(), minlength=len(self.langs))
        for i, name in enumerate(self.langs):
            log[LANG_LOSS + name], log[LANG_TOKENS + name] = lang_loss[i], lang_tokens[i]
        if "slp_module" in extra:  # each row's entry of the router's table (a model without a pool routes nothing)
            if self.labels is None:  # once: the pool does not change during training
                self.labels = plugin_model(model).slp_router.labels
            counts = torch.bincount(extra["slp_module"], minlength=len(self.labels))
            for k, label in enumerate(self.labels):
                log[ROUTE + label] = counts[k]

        if self.report_accuracy:
            n_correct, total = self.compute_accuracy(model, net_output, sample)
            log["n_correct"], log["total"] = utils.item(n_correct.data), utils.item(total.data)
        return loss, sample_size, log

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        total = lambda key: sum(log.get(key, 0) for log in logging_outputs)  # noqa: E731
        keys = sorted(set().union(*(log.keys() for log in logging_outputs)))
        n_soft = total(DISP_N)
        if n_soft > 0:
            metrics.log_scalar("disparity", utils.item(total(DISP_SUM)) / n_soft, n_soft, round=3)
        else:
            _drop_empty_meter("disparity")  # stage all: no soft step, no "disparity=None" in progress lines
        routes = [k for k in keys if k.startswith(ROUTE)]
        rows = sum(utils.item(total(k)) for k in routes)
        for key in routes:
            if rows > 0:
                metrics.log_scalar("route_" + key[len(ROUTE) :], utils.item(total(key)) / rows, rows, round=3)
        for key in keys:
            if key.startswith(LANG_TOKENS):
                name, tokens = key[len(LANG_TOKENS) :], utils.item(total(key))
                if tokens > 0:
                    metrics.log_scalar(
                        f"loss_{name}", utils.item(total(LANG_LOSS + name)) / tokens / math.log(2), tokens, round=3
                    )


def _drop_empty_meter(name: str) -> None:
    """Remove a meter that holds no value from fairseq's active aggregators (a ``MetersDict``
    keeps its keys in a sorted ``priorities`` list too), so progress lines do not show it as None."""
    for aggregator in metrics.get_active_aggregators():
        meter = aggregator.get(name)
        if meter is not None and getattr(meter, "count", 1) == 0 and hasattr(aggregator, "priorities"):
            aggregator.priorities = [entry for entry in aggregator.priorities if entry[2] != name]
            del aggregator[name]
