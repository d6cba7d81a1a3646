"""The batcher (hltmt_plugin/serve/batcher.py): concurrent jobs merged into one call within the
wait, up to the budget, by key; each job its own results in order; the queue bounded; a cancelled
job dropped; a failing merged call run again job by job; stop drains the queue. The calls here are
a recording function (the batcher's contract is only ``translate(items, key) -> one result per
item``); tests/serve/test_app.py runs it over a real model."""

import asyncio
import threading
import time

import pytest

from hltmt_plugin.serve.batcher import Batcher, Job, QueueFull, Stopped, estimate_tokens

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


class Recorder:
    """A translate function that records each call and answers each item with its text reversed."""

    def __init__(self, delay=0.0, fail_on=None):
        self.calls, self.delay, self.fail_on = [], delay, fail_on
        self.started = threading.Event()

    def __call__(self, items, key):
        self.calls.append((list(items), key))
        self.started.set()
        time.sleep(self.delay)
        if self.fail_on is not None and any(text == self.fail_on for _, _, text in items):
            raise RuntimeError(f"cannot translate {self.fail_on}")
        return [f"{key}:{text[::-1]}" for _, _, text in items]


def run(coro):
    return asyncio.run(coro)


async def submit_all(batcher, requests, key=1):
    """Queue every request, then start the worker: (each job's results or error)."""
    loop = asyncio.get_running_loop()
    jobs = [batcher.submit(Job(items, key, loop)) for items in requests]
    batcher.start()
    return await asyncio.gather(*(job.future for job in jobs), return_exceptions=True)


def test_queued_jobs_are_one_call_each_result_back_in_order():
    recorder = Recorder()
    batcher = Batcher(recorder, max_wait=0.2)
    requests = [[("en", "de", f"a{i}"), ("en", "fr", f"b{i}")] for i in range(5)]

    async def go():
        loop = asyncio.get_running_loop()
        jobs = [batcher.submit(Job(items, 1, loop)) for items in requests]
        batcher.start()
        return await asyncio.gather(*(job.future for job in jobs))

    answers = run(go())
    batcher.stop(5)
    assert len(recorder.calls) == 1 and len(recorder.calls[0][0]) == 10
    assert answers == [[f"1:{i}a", f"1:{i}b"] for i in range(5)]


def test_after_a_merged_call_a_job_waits_for_others_and_a_lone_client_never_waits():
    recorder = Recorder()
    batcher = Batcher(recorder, max_wait=0.3)
    batcher.start()

    async def go():
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        alone = await batcher.submit(Job([("en", "de", "x")], 1, loop)).future
        took = time.perf_counter() - start
        batcher.merged = 2  # as after a call that merged two requests
        first = batcher.submit(Job([("en", "de", "a")], 1, loop))
        await asyncio.sleep(0.1)  # within the wait
        second = batcher.submit(Job([("en", "de", "b")], 1, loop))
        return alone, took, await first.future, await second.future

    alone, took, first, second = run(go())
    batcher.stop(5)
    assert alone == ["1:x"] and took < 0.2, took
    assert (first, second) == (["1:a"], ["1:b"]) and [len(items) for items, _ in recorder.calls] == [1, 2]


def test_batching_off_runs_each_job_alone():
    recorder = Recorder()
    batcher = Batcher(recorder, batching=False, max_wait=0.2)
    answers = run(submit_all(batcher, [[("en", "de", "xy")], [("en", "de", "zw")]]))
    batcher.stop(5)
    assert [len(items) for items, _ in recorder.calls] == [1, 1]
    assert answers == [["1:yx"], ["1:wz"]]


def test_the_budget_cuts_the_merged_call_and_keys_are_never_mixed():
    recorder = Recorder()
    text = "x" * 40  # 12 estimated tokens
    assert estimate_tokens(text) == 12
    batcher = Batcher(recorder, max_wait=0.2, batch_tokens=30)

    async def both():
        loop = asyncio.get_running_loop()
        jobs = [batcher.submit(Job([("en", "de", text)], 1, loop)) for _ in range(4)]
        jobs.append(batcher.submit(Job([("en", "de", "other")], 2, loop)))
        batcher.start()
        return await asyncio.gather(*(job.future for job in jobs))

    answers = run(both())
    batcher.stop(5)
    sizes = [(len(items), key) for items, key in recorder.calls]
    assert sorted(sizes) == [(1, 2), (2, 1), (2, 1)], sizes
    assert answers[-1] == ["2:rehto"]


def test_a_full_queue_refuses_at_once_with_a_retry_time():
    recorder = Recorder(delay=0.5)
    batcher = Batcher(recorder, max_wait=0.0, max_queue=3, batching=False)
    batcher.start()

    async def flood():
        loop = asyncio.get_running_loop()
        first = batcher.submit(Job([("en", "de", "a")], 1, loop))
        await asyncio.get_running_loop().run_in_executor(None, recorder.started.wait, 5)  # the first one runs
        kept = [batcher.submit(Job([("en", "de", "b"), ("en", "de", "c")], 1, loop))]
        start = time.perf_counter()
        with pytest.raises(QueueFull) as refused:
            batcher.submit(Job([("en", "de", "d"), ("en", "de", "e")], 1, loop))
        took = time.perf_counter() - start
        await asyncio.gather(first.future, *(j.future for j in kept))
        return refused.value, took

    error, took = run(flood())
    batcher.stop(5)
    assert took < 0.05 and 1 <= error.retry_after <= 60
    assert "queue holds 2 sentences; 2 more would pass its 3" in str(error)
    assert str(QueueFull(3, 0, 3, 2)) == "the server's queue is full (3 of 3 sentences): try again in 2 s"


def test_a_cancelled_job_is_dropped_before_it_runs():
    recorder = Recorder(delay=0.3)
    batcher = Batcher(recorder, batching=False)
    batcher.start()

    async def go():
        loop = asyncio.get_running_loop()
        first = batcher.submit(Job([("en", "de", "a")], 1, loop))
        await loop.run_in_executor(None, recorder.started.wait, 5)
        gone = batcher.submit(Job([("en", "de", "gone")], 1, loop))
        gone.cancel()
        last = batcher.submit(Job([("en", "de", "c")], 1, loop))
        return await first.future, await last.future

    assert run(go()) == (["1:a"], ["1:c"])
    batcher.stop(5)
    assert [items[0][2] for items, _ in recorder.calls] == ["a", "c"]


def test_a_failing_merged_call_fails_only_its_own_job():
    recorder = Recorder(fail_on="bad")
    batcher = Batcher(recorder, max_wait=0.2)
    answers = run(submit_all(batcher, [[("en", "de", "ok")], [("en", "de", "bad")], [("en", "de", "fine")]]))
    batcher.stop(5)
    assert answers[0] == ["1:ko"] and answers[2] == ["1:enif"]
    assert isinstance(answers[1], RuntimeError) and "cannot translate bad" in str(answers[1])


def test_stop_answers_the_queued_jobs_then_takes_none():
    recorder = Recorder(delay=0.1)
    batcher = Batcher(recorder, batching=False)
    batcher.start()

    async def go():
        loop = asyncio.get_running_loop()
        jobs = [batcher.submit(Job([("en", "de", t)], 1, loop)) for t in ("a", "b", "c")]
        stopping = loop.run_in_executor(None, batcher.stop, 10)
        await asyncio.sleep(0.01)
        with pytest.raises(Stopped):
            batcher.submit(Job([("en", "de", "late")], 1, loop))
        await stopping
        return await asyncio.gather(*(j.future for j in jobs))

    assert run(go()) == [["1:a"], ["1:b"], ["1:c"]]
    assert not batcher.thread.is_alive()


def test_bad_settings_are_refused():
    for kwargs in ({"max_wait": -1}, {"batch_tokens": 0}, {"max_queue": 0}):
        with pytest.raises(ValueError):
            Batcher(Recorder(), **kwargs)
