"""What ``/metrics`` shows, in Prometheus' text format (version 0.0.4): requests by route and
status, refusals by reason, sentences translated, the queue's depth, the sizes of the batches run
and the requests' latency (histograms). Kept in memory, updated from the event loop and the
batcher's worker (a lock)."""

import threading
from typing import Callable, Dict, Iterable, List, Sequence, Tuple

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)  # seconds
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)  # sentences


class Histogram:
    """Counts of observations at or below each bucket's bound, their sum and count."""

    def __init__(self, buckets: Sequence[float]):
        self.buckets = tuple(buckets)
        self.counts = [0] * len(self.buckets)
        self.sum, self.count = 0.0, 0

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str) -> Iterable[str]:
        for bound, count in zip(self.buckets, self.counts):
            yield f'{name}_bucket{{le="{bound:g}"}} {count}'
        yield f'{name}_bucket{{le="+Inf"}} {self.count}'
        yield f"{name}_sum {self.sum:.6f}"
        yield f"{name}_count {self.count}"


def _labels(pairs: Tuple[Tuple[str, str], ...]) -> str:
    def escaped(value: str) -> str:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{escaped(v)}"' for k, v in pairs) + "}"


class Metrics:
    """The server's counters; :meth:`text` renders them. ``queue_depth()`` and ``in_flight()``
    are read when rendered."""

    def __init__(self, queue_depth: Callable[[], int] = lambda: 0):
        self.lock = threading.Lock()
        self.queue_depth = queue_depth
        self.requests: Dict[Tuple[Tuple[str, str], ...], int] = {}
        self.refusals: Dict[str, int] = {}
        self.sentences = 0
        self.sentence_errors = 0
        self.in_flight = 0
        self.latency = Histogram(LATENCY_BUCKETS)
        self.batch_sentences = Histogram(BATCH_BUCKETS)
        self.batch_requests = Histogram(BATCH_BUCKETS)

    def request(self, route: str, status: int, seconds: float) -> None:
        """A request answered (``route``: its path; ``status``: the HTTP status) in ``seconds``."""
        with self.lock:
            key = (("route", route), ("status", str(status)))
            self.requests[key] = self.requests.get(key, 0) + 1
            self.latency.observe(seconds)

    def refusal(self, reason: str) -> None:
        """A request refused whole: ``reason`` one of bad_request, too_large, queue_full, timeout, stopping..."""
        with self.lock:
            self.refusals[reason] = self.refusals.get(reason, 0) + 1

    def translated(self, done: int, failed: int) -> None:
        """Sentences answered: ``done`` translated, ``failed`` refused one by one (their one line)."""
        with self.lock:
            self.sentences += done
            self.sentence_errors += failed

    def batch(self, jobs: int, sentences: int, seconds: float) -> None:
        """One ``translate_batch`` call: ``jobs`` requests merged, ``sentences`` in all."""
        with self.lock:
            self.batch_requests.observe(jobs)
            self.batch_sentences.observe(sentences)

    def text(self) -> str:
        """Every metric, Prometheus' text format."""
        with self.lock:
            out: List[str] = []
            out += _family("hltmt_serve_requests_total", "counter", "HTTP requests answered, by route and status")
            out += [f"hltmt_serve_requests_total{_labels(k)} {v}" for k, v in sorted(self.requests.items())]
            out += _family("hltmt_serve_refusals_total", "counter", "requests refused whole, by reason")
            out += [
                f"hltmt_serve_refusals_total{_labels((('reason', r),))} {v}" for r, v in sorted(self.refusals.items())
            ]
            out += _family("hltmt_serve_sentences_total", "counter", "sentences translated")
            out.append(f"hltmt_serve_sentences_total {self.sentences}")
            out += _family("hltmt_serve_sentence_errors_total", "counter", "sentences refused one by one")
            out.append(f"hltmt_serve_sentence_errors_total {self.sentence_errors}")
            out += _family("hltmt_serve_queue_sentences", "gauge", "sentences waiting in the queue")
            out.append(f"hltmt_serve_queue_sentences {self.queue_depth()}")
            out += _family("hltmt_serve_in_flight_requests", "gauge", "requests being answered")
            out.append(f"hltmt_serve_in_flight_requests {self.in_flight}")
            for name, help_text, histogram in (
                ("hltmt_serve_request_seconds", "time from a request's arrival to its answer", self.latency),
                ("hltmt_serve_batch_sentences", "sentences of each translate_batch call", self.batch_sentences),
                ("hltmt_serve_batch_requests", "requests merged into each translate_batch call", self.batch_requests),
            ):
                out += _family(name, "histogram", help_text)
                out += list(histogram.lines(name))
            return "\n".join(out) + "\n"


def _family(name: str, kind: str, help_text: str) -> List[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
