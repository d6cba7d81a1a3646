"""hltmt_plugin/cli/train_language_adapter.py (hltmt-train-language-adapter): its one-line
errors before any training and the model it trains. The training itself (MLM loss, the file it
writes, zero-shot translation after import) is tested in tests/adapters/test_mlm.py."""

import pytest

import hltmt_plugin.cli.train_language_adapter as tla
from hltmt_plugin.errors import HltmtInputError


def missing_dictionary(*args, **kwargs):
    raise FileNotFoundError(2, "No such file or directory", "data/dict.en.txt")


def argv(tmp_path, path=None):
    text, spm = tmp_path / "mono.gu", tmp_path / "spm.model"
    text.write_text("a line\n", encoding="utf-8")
    spm.write_bytes(b"")
    if path is None:  # a checkpoint that is there (not one to load: the checks come first)
        path = str(tmp_path / "ck.pt")
        open(path, "wb").close()
    return ["--path", path, "--lang", "gu", "--text", str(text), "--spm", str(spm), "--out", str(tmp_path / "gu.pt")]


@pytest.mark.fast
@pytest.mark.parametrize(
    "extra, message",
    [
        (["--steps", "0"], "--steps, --batch-size and --log-interval must be positive"),
        (["--mask-prob", "1.5"], "--mask-prob 1.5 is not a share of the tokens (between 0 and 1)"),
    ],
)
def test_bad_options_are_one_line(extra, message, tmp_path, capsys):
    assert tla.main([*argv(tmp_path), *extra]) == 1
    assert capsys.readouterr().err == f"hltmt-train-language-adapter: error: {message}\n"


@pytest.mark.fast
def test_a_missing_checkpoint_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:  # refused at parsing (paths.missing)
        tla.main(argv(tmp_path, str(tmp_path / "missing.pt")))
    err = capsys.readouterr().err
    assert stop.value.code == 2 and f"argument --path: {tmp_path / 'missing.pt'}: no such file" in err, err


def test_the_model_is_rebuilt_in_eval_mode_or_refused_in_one_line(trained, monkeypatch):
    assert not tla.load_model(trained[0]).training
    from fairseq import checkpoint_utils

    monkeypatch.setattr(checkpoint_utils, "load_model_ensemble_and_task", missing_dictionary)
    with pytest.raises(HltmtInputError, match=rf"^cannot rebuild the model of {trained[0]}: .*give --data DIR"):
        tla.load_model(trained[0], None)
