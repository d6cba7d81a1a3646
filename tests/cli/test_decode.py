"""hltmt_plugin/cli/decode.py: decoding many directions by worker processes (the main job, the
study and the GPU run use it): the jobs file, the split of the jobs among workers, and the one
line a worker ends with when it cannot start."""

import pytest

import hltmt_plugin.cli.decode as decode
from conftest import LANGS, PAIRS, PLUGIN
from hltmt_plugin.errors import HltmtError


@pytest.mark.fast  # the fast tier (tests/tiers.py)
def test_the_jobs_file_is_read_and_a_malformed_line_is_one_error(tmp_path):
    good = tmp_path / "jobs.tsv"
    good.write_text("en-de\tck.pt\ten\tde\tout/en-de.gen\n\nen-fr\tck.pt\ten\tfr\tout/en-fr.gen\n", encoding="utf-8")
    assert decode.read_jobs(str(good)) == [
        ["en-de", "ck.pt", "en", "de", "out/en-de.gen"],
        ["en-fr", "ck.pt", "en", "fr", "out/en-fr.gen"],
    ]
    bad = tmp_path / "bad.tsv"
    bad.write_text("en-de\tck.pt\ten\tde\tout/en-de.gen\nen-fr\tck.pt\n", encoding="utf-8")
    with pytest.raises(decode.DecodeFailed, match="bad.tsv line 2: expected 5 tab-separated fields, got 2"):
        decode.read_jobs(str(bad))
    assert issubclass(decode.DecodeFailed, HltmtError)


@pytest.mark.fast  # the fast tier (tests/tiers.py)
def test_jobs_are_split_longest_first_into_balanced_groups():
    jobs = ["a", "b", "c", "d", "e"]
    groups = decode.split_balanced(jobs, [100, 1, 60, 50, 2], 2)
    assert sorted(sum(groups, [])) == jobs
    assert groups == [["a", "e", "b"], ["c", "d"]]  # loads 104 and 112
    assert decode.split_balanced(jobs, [1] * 5, 8) == [[j] for j in ["a", "b", "c", "d", "e"]]
    assert decode.split_balanced([], [], 3) == []


@pytest.mark.fast  # the fast tier (tests/tiers.py)
def test_a_worker_without_its_options_or_with_a_bad_jobs_file_ends_in_one_line(tmp_path, capsys):
    assert decode.main(["--jobs", "x.tsv"]) == 2
    assert capsys.readouterr().err.startswith("hltmt-decode: error: usage:")
    bad = tmp_path / "bad.tsv"
    bad.write_text("only one field\n", encoding="utf-8")
    assert decode.main(["--jobs", str(bad), "--", "data"]) == 1
    assert capsys.readouterr().out == f"hltmt-decode: error: {bad} line 1: expected 5 tab-separated fields, got 1\n"
    with pytest.raises(SystemExit) as stop:  # a missing input: refused at parsing (paths.missing)
        decode.main(["--jobs", str(tmp_path / "missing.tsv"), "--", "data"])
    assert stop.value.code == 2 and "missing.tsv: no such file" in capsys.readouterr().err


def test_each_jobs_log_goes_to_the_workers_log_and_each_output_holds_only_its_translations(data_bin, trained, tmp_path):
    """fairseq-generate's ``main`` binds the root logger to the first job's output file when
    nothing has bound it (``logging.basicConfig``): the worker binds it to its log first, so that
    every job logs there and each ``.gen`` holds fairseq-generate's lines only."""
    common = [data_bin, "--user-dir", PLUGIN, "--task", "hltmt_translation", "--langs", LANGS]
    common += ["--lang-pairs", PAIRS, "--encoder-langtok", "tgt", "--cpu", "--gen-subset", "test", "--beam", "1"]
    jobs = [[f"{s}-{t}", trained[0], s, t, str(tmp_path / f"{s}-{t}.gen")] for s, t in (("en", "de"), ("en", "fr"))]
    decode.decode_all(jobs, common, data_bin, 1, str(tmp_path / "logs"), echo=None)
    for *_, out in jobs:
        with open(out, encoding="utf-8") as f:
            lines = f.read().splitlines()
        assert lines and all(
            line[:2] in ("S-", "T-", "H-", "D-", "P-") or line.startswith("Generate ") for line in lines
        )
    with open(tmp_path / "logs" / "decode_worker0.log", encoding="utf-8") as f:
        log = f.read()
    assert log.count("| fairseq_cli.generate | Translated ") == len(jobs), log[-3000:]
