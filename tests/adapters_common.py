"""fairseq-train of the plugin's tiny model on the session's data, for the adapter runs of
tests/adapters/test_files.py and tests/test_peft.py (the caller names the pairs and the
adapters)."""

from conftest import LANGS, PLUGIN, cli, run

BASE_PAIRS = "en-de,en-fr,en-gu,de-en,gu-en"  # no hi: hi is added later


def train(data_bin, save, *extra):
    return run(
        [
            cli("fairseq-train"),
            data_bin,
            "--user-dir",
            PLUGIN,
            "--task",
            "hltmt_translation",
            "--arch",
            "hltmt_transformer_tiny",
            "--langs",
            LANGS,
            "--encoder-langtok",
            "tgt",
            "--high-resource-langs",
            "de,fr",
            "--slp-pool-size",
            "2",
            "--cpu",
            "--criterion",
            "label_smoothed_cross_entropy",
            "--label-smoothing",
            "0.1",
            "--optimizer",
            "adam",
            "--lr",
            "2e-3",
            "--lr-scheduler",
            "inverse_sqrt",
            "--warmup-updates",
            "4",
            "--max-tokens",
            "1500",
            "--save-dir",
            str(save),
            "--log-interval",
            "2",
            "--no-epoch-checkpoints",
            "--seed",
            "3",
            "--num-workers",
            "0",
            *extra,
        ]
    )
