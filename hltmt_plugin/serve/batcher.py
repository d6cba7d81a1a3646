"""Batching across requests: each request's sentences are a :class:`Job` in one bounded queue; one
worker thread takes the jobs queued, up to a token budget (``batch_tokens``), runs them as one call
of the translator's ``translate_batch`` (every direction mixed: the engine groups them as it does
for one caller) and hands each job its own results, in order. The jobs that arrive while a call
runs wait for the next one; when the last call merged several requests (clients are sending at
once), the next waits up to ``max_wait`` after its first job for more to join. A lone client never
waits: its call starts as its request arrives.

- The queue holds at most ``max_queue`` sentences: a job beyond it is refused at once
  (:class:`QueueFull`, with the seconds after which to try again), never queued.
- A job cancelled before the worker takes it (its client gone, its time up) is dropped from the
  queue; one cancelled while its batch runs has its results dropped: the others of the batch get
  theirs.
- A merged call that raises is run again job by job, so that one job's failure is its own.
- Jobs are merged only with jobs of the same ``key`` (the options a call shares: ``nbest``).
- :meth:`Batcher.stop` takes no more jobs, lets the worker finish those queued and ends it.

The budget counts each sentence's tokens as estimated before tokenizing (:func:`estimate_tokens`);
the translator still cuts a call into its own ``max_tokens`` batches. With ``batching`` off each
job is a call of its own (the same queue, one request at a time)."""

import asyncio
import math
import threading
import time
from collections import deque
from typing import Callable, List, Optional, Sequence, Tuple


def estimate_tokens(text) -> int:
    """A sentence's source tokens as estimated without tokenizing: one per 4 bytes of UTF-8
    (sentencepiece's pieces of the models here average 3 to 5), plus the language token and the
    end of sentence."""
    return (len(text.encode("utf-8", "surrogatepass")) if isinstance(text, str) else 0) // 4 + 2


class QueueFull(Exception):
    """The queue holds ``queued`` sentences: a job of ``size`` more would pass ``limit``;
    ``retry_after``: whole seconds after which it may fit."""

    def __init__(self, queued: int, size: int, limit: int, retry_after: int):
        what = (
            f"is full ({queued} of {limit} sentences)"
            if queued >= limit
            else f"holds {queued} sentences; {size} more would pass its {limit}"
        )
        super().__init__(f"the server's queue {what}: try again in {retry_after} s")
        self.retry_after = retry_after


class Stopped(Exception):
    """The server is stopping: it takes no new job."""


class Job:
    """One request's sentences, ``(src, tgt, text)`` items, and the options its call shares
    (``key``); the results arrive in ``future`` (a list, one per item, in order), set on the event
    loop that made the job."""

    def __init__(self, items: Sequence[Tuple[str, str, str]], key, loop: asyncio.AbstractEventLoop):
        self.items, self.key, self.loop = list(items), key, loop
        self.tokens = sum(estimate_tokens(item[2]) for item in self.items)
        self.future: asyncio.Future = loop.create_future()
        self.queued_at = time.monotonic()
        self.cancelled = False

    def cancel(self) -> None:
        """The job's answer is no longer wanted (its client is gone, its time is up)."""
        self.cancelled = True
        if not self.future.done():
            self.future.cancel()

    def deliver(self, results=None, error: Optional[BaseException] = None) -> None:
        """Hand the job its results (or ``error``) on its event loop (from the worker thread)."""

        def settle():
            if self.future.done():
                return
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(results)

        try:
            self.loop.call_soon_threadsafe(settle)
        except RuntimeError:  # the loop is closed: nobody waits for this job any more
            pass


class Batcher:
    """The queue and its worker over ``translate(items, key) -> results`` (one result per item,
    in order). ``on_batch(jobs, sentences, seconds)`` is told of each call run (for the metrics)."""

    def __init__(
        self,
        translate: Callable[[List[Tuple[str, str, str]], object], list],
        *,
        batching: bool = True,
        max_wait: float = 0.01,
        batch_tokens: int = 4000,
        max_queue: int = 1024,
        on_batch: Optional[Callable[[int, int, float], None]] = None,
    ):
        if max_wait < 0 or batch_tokens < 1 or max_queue < 1:
            raise ValueError("max_wait must be at least 0, batch_tokens and max_queue at least 1")
        self.translate, self.batching = translate, batching
        self.max_wait, self.batch_tokens, self.max_queue = max_wait, batch_tokens, max_queue
        self.on_batch = on_batch
        self.queue: deque = deque()
        self.queued = 0  # sentences in the queue
        self.running = 0  # sentences of the call running now
        self.rate = 0.0  # sentences per second of the calls so far (a moving average)
        self.merged = 0  # requests in the last call
        self.cond = threading.Condition()
        self.stopping = False
        self.thread: Optional[threading.Thread] = None

    # ---- the callers' side (the event loop) --------------------------------------------------
    def start(self) -> None:
        self.thread = threading.Thread(target=self._work, name="hltmt-serve-batcher", daemon=True)
        self.thread.start()

    def submit(self, job: Job) -> Job:
        """Queue ``job``; :class:`QueueFull` when it would pass the bound, :class:`Stopped` while stopping."""
        with self.cond:
            if self.stopping:
                raise Stopped("the server is stopping: it takes no new request")
            if self.queued and self.queued + len(job.items) > self.max_queue:
                raise self.full(len(job.items))
            self.queue.append(job)
            self.queued += len(job.items)
            self.cond.notify_all()
        return job

    def full(self, size: int) -> QueueFull:
        """The refusal of a job of ``size`` sentences by the queue as it is."""
        return QueueFull(self.queued, size, self.max_queue, self.retry_after())

    def retry_after(self) -> int:
        """Seconds until the queue has likely drained, from the recent rate: 1 to 60."""
        if self.rate <= 0:
            return 1
        return max(1, min(60, math.ceil((self.queued + self.running) / self.rate)))

    def depth(self) -> int:
        """Sentences waiting in the queue."""
        return self.queued

    def stop(self, timeout: Optional[float] = None) -> None:
        """Take no new job, let the worker finish the queued ones, and wait for it (``timeout``)."""
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        if self.thread is not None:
            self.thread.join(timeout)

    # ---- the worker --------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            jobs = self._take()
            if jobs is None:
                return
            if jobs:
                self._run(jobs)

    def _take(self) -> Optional[List[Job]]:
        """The next jobs to run together ([] when every queued job was cancelled); None once
        stopping with an empty queue."""
        with self.cond:
            while not self.queue:
                if self.stopping:
                    return None
                self.cond.wait()
            if self.batching and self.merged > 1:  # requests have been arriving together: let them gather
                self._gather()
            jobs, tokens, key = [], 0, self.queue[0].key
            for job in list(self.queue):
                if job.key != key:
                    continue
                if jobs and (not self.batching or tokens + job.tokens > self.batch_tokens):
                    break
                self.queue.remove(job)
                self.queued -= len(job.items)
                if not job.cancelled:
                    jobs.append(job)
                    tokens += job.tokens
            self.running = sum(len(job.items) for job in jobs)
            self.merged = len(jobs)
            return jobs

    def _gather(self) -> None:
        """Wait (holding the condition) until the first job has waited ``max_wait`` or the jobs of
        its key fill the budget."""
        first = self.queue[0]
        deadline = first.queued_at + self.max_wait
        while not self.stopping:
            left = deadline - time.monotonic()
            tokens = sum(job.tokens for job in self.queue if job.key == first.key and not job.cancelled)
            if left <= 0 or tokens >= self.batch_tokens:
                return
            self.cond.wait(left)

    def _run(self, jobs: List[Job]) -> None:
        items = [item for job in jobs for item in job.items]
        start = time.perf_counter()
        try:
            results = self.translate(items, jobs[0].key)
        except Exception as error:  # noqa: BLE001 (a merged call's failure: each job alone then, its own answer)
            if len(jobs) > 1:
                for job in jobs:
                    self._run([job])
                return
            jobs[0].deliver(error=error)
            return
        finally:
            self.running = 0
        seconds = time.perf_counter() - start
        if seconds > 0:
            rate = len(items) / seconds
            self.rate = rate if self.rate <= 0 else 0.8 * self.rate + 0.2 * rate
        if self.on_batch is not None:
            self.on_batch(len(jobs), len(items), seconds)
        at = 0
        for job in jobs:
            job.deliver(results[at : at + len(job.items)])
            at += len(job.items)
