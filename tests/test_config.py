"""Numeric options bounded where their range is finite (hltmt_plugin/config.py): nan and inf
refused by name, a module larger than memory refused before anything is allocated; through
fairseq-train, and in-process."""

from argparse import Namespace

import pytest

from conftest import ONE_UPDATE, assert_one_error_line, cli, run, train_args


def test_check_finite_names_the_option():
    from hltmt_plugin.config import check_finite
    from hltmt_plugin.errors import HltmtConfigError

    check_finite(Namespace(lr=[0.001], label_smoothing=0.1, name="x"))
    with pytest.raises(HltmtConfigError, match=r"--disparity-weight nan: give a finite number"):
        check_finite(Namespace(disparity_weight=float("nan")))
    with pytest.raises(HltmtConfigError, match=r"--lr \[inf\]: give a finite number"):
        check_finite(Namespace(lr=[float("inf")]))


def test_check_allocation_refuses_what_memory_cannot_hold():
    from hltmt_plugin.config import check_allocation, physical_memory
    from hltmt_plugin.errors import HltmtConfigError

    check_allocation("--adapter-dim", 64, 2 * 128 * 64)
    if not physical_memory():
        pytest.skip("this system does not say how much memory it has")
    with pytest.raises(HltmtConfigError, match=r"--adapter-dim 100000000 asks for 25,600,000,000 parameters"):
        check_allocation("--adapter-dim", 100000000, 2 * 128 * 100000000)


@pytest.mark.parametrize(
    "extra, said",
    [
        (["--criterion", "hltmt_cross_entropy", "--disparity-weight", "nan"], "--disparity-weight nan: give a finite"),
        (
            [
                "--sampling-method",
                "temperature",
                "--sampling-temperature-epochs",
                "3",
                "--sampling-temperature-start",
                "inf",
            ],
            "--sampling-temperature-start inf: give a finite number",
        ),
        (["--slp-hidden-dim", "100000000"], "--slp-hidden-dim 100000000 asks for"),
        (
            ["--language-adapters", "--enable-lang-ids", "--adapter-dim", "100000000"],
            "--adapter-dim 100000000 asks for",
        ),
    ],
)
def test_fairseq_train_refuses_unbounded_numbers_in_one_line(data_bin, tmp_path, extra, said):
    done = run([cli("fairseq-train"), *train_args(data_bin, *ONE_UPDATE, "--save-dir", str(tmp_path / "s"), *extra)])
    assert_one_error_line(done, said)
