"""Each capacity on its own on fairseq's transformer shape — the pool alone, adapters alone,
skills alone, and combinations — through real fairseq-train runs of a few updates and
fairseq-generate. Without --high-resource-langs there is no pool: the decoder top is
fairseq's own and every direction trains from the start."""

import pytest

from hltmt_plugin.compat.safe_loading import load_checkpoint
from tests.conftest import LANGS, PAIRS, PLUGIN, cli, run

BASE = [
    "--user-dir",
    PLUGIN,
    "--task",
    "hltmt_translation",
    "--arch",
    "hltmt_transformer_tiny",
    "--langs",
    LANGS,
    "--lang-pairs",
    PAIRS,
    "--encoder-langtok",
    "tgt",
    "--cpu",
]
TRAIN = [
    "--optimizer",
    "adam",
    "--lr",
    "2e-3",
    "--max-tokens",
    "1500",
    "--max-update",
    "4",
    "--seed",
    "3",
    "--no-epoch-checkpoints",
    "--log-interval",
    "1",
    "--no-progress-bar",
]
POOL = ["--high-resource-langs", "de,fr", "--slp-pool-size", "2"]
ADAPTERS = ["--shared-adapters"]
SKILLS = ["--skill-ffn", "--skill-attention", "--enable-lang-ids"]

CASES = {
    "pool": (POOL + ["--criterion", "hltmt_cross_entropy"], True),
    "adapters": (ADAPTERS + ["--criterion", "hltmt_cross_entropy"], False),
    "skills": (SKILLS + ["--criterion", "label_smoothed_cross_entropy"], False),
    "adapters+skills": (ADAPTERS + SKILLS + ["--criterion", "hltmt_cross_entropy"], False),
    "pool+adapters": (POOL + ADAPTERS + ["--criterion", "hltmt_cross_entropy", "--high-stage-updates", "2"], True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_capacity_trains_and_translates(data_bin, tmp_path, case):
    options, has_pool = CASES[case]
    save = tmp_path / "save"
    done = run([cli("fairseq-train"), data_bin, *BASE, *options, *TRAIN, "--save-dir", str(save)])
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    keys = load_checkpoint(str(save / "checkpoint_last.pt"))["model"].keys()
    assert any(k.startswith("decoder.slp.") for k in keys) == has_pool
    if not has_pool:
        assert "no HLT-MT pool" in log and "stage high" not in log, log[-3000:]
        assert "route_" not in log
        from hltmt_plugin.experiments.report import gate_heatmap

        with pytest.raises(LookupError, match="without an HLT-MT pool"):  # hltmt-report notes it, draws nothing
            gate_heatmap(str(tmp_path / "gate.png"), str(save / "checkpoint_last.pt"))
    lang_ids = ["--enable-lang-ids"] if "--enable-lang-ids" in options else []
    for src, tgt in (("en", "de"), ("de", "en"), ("en", "gu")):
        gen = run(
            [
                cli("fairseq-generate"),
                data_bin,
                *BASE,
                *lang_ids,
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
                "--batch-size",
                "16",
            ]
        )
        assert gen.returncode == 0, gen.stderr[-3000:]
        assert sum(line.startswith("H-") for line in gen.stdout.splitlines()) == 37


def build_model(data_bin, *extra):
    from fairseq import options, tasks

    args = options.parse_args_and_arch(options.get_training_parser(), [data_bin, *BASE, *extra])
    return tasks.setup_task(args).build_model(args)


def test_no_pool_is_fairseqs_own_decoder_top(data_bin):
    """Adapters alone: besides the adapters, the model's weights are a plain transformer's."""
    model = build_model(data_bin, "--shared-adapters")
    pooled = build_model(data_bin, "--shared-adapters", *POOL)
    assert model.slp is None and model.map_by_language() == {}
    assert "slp" not in model.route_of("en", "de") and "adapters" in model.route_of("en", "de")
    assert pooled.route_of("en", "gu")["slp"] == "universal"
    ours = {k for k in model.state_dict() if "adapter" not in k}
    assert ours == {
        k
        for k in pooled.state_dict()
        if "adapter" not in k and not k.startswith("decoder.slp") and k != "decoder.high_langs"
    }


def test_stage_options_without_pool_say_so(data_bin, tmp_path):
    done = run(
        [
            cli("fairseq-train"),
            data_bin,
            *BASE,
            *ADAPTERS,
            *TRAIN,
            "--hlt-stage",
            "high",
            "--criterion",
            "label_smoothed_cross_entropy",
            "--max-update",
            "1",
            "--save-dir",
            str(tmp_path),
        ]
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    assert "do nothing for a model without --high-resource-langs" in log


def test_language_specific_without_languages_is_refused(data_bin, tmp_path):
    done = run([cli("fairseq-train"), data_bin, *BASE, "--slp-language-specific", *TRAIN, "--save-dir", str(tmp_path)])
    assert done.returncode != 0
    assert "--slp-language-specific" in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
