"""hltmt_plugin/cli/adapters.py (hltmt-adapters): its checks before any work and the model it
rebuilds. The export / import round trip and the checks on adapter files are in
tests/adapters/test_files.py."""

import pytest

import hltmt_plugin.cli.adapters as adapters
from hltmt_plugin.errors import HltmtInputError


def missing_dictionary(*args, **kwargs):
    raise FileNotFoundError(2, "No such file or directory", "data/dict.en.txt")


def test_an_output_that_is_a_folder_is_refused_before_any_work(tmp_path, capsys):
    (tmp_path / "model.pt").write_bytes(b"")  # there, but never read
    with pytest.raises(SystemExit) as stop:  # at parsing, before the checkpoint is read
        adapters.main(["export", "--path", str(tmp_path / "model.pt"), "--lang", "de", "--out", str(tmp_path)])
    assert stop.value.code == 2 and f"argument --out: {tmp_path}: it is a folder" in capsys.readouterr().err


def test_the_model_is_rebuilt_in_eval_mode_or_refused_in_one_line(trained, data_bin, monkeypatch):
    model = adapters.load(trained[0], data_bin)
    assert not model.training
    from fairseq import checkpoint_utils

    monkeypatch.setattr(checkpoint_utils, "load_model_ensemble_and_task", missing_dictionary)
    with pytest.raises(HltmtInputError, match=rf"^cannot rebuild the model of {trained[0]}: .*give --data DIR"):
        adapters.load(trained[0], data_bin)


def test_add_language_takes_a_checkpoint_a_language_and_an_output_and_checks_them_at_parsing(tmp_path, capsys):
    (tmp_path / "b.pt").write_bytes(b"")  # (an input is checked at parsing too)
    args = adapters.build_parser().parse_args(
        ["add-language", "--path", str(tmp_path / "b.pt"), "--lang", "gu", "--out", str(tmp_path / "o.pt")]
    )
    assert (args.command, args.lang, args.data) == ("add-language", "gu", None)
    with pytest.raises(SystemExit) as stop:
        adapters.main(["add-language", "--path", str(tmp_path / "b.pt"), "--lang", "gu", "--out", str(tmp_path)])
    assert stop.value.code == 2 and f"argument --out: {tmp_path}: it is a folder" in capsys.readouterr().err
