"""Adapter options and their layout (hltmt_plugin/adapters/config.py): bad options refused
before training, a language of the pairs without adapters refused before the first update,
one source language decoded without language ids."""

import pytest
import torch

from conftest import HIGH, LANGS, MADX, PAIRS, PLUGIN, build, cli, make_sample, randomize_adapters, run
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.languages import ROWS, SRC

SMALL_BASE = [
    "--arch",
    "hltmt_transformer",
    "--encoder-layers",
    "1",
    "--decoder-layers",
    "1",
    "--encoder-embed-dim",
    "32",
    "--decoder-embed-dim",
    "32",
    "--encoder-ffn-embed-dim",
    "32",
    "--decoder-ffn-embed-dim",
    "32",
    "--encoder-attention-heads",
    "2",
    "--decoder-attention-heads",
    "2",
]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--language-adapters"], "add --enable-lang-ids"),
        (["--invertible-adapters", "--enable-lang-ids", *SMALL_BASE], "add --share-decoder-input-output-embed"),
        (["--shared-adapters", "--adapter-layers", "0,2"], r"names layer\(s\) 2; this model has layers 0..1"),
        (["--shared-adapters", "--adapter-langs", "en,xx"], "--adapter-langs names xx"),
        (["--decoder-adapters"], "add --language-adapters and/or --shared-adapters"),
        (["--shared-adapters", "--checkpoint-activations"], "drop --checkpoint-activations"),
        (["--shared-adapters", "--shared-adapter-reduction-factor", "0"], "must be positive"),
        (["--shared-adapters", "--adapter-placement", "foo"], "must be houlsby or pfeiffer, got foo"),
    ],
)
def test_bad_adapter_options_are_refused_before_training(data_bin, extra, message):
    with pytest.raises(HltmtConfigError, match=message):
        build(data_bin, *extra)


def test_a_language_of_the_pairs_without_adapters_is_refused_before_the_first_update(data_bin, tmp_path):
    """Stage high trains en-de,en-fr,de-en; gu (a source of stage all) has no adapter: refused
    at the start, not after stage high (issue 14)."""
    done = run(
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
            "--lang-pairs",
            PAIRS,
            "--encoder-langtok",
            "tgt",
            "--high-resource-langs",
            HIGH,
            "--slp-pool-size",
            "2",
            "--cpu",
            "--language-adapters",
            "--enable-lang-ids",
            "--adapter-langs",
            "en,de,fr",
            "--high-stage-updates",
            "3",
            "--max-update",
            "6",
            "--optimizer",
            "adam",
            "--lr",
            "1e-3",
            "--max-tokens",
            "1000",
            "--save-dir",
            str(tmp_path / "s"),
        ]
    )
    assert done.returncode != 0
    assert "hltmt_plugin: error: --adapter-langs (en,de,fr) leaves out gu" in done.stderr, done.stderr[-1500:]
    assert "num_updates" not in done.stdout + done.stderr


def test_decoding_a_single_source_language_needs_no_lang_ids(data_bin):
    _, task, model = build(data_bin, "--language-adapters", "-s", "de", "-t", "en")  # as fairseq-generate builds it
    randomize_adapters(model)
    model.eval()
    sample = make_sample(task, ["de-en", "de-en"])  # no src_lang_id, as fairseq-interactive batches
    net = sample["net_input"]
    with torch.no_grad():
        out = model.encoder(net["src_tokens"], net["src_lengths"])
        explicit = model.encoder(
            net["src_tokens"],
            net["src_lengths"],
            src_lang_id=torch.full((2, 1), task.data_manager.lang_dict.index("de")),
        )
    assert out[ROWS][0][:, SRC].tolist() == [task.langs.index("de")] * 2
    assert torch.equal(out["encoder_out"][0], explicit["encoder_out"][0])


def test_the_layout_names_the_adapters_of_each_direction(data_bin):
    _, _, model = build(data_bin, *MADX, "--adapter-langs", "en,de,fr")
    layout = model.encoder.adapter_layout
    assert layout.route("en", "de") == {"encoder": "en", "decoder": "de", "shared": True}
    with pytest.raises(HltmtInputError, match="no adapters for target language gu"):
        layout.route("en", "gu")
    layout.check_trainable(["en-de", "de-fr"])
    with pytest.raises(HltmtConfigError, match=r"leaves out gu,hi"):
        layout.check_trainable(["en-de", "gu-hi"])
    _, _, shared_only = build(data_bin, "--shared-adapters")
    assert shared_only.encoder.adapter_layout.languages_of("en", "gu") == (None, None)
