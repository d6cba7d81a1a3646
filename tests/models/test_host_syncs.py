"""A training step waits for the device only where routing needs group sizes: one host
synchronisation per route plan (the SLP's; with adapters and skills one per consumer),
none in the language checks, the map, the criterion's logging or the idle-gradient rule
(issue 15). Counted on CPU by patching the tensor methods that copy a value to the host,
for calls made by the plugin's code (fairseq's own transformer makes the same few reads
with or without the plugin)."""

import contextlib
import os
import sys

import pytest
import torch

from conftest import MADX, build, make_sample, mixed_sample
from hltmt_plugin.criterions.hltmt_cross_entropy import HltmtCrossEntropyCriterion
from hltmt_plugin.pool.router import HARD

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

HOST_READS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "numpy")


@contextlib.contextmanager
def counting_host_reads():
    calls = []
    originals = {name: getattr(torch.Tensor, name) for name in HOST_READS}

    plugin = os.sep + "hltmt_plugin" + os.sep

    def counted(name):
        def read(self, *args, **kwargs):
            if plugin in sys._getframe(1).f_code.co_filename:
                calls.append(f"{name} in {os.path.basename(sys._getframe(1).f_code.co_filename)}")
            return originals[name](self, *args, **kwargs)

        return read

    for name in HOST_READS:
        setattr(torch.Tensor, name, counted(name))
    try:
        yield calls
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


def training_step_reads(task, model, sample):
    criterion = HltmtCrossEntropyCriterion(task, sentence_avg=False, label_smoothing=0.1)
    model.train()
    model.slp_router.fix_map(torch.tensor([0, 1]))
    model.slp_router.mode = HARD
    criterion(model, sample)[0].backward()  # the first training batch is checked on the host, once
    task.idle_gradients.note(model)
    task.idle_gradients.drop(model)
    model.zero_grad()
    with counting_host_reads() as calls:
        loss, _, _ = criterion(model, sample)
        loss.backward()
        task.idle_gradients.note(model)
        task.idle_gradients.drop(model)
    return calls


def test_an_hltmt_training_step_reads_the_host_once_per_route_plan(data_bin):
    _, task, model = build(data_bin)
    calls = training_step_reads(task, model, make_sample(task, ["en-de", "en-gu", "de-en"]))
    assert calls == ["tolist in routing.py"], calls  # the SLP plan's group sizes


def test_with_adapters_and_skills_one_read_per_routed_consumer(data_bin):
    _, task, model = build(data_bin, *MADX, "--skill-ffn", "--skill-attention")
    calls = training_step_reads(task, model, mixed_sample(task, ["en-de", "en-gu", "de-en"]))
    # encoder adapters, skill attention, skill FFN, decoder adapters, SLP: one plan each
    assert calls == ["tolist in routing.py"] * 5, calls
