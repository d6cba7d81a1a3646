"""/metrics (hltmt_plugin/serve/metrics.py): Prometheus' text format, read back line by line."""

import re

import pytest

from hltmt_plugin.serve.metrics import Histogram, Metrics

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

SAMPLE = re.compile(r'^[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? -?[0-9.e+]+$')


def samples(text):
    """{name with labels: value} of every sample line; every line a comment or a sample."""
    found = {}
    for line in text.splitlines():
        if line.startswith("# "):
            assert re.match(r"^# (HELP|TYPE) [a-z_]+ ", line), line
            continue
        assert SAMPLE.match(line), line
        name, value = line.rsplit(" ", 1)
        found[name] = float(value)
    return found


def test_a_histogram_counts_at_or_below_each_bound():
    h = Histogram((1, 5))
    for value in (0.5, 1, 3, 9):
        h.observe(value)
    assert h.counts == [2, 3] and h.count == 4 and h.sum == 13.5
    assert list(h.lines("x"))[:3] == ['x_bucket{le="1"} 2', 'x_bucket{le="5"} 3', 'x_bucket{le="+Inf"} 4']


def test_the_text_holds_every_family_and_counts():
    m = Metrics(queue_depth=lambda: 7)
    m.request("/translate", 200, 0.02)
    m.request("/translate", 200, 0.3)
    m.request("/translate", 429, 0.001)
    m.refusal("queue_full")
    m.translated(5, 1)
    m.batch(3, 12, 0.1)
    found = samples(m.text())
    assert found['hltmt_serve_requests_total{route="/translate",status="200"}'] == 2
    assert found['hltmt_serve_requests_total{route="/translate",status="429"}'] == 1
    assert found['hltmt_serve_refusals_total{reason="queue_full"}'] == 1
    assert found["hltmt_serve_sentences_total"] == 5 and found["hltmt_serve_sentence_errors_total"] == 1
    assert found["hltmt_serve_queue_sentences"] == 7
    assert found['hltmt_serve_request_seconds_bucket{le="0.025"}'] == 2
    assert found["hltmt_serve_request_seconds_count"] == 3
    assert found['hltmt_serve_batch_requests_bucket{le="2"}'] == 0
    assert found['hltmt_serve_batch_requests_bucket{le="4"}'] == 1
    assert found['hltmt_serve_batch_sentences_bucket{le="16"}'] == 1


def test_a_label_value_is_escaped():
    m = Metrics()
    m.refusal('odd"reason\\')
    assert 'reason="odd\\"reason\\\\"' in m.text()
