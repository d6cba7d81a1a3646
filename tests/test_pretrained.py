"""Initialisation from a RoBERTa-family checkpoint that the test builds and saves with fairseq."""

import os

import pytest
import torch
from fairseq import checkpoint_utils, options, tasks
from fairseq.data import Dictionary

from conftest import build
from hltmt_plugin.errors import HltmtConfigError

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

SHAPE = [
    "--encoder-layers",
    "2",
    "--encoder-embed-dim",
    "128",
    "--encoder-ffn-embed-dim",
    "256",
    "--encoder-attention-heads",
    "4",
]
XLMR_LIKE = [
    "--encoder-learned-pos",
    "--decoder-learned-pos",
    "--layernorm-embedding",
    "--no-scale-embedding",
    "--activation-fn",
    "gelu",
]


@pytest.fixture(scope="module")
def roberta(data_bin, tmp_path_factory):
    """A 2-layer RoBERTa whose vocabulary shares half of ours, in another order, plus pieces of its own."""
    folder = tmp_path_factory.mktemp("roberta")
    ours = Dictionary.load(os.path.join(data_bin, "dict.en.txt"))
    theirs = Dictionary()
    for i in reversed(range(ours.nspecial, len(ours), 2)):
        theirs.add_symbol(ours[i])
    for i in range(50):
        theirs.add_symbol(f"▁only_in_pretrained_{i}")
    theirs.save(str(folder / "dict.txt"))
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        [str(folder), "--task", "masked_lm", "--arch", "roberta_base", *SHAPE, "--tokens-per-sample", "64", "--cpu"],
    )
    task = tasks.setup_task(args)
    torch.manual_seed(1)
    model = task.build_model(args)
    checkpoint_utils.torch_persistent_save({"model": model.state_dict(), "args": args}, str(folder / "model.pt"))
    return str(folder / "model.pt"), model, task.source_dictionary


def test_encoder_and_decoder_weights_arrive(data_bin, roberta):
    path, pretrained, their_dict = roberta
    _, task, model = build(
        data_bin, *SHAPE, *XLMR_LIKE, "--pretrained-xlmr-checkpoint", path, "--pretrained-xlmr-decoder"
    )
    src = pretrained.encoder.sentence_encoder
    ours = task.source_dictionary
    shared = [i for i in range(len(ours)) if ours[i] in their_dict.indices]
    assert len(shared) > 500
    for i in shared:
        assert torch.equal(model.encoder.embed_tokens.weight[i], src.embed_tokens.weight[their_dict.index(ours[i])])
    langtok = ours.index("__de__")
    assert ours[langtok] not in their_dict.indices  # keeps its own initialisation
    for key in (
        "layers.0.self_attn.q_proj.weight",
        "layers.1.fc2.weight",
        "layers.1.final_layer_norm.bias",
        "layernorm_embedding.weight",
    ):
        assert torch.equal(model.encoder.state_dict()[key], src.state_dict()[key]), key
    n = min(model.encoder.embed_positions.weight.size(0), src.embed_positions.weight.size(0))
    assert torch.equal(model.encoder.embed_positions.weight[:n], src.embed_positions.weight[:n])
    for key in ("layers.0.self_attn.k_proj.weight", "layers.1.fc1.weight", "layers.0.self_attn_layer_norm.weight"):
        assert torch.equal(model.decoder.state_dict()[key], src.state_dict()[key]), key
    assert not torch.equal(model.decoder.layers[0].encoder_attn.k_proj.weight, src.layers[0].self_attn.k_proj.weight)


def test_without_the_decoder_option_the_decoder_keeps_its_initialisation(data_bin, roberta):
    path, pretrained, _ = roberta
    _, _, model = build(data_bin, *SHAPE, *XLMR_LIKE, "--pretrained-xlmr-checkpoint", path)
    assert not torch.equal(model.decoder.layers[0].fc1.weight, pretrained.encoder.sentence_encoder.layers[0].fc1.weight)


def test_shape_mismatch_lists_the_keys(data_bin, roberta):
    path, _, _ = roberta
    with pytest.raises(
        HltmtConfigError,
        match=r"does not fit this model: .*encoder\.layers\.0\.fc1\.weight: "
        r"model \(512, 128\) vs checkpoint \(256, 128\)",
    ):
        build(data_bin, *SHAPE, *XLMR_LIKE, "--encoder-ffn-embed-dim", "512", "--pretrained-xlmr-checkpoint", path)


def test_a_model_built_unlike_the_pretrained_encoder_is_refused(data_bin, roberta):
    path, _, _ = roberta
    with pytest.raises(HltmtConfigError, match="add --encoder-learned-pos --layernorm-embedding --no-scale-embedding"):
        build(data_bin, *SHAPE, "--pretrained-xlmr-checkpoint", path)


def test_missing_file_is_a_clear_error(data_bin, tmp_path):
    with pytest.raises(HltmtConfigError, match="does not exist"):
        build(data_bin, *SHAPE, *XLMR_LIKE, "--pretrained-xlmr-checkpoint", str(tmp_path / "nope.pt"))
