"""The task's stages: which directions are sampled, and the options that cannot work."""
from collections import Counter

import numpy as np
import pytest

from conftest import build
from hltmt_plugin.errors import HltmtConfigError

LOW = {"en-gu", "en-hi", "gu-en"}  # a low-resource language on either side


def sampled_directions(task, epochs=(1, 2, 3)):
    """Directions of every sentence in the training batches of some epochs."""
    task.load_dataset("train", epoch=1)
    dataset = task.datasets["train"]
    counts = Counter()
    for epoch in epochs:
        itr = task.get_batch_iterator(dataset=dataset, max_tokens=1500, max_positions=(1024, 1024), seed=1,
                                      epoch=epoch, required_batch_size_multiple=8)
        itr.next_epoch_itr(shuffle=True)
        for batch in itr.frozen_batches:
            for index in batch:
                counts[dataset.keys[dataset._get_dataset_and_index(index)[0]].split(":")[1]] += 1
    return counts, len(dataset.keys)


def test_stage_high_samples_no_low_resource_direction(data_bin):
    _, task, _ = build(data_bin, "--hlt-stage", "high", "--sampling-method", "temperature",
                       "--sampling-temperature", "5")
    counts, _ = sampled_directions(task)
    assert sum(counts.values()) > 1000  # hundreds of batches' worth of sentences
    assert set(counts) == {"en-de", "en-fr", "de-en"}, counts


def test_stage_all_samples_every_direction_with_the_temperature_shares(data_bin):
    _, task, _ = build(data_bin, "--hlt-stage", "all", "--sampling-method", "temperature",
                       "--sampling-temperature", "5")
    counts, _ = sampled_directions(task)
    sizes = {"en-de": 1500, "en-fr": 1500, "en-gu": 400, "en-hi": 800, "de-en": 1500, "gu-en": 400}
    assert set(counts) == set(sizes)
    raw = np.array([sizes[d] for d in sizes], dtype=float)
    expected = (raw / raw.sum()) ** (1 / 5)
    expected /= expected.sum()
    total = sum(counts.values())
    for direction, share in zip(sizes, expected):
        assert abs(counts[direction] / total - share) < 0.02, (direction, counts[direction] / total, share)


def test_stage_all_conflicts_with_a_one_run_schedule(data_bin):
    with pytest.raises(HltmtConfigError, match="cannot be combined with --high-stage-updates"):
        build(data_bin, "--hlt-stage", "all", "--high-stage-updates", "10")


def test_stage_high_needs_a_high_resource_direction(data_bin):
    with pytest.raises(HltmtConfigError, match="stage high has no direction to train"):
        build(data_bin, "--lang-pairs", "en-gu,gu-en,en-hi", "--hlt-stage", "high")


def test_stage_all_refuses_a_model_whose_gate_never_learned(data_bin):
    _, task, model = build(data_bin, "--hlt-stage", "all")
    with pytest.raises(HltmtConfigError, match="stage all needs the routing map learned in stage high"):
        task.begin_epoch(1, model)


def test_stage_all_fixes_the_map_from_the_gate_and_freezes_the_gate(data_bin):
    _, task, model = build(data_bin, "--hlt-stage", "all")
    model.slp.gate_steps += 1  # as if stage high had trained it
    before = model.routing_map()
    task.begin_epoch(1, model)
    assert model.slp.map_is_fixed and model.routing_map() == before
    assert not any(p.requires_grad for p in model.slp.gate.parameters())


def test_options_the_stages_or_adapters_cannot_honour_are_refused(data_bin):
    import pytest

    from hltmt_plugin.errors import HltmtConfigError

    with pytest.raises(HltmtConfigError, match="RoundRobin does not allow"):
        build(data_bin, "--high-stage-updates", "5", "--sampling-method", "RoundRobin")
    with pytest.raises(HltmtConfigError, match="use --decoder-layerdrop 0"):
        build(data_bin, "--invertible-adapters", "--enable-lang-ids", "--decoder-layerdrop", "0.1")
