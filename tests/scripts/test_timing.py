"""scripts/timing.py: the clock, spans, memory and child-process measures every benchmark uses."""

import argparse
import os
import sys
import time

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))

import timing  # noqa: E402

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


def busy(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_cpu_clock_leaves_out_sleep_and_wall_clock_counts_it():
    cpu, wall = timing.Clock("cpu"), timing.Clock("wall")
    assert cpu.seconds(lambda: time.sleep(0.2))[0] < 0.05
    assert wall.seconds(lambda: time.sleep(0.2))[0] >= 0.19
    assert cpu.seconds(lambda: busy(0.1))[0] >= 0.09
    assert timing.Clock("cpu").seconds(lambda: 7)[1] == 7
    with pytest.raises(ValueError, match="cpu or wall"):
        timing.Clock("gpu")


def test_per_call_times_only_the_calls_after_the_warm_up():
    calls = []

    def fn():
        calls.append(1)
        busy(0.02 if len(calls) > 2 else 0.3)  # the two warm-up calls are slow

    seconds = timing.per_call(fn, reps=3, clock=timing.Clock("cpu"), warmup=2)
    assert len(calls) == 5 and 0.015 < seconds < 0.1


def test_alternating_turns_the_order_round_and_times_each_step_on_its_own_batches():
    order = []

    def step(name, cost):
        def run(batch, update):
            order.append((name, batch, update))
            busy(cost)

        return run

    spent = timing.alternating(
        {"a": step("a", 0.001), "b": step("b", 0.03)},
        {"a": ["a0", "a1", "a2"], "b": ["b0", "b1", "b2"]},
        timing.Clock("cpu"),
        update0=10,
    )
    assert order == [
        ("a", "a0", 10),
        ("b", "b0", 10),
        ("b", "b1", 11),
        ("a", "a1", 11),
        ("a", "a2", 12),
        ("b", "b2", 12),
    ]
    assert spent["b"] > 0.085 and spent["a"] < spent["b"] / 5


def test_spans_add_up_wall_and_cpu_apart():
    a = timing.stamp()
    busy(0.05)
    time.sleep(0.1)
    s = timing.span(a, timing.stamp())
    assert s["wall"] >= 0.14 and 0.04 < s["cpu"] < s["wall"]
    assert timing.add_spans(s, {"wall": 1.0, "cpu": 2.0}) == {"wall": s["wall"] + 1.0, "cpu": s["cpu"] + 2.0}


def test_rss_grows_with_what_the_process_holds():
    before, _ = timing.rss_mib()
    block = bytearray(64 * 2**20)
    block[::4096] = b"x" * len(block[::4096])  # touch every page
    after, peak = timing.rss_mib()
    assert after - before > 50 and peak >= after
    del block


def test_run_measured_gives_the_exit_code_output_and_peak_memory_of_the_child(tmp_path):
    stdin = tmp_path / "in.txt"
    stdin.write_text("hello\n")
    code = (
        "import sys; b = bytearray(80 * 2 ** 20); b[::4096] = b'x' * len(b[::4096]); "
        "sys.stdout.write(sys.stdin.read().upper()); sys.exit(3)"
    )
    done = timing.run_measured([sys.executable, "-c", code], stdin_path=str(stdin))
    assert done.code == 3 and done.out == "HELLO\n" and done.peak_mib > 80 and done.wall_s > 0 and done.cpu_s > 0


def test_run_measured_gives_the_commands_own_peak_not_the_measuring_processs():
    """Linux keeps a process's peak memory across fork and exec: a command started straight from
    a process holding 300 MiB would report those 300 MiB as its own peak."""
    block = bytearray(300 * 2**20)
    block[::4096] = b"x" * len(block[::4096])  # touch every page
    done = timing.run_measured([sys.executable, "-c", "import sys; sys.stderr.write('said')"])
    assert timing.rss_mib()[0] > 300 and done.code == 0 and done.err == "said"
    assert 1 < done.peak_mib < 100, done.peak_mib
    del block
    missing = timing.run_measured(["/nonexistent/command"])
    assert missing.code == 1 and "FileNotFoundError" in missing.err  # the launcher could not start it


def test_median_leaves_out_what_was_not_measured():
    assert timing.median([3.0, None, 1.0, 2.0]) == 2.0
    assert timing.median([None, None]) is None


def test_a_child_gets_its_threads_and_no_warnings(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert timing.child_env()["OMP_NUM_THREADS"] == "3" and timing.child_env()["PYTHONWARNINGS"] == "ignore"
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert timing.child_env()["OMP_NUM_THREADS"] == "1" and "MKL_NUM_THREADS" not in timing.child_env()
    two = timing.child_env(2, PYTHONPATH="/x")
    assert (two["OMP_NUM_THREADS"], two["MKL_NUM_THREADS"], two["PYTHONPATH"]) == ("2", "2", "/x")


def test_timed_stamps_every_call_and_runs_after_outside_the_span():
    class Owner:
        def work(self, seconds):
            busy(seconds)
            return seconds

    record, seen = {}, []
    timing.timed(Owner, "work", record, "work", after=lambda args, result: (busy(0.05), seen.append(result)))
    assert Owner().work(0.02) == 0.02 and Owner().work(0.0) == 0.0
    assert seen == [0.02, 0.0] and len(record["work"]) == 2
    spans = [timing.span(a, b) for a, b in record["work"]]
    assert 0.02 <= spans[0]["cpu"] < 0.05 and spans[1]["cpu"] < 0.03  # after's 0.05 s left out


def test_a_markdown_table_is_its_header_a_rule_and_a_line_per_row():
    assert timing.markdown_row(["a", 1, None, ""]) == "| a | 1 | None |  |"
    assert timing.markdown_table(["x", "y"], [[1, "2"], ["", "b"]]).split("\n") == [
        "| x | y |",
        "|---|---|",
        "| 1 | 2 |",
        "|  | b |",
    ]
    assert timing.markdown_table(["only"], []) == "| only |\n|---|"


CHILD_SCRIPT = """import sys
sys.path.insert(0, {scripts!r})
import timing
timing.child_main(sys.argv[1:], {{"double": lambda spec: [2 * x for x in spec["xs"]], "fail": lambda spec: 1 / 0}})
"""


def test_a_child_gets_its_spec_on_stdin_and_gives_its_result_on_its_last_line(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD_SCRIPT.format(scripts=os.path.join(ROOT, "scripts")))
    assert timing.run_child(str(script), "double", {"xs": [1, 2]}) == [2, 4]
    with pytest.raises(timing.BenchError, match=r"^the failing measure failed \(exit 1\):\n(.|\n)*ZeroDivisionError"):
        timing.run_child(str(script), "fail", {}, what="the failing measure")
    with pytest.raises(timing.BenchError, match=r"nothing failed \(exit 0\)"):  # no --child KIND it knows: no result
        timing.run_child(str(script), "other", {}, what="nothing")


def test_a_result_that_is_not_json_is_one_line_from_the_reader(tmp_path):
    from hltmt_plugin.errors import HltmtInputError

    script = tmp_path / "child.py"
    script.write_text("print('{\"half\": ')\n")
    with pytest.raises(HltmtInputError, match=r"^the result of odd is not valid JSON"):
        timing.run_child(str(script), "odd", {})


def test_below_names_the_first_option_under_its_bound():
    args = argparse.Namespace(rounds=3, batches=0, reps=-1)
    assert timing.below(args, ("rounds", "batches", "reps")) == "--batches must be >= 1, got 0"
    assert timing.below(args, ("rounds", "reps"), low=-1) is None
