"""Initialisation from a RoBERTa-family checkpoint that the test builds and saves with fairseq."""

import os

import pytest
import torch
from fairseq import checkpoint_utils, options, tasks
from fairseq.data import Dictionary

from conftest import MADX, build, make_sample, with_lang_ids
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


# ---- a released checkpoint: its architecture read from it ----------------------------------

M2M_LIKE = [  # M2M-100's options (pre-norm, shared embeddings, ReLU) at a tiny size
    "--encoder-layers",
    "2",
    "--decoder-layers",
    "1",
    "--encoder-embed-dim",
    "48",
    "--decoder-embed-dim",
    "48",
    "--encoder-ffn-embed-dim",
    "96",
    "--decoder-ffn-embed-dim",
    "96",
    "--encoder-attention-heads",
    "4",
    "--decoder-attention-heads",
    "4",
    "--encoder-normalize-before",
    "--decoder-normalize-before",
    "--share-all-embeddings",
    "--attention-dropout",
    "0.1",
]


@pytest.fixture(scope="module")
def release(data_bin, tmp_path_factory):
    """A fairseq ``transformer`` with M2M-100's options, saved as fairseq 0.12 saves a release
    (its options as the legacy ``args``): (path, its options)."""
    from conftest import LANGS, PAIRS, PLUGIN

    parser = options.get_training_parser()
    words = [data_bin, "--user-dir", PLUGIN, "--task", "translation_multi_simple_epoch", "--arch", "transformer"]
    words += ["--langs", LANGS, "--lang-pairs", PAIRS, "--encoder-langtok", "src", "--decoder-langtok", "--cpu"]
    args = options.parse_args_and_arch(parser, words + M2M_LIKE)
    torch.manual_seed(0)
    model = tasks.setup_task(args).build_model(args)
    path = str(tmp_path_factory.mktemp("release") / "model.pt")
    history = [{"criterion_name": "LabelSmoothedCrossEntropyCriterion", "num_updates": 0, "best_loss": None}]
    state = {"args": args, "model": model.state_dict(), "optimizer_history": history, "extra_state": {}}
    checkpoint_utils.torch_persistent_save(state, path)
    return path, args, model.eval()


def _parsed(data_bin, *extra):
    from conftest import train_args

    parser = options.get_training_parser()
    return options.parse_args_and_arch(parser, train_args(data_bin, "--arch", "hltmt_transformer", *extra))


def test_a_released_checkpoints_architecture_needs_no_option(data_bin, release):
    path, stored, _ = release
    args = _parsed(data_bin, "--finetune-from-model", path)
    for name in ("encoder_layers", "decoder_layers", "encoder_embed_dim", "decoder_ffn_embed_dim", "activation_fn"):
        assert getattr(args, name) == getattr(stored, name), name
    assert args.encoder_normalize_before and args.decoder_normalize_before and args.share_all_embeddings
    assert args.attention_dropout == 0.1
    assert _parsed(data_bin, "--finetune-from-model", path, "--attention-dropout", "0.2").attention_dropout == 0.2
    assert _parsed(data_bin).encoder_layers == 6  # without a checkpoint, the architecture's own sizes


def test_each_option_that_contradicts_the_checkpoint_is_named_in_one_line(data_bin, release):
    path, _, _ = release
    with pytest.raises(HltmtConfigError) as caught:
        _parsed(data_bin, "--finetune-from-model", path, "--encoder-layers", "3", "--activation-fn", "gelu")
    message = str(caught.value)
    assert (
        "--encoder-layers 3 (the checkpoint's: 2)" in message
        and "--activation-fn gelu (the checkpoint's: relu)" in message
    )
    assert "\n" not in message and "--decoder-layers" not in message


DIRECTIONS = ["en-de", "en-fr", "en-gu", "en-hi", "de-en", "gu-en"] * 3
CAPACITIES = {
    "pool": [],
    "pool+adapters": MADX,
    "pool+skills": ["--skill-ffn", "--skill-attention", "--enable-lang-ids"],
}


@pytest.mark.parametrize("case", list(CAPACITIES))
def test_capacities_added_to_a_release_start_as_the_identity(data_bin, release, case):
    """The pool (and adapters or skills) added to the released checkpoint, no architecture option
    typed, loaded as fairseq-train's --finetune-from-model loads it (strict): at update 0 every
    target token's log-probability is the released model's, and so is each predicted token."""
    from hltmt_plugin.compat.safe_loading import load_checkpoint

    path, _, plain = release
    args = _parsed(data_bin, "--finetune-from-model", path, "--dropout", "0", *CAPACITIES[case])
    task = tasks.setup_task(args)
    model = task.build_model(args).eval()
    model.load_state_dict(load_checkpoint(path)["model"], strict=True, model_cfg=args)
    sample = make_sample(task, DIRECTIONS, max_len=9)
    with torch.no_grad():
        theirs = plain.get_normalized_probs(plain(**sample["net_input"]), log_probs=True)
        ours = model.get_normalized_probs(model(**with_lang_ids(task, sample, DIRECTIONS)["net_input"]), log_probs=True)
    assert (ours - theirs).abs().max() < 1e-5
    assert torch.equal(ours.argmax(-1), theirs.argmax(-1))


def test_an_option_given_as_the_checkpoint_has_it_is_no_contradiction(data_bin, release):
    """fairseq parses some architecture options as text (--decoder-output-dim): the value typed
    equal to the checkpoint's is not refused (hltmt-export reads a fine-tuned model's command back)."""
    path, stored, _ = release
    args = _parsed(data_bin, "--finetune-from-model", path, "--decoder-output-dim", str(stored.decoder_output_dim))
    assert str(args.decoder_output_dim) == str(stored.decoder_output_dim)
