"""``hltmt_translation`` is a superset of ``translation_multi_simple_epoch``: with fairseq's plain
``transformer`` it trains, validates and generates as its parent does. Scenarios modelled on
fairseq's own multilingual tests (``tests/test_binaries.py``): temperature and concat sampling,
``--encoder-langtok src`` with ``--decoder-langtok``, ``--lang-dict`` instead of ``--langs``,
no language tokens at all."""

import pytest

from conftest import PLUGIN, cli, run

COMMON = ["--user-dir", PLUGIN, "--task", "hltmt_translation", "--cpu", "--num-workers", "0"]
PAIRS = "en-de,de-en,en-gu"


def train(data_bin, save, *extra):
    return run(
        [
            cli("fairseq-train"),
            data_bin,
            *COMMON,
            "--arch",
            "transformer_hltmt_tiny",
            "--lang-pairs",
            PAIRS,
            "--criterion",
            "label_smoothed_cross_entropy",
            "--optimizer",
            "adam",
            "--lr",
            "1e-3",
            "--max-tokens",
            "1200",
            "--max-update",
            "3",
            "--save-dir",
            str(save),
            "--no-epoch-checkpoints",
            "--log-interval",
            "1",
            "--seed",
            "2",
            *extra,
        ]
    )


def generate(data_bin, save, src, tgt, *extra):
    return run(
        [
            cli("fairseq-generate"),
            data_bin,
            *COMMON,
            "--lang-pairs",
            PAIRS,
            "-s",
            src,
            "-t",
            tgt,
            "--path",
            str(save / "checkpoint_last.pt"),
            "--gen-subset",
            "test",
            "--beam",
            "2",
            "--max-len-b",
            "5",
            "--max-tokens",
            "2000",
            *extra,
        ]
    )


SCENARIOS = {
    "temperature, src langtok + decoder langtok": (
        [
            "--langs",
            "en,de,fr,gu,hi",
            "--sampling-method",
            "temperature",
            "--sampling-temperature",
            "1.5",
            "--encoder-langtok",
            "src",
            "--decoder-langtok",
        ],
        ["--langs", "en,de,fr,gu,hi", "--encoder-langtok", "src", "--decoder-langtok"],
    ),
    "concat sampling, tgt langtok, stage options given": (
        ["--langs", "en,de,fr,gu,hi", "--sampling-method", "concat", "--encoder-langtok", "tgt", "--hlt-stage", "high"],
        ["--langs", "en,de,fr,gu,hi", "--encoder-langtok", "tgt"],
    ),
    "lang dict, no language tokens": (["--lang-dict", "LANG_DICT"], ["--lang-dict", "LANG_DICT"]),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_plain_transformer_trains_validates_and_generates_as_under_the_parent_task(data_bin, tmp_path, name):
    lang_dict = tmp_path / "langs.txt"
    lang_dict.write_text("en\nde\nfr\ngu\nhi\n")
    train_extra, gen_extra = ([str(lang_dict) if a == "LANG_DICT" else a for a in args] for args in SCENARIOS[name])
    done = train(data_bin, tmp_path, *train_extra)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    assert "num_updates 3" in log and "done training" in log, log[-2000:]
    assert 'begin validation on "valid" subset' in log  # validated at the end
    if "--hlt-stage" in train_extra:
        assert "--hlt-stage / --high-stage-updates do nothing for a model without --high-resource-langs" in log
    assert "HLT-MT stage" not in log  # every direction trained: no stage filtering
    for src, tgt in (("en", "gu"), ("de", "en")):
        out = generate(data_bin, tmp_path, src, tgt, *gen_extra)
        if "--encoder-langtok" not in train_extra and "--decoder-langtok" not in train_extra:
            # nothing names the target: a model trained into several cannot be told which to produce
            assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr[-3000:]
            assert "trained without a token naming the target language" in out.stderr, out.stderr[-3000:]
            continue
        assert out.returncode == 0, out.stderr[-3000:]
        assert out.stdout.count("\nH-") + out.stdout.startswith("H-") == 37, out.stdout[-1000:]
