"""fairseq's hub on multilingual checkpoints (hltmt_plugin/compat/hub_generator.py): the task's
``build_generator`` takes the hub's ``prefix_allowed_tokens_fn`` (a function is refused in one
line), the hub's ``string`` strips the target-language tokens that ``--decoder-langtok`` puts on
the hypothesis (unless the task keeps them), the patches are installed once; and fairseq's own
``from_pretrained(...).translate`` of a plain multilingual checkpoint writes what
fairseq-generate writes."""

import os
from types import SimpleNamespace

import pytest
import torch
from fairseq import checkpoint_utils, options, tasks
from fairseq.hub_utils import GeneratorHubInterface
from fairseq.tasks.translation_multi_simple_epoch import TranslationMultiSimpleEpochTask

from conftest import LANGS, PAIRS, PLUGIN, cli, perturbed, run, spm_of
from hltmt_plugin.compat import hub_generator, safe_loading
from hltmt_plugin.errors import HltmtConfigError
from hub_common import BEAM, MAX_LEN, parse_hypotheses, sentences

SRC_CONVENTION = ["--encoder-langtok", "src", "--decoder-langtok", "--lang-tok-style", "multilingual"]
SMALL = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32"]
SMALL += ["--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64"]
SMALL += ["--encoder-attention-heads", "2", "--decoder-attention-heads", "2"]


def task_options(data_bin, *extra):
    return [data_bin, "--task", "translation_multi_simple_epoch", "--langs", LANGS, "--lang-pairs", PAIRS, *extra]


def multilingual_task(data_bin, *extra):
    argv = [*task_options(data_bin, *extra), "--arch", "transformer", *SMALL, "--cpu"]
    return tasks.setup_task(options.parse_args_and_arch(options.get_training_parser(), argv))


@pytest.mark.fast
def test_the_language_tokens_to_strip_are_the_decoder_langtoks_unless_kept(data_bin):
    task = multilingual_task(data_bin, *SRC_CONVENTION)
    d = task.target_dictionary
    assert hub_generator.language_token_ids(task) == {d.index(f"__{lang}__") for lang in LANGS.split(",")}
    assert d.unk() not in hub_generator.language_token_ids(task)
    assert hub_generator.language_token_ids(multilingual_task(data_bin, "--encoder-langtok", "tgt")) == set()
    kept = multilingual_task(data_bin, *SRC_CONVENTION, "--keep-inference-langtok")
    assert hub_generator.language_token_ids(kept) == set()
    assert hub_generator.language_token_ids(SimpleNamespace()) == set()  # not a multilingual task


@pytest.mark.fast
@pytest.mark.parametrize("keep", [False, True])
def test_the_hubs_string_strips_the_target_language_token_unless_the_task_keeps_it(data_bin, keep, patched):
    task = multilingual_task(data_bin, *SRC_CONVENTION, *(["--keep-inference-langtok"] if keep else []))
    d = task.target_dictionary
    words = [d.nspecial + 10, d.nspecial + 11]
    hub = SimpleNamespace(task=task, tgt_dict=d)  # what the hub's string reads
    text = GeneratorHubInterface.string(hub, torch.tensor([d.index("__de__"), *words]))
    assert text == " ".join(["__de__"] * keep + [d[w] for w in words])


@pytest.mark.fast
def test_a_prefix_function_is_refused_in_one_line_and_none_is_taken(data_bin, patched):
    task = multilingual_task(data_bin, *SRC_CONVENTION)
    with pytest.raises(HltmtConfigError, match="prefix_allowed_tokens_fn is not supported"):
        task.build_generator([], None, prefix_allowed_tokens_fn=lambda batch, tokens: [])


@pytest.fixture
def patched(monkeypatch):
    """fairseq's task and hub as a command's process has them (this test process is a program:
    put back as fairseq has them after the test)."""
    monkeypatch.setattr(
        TranslationMultiSimpleEpochTask, "build_generator", TranslationMultiSimpleEpochTask.build_generator
    )
    monkeypatch.setattr(GeneratorHubInterface, "string", GeneratorHubInterface.string)
    for name in ("torch", "load_checkpoint_to_cpu"):  # fairseq's hub reads its checkpoint as a command does
        monkeypatch.setattr(checkpoint_utils, name, getattr(checkpoint_utils, name))
    hub_generator.install(TranslationMultiSimpleEpochTask, GeneratorHubInterface)
    safe_loading.install(checkpoint_utils)


@pytest.mark.fast
def test_the_patches_are_installed_once(patched):
    build, string = TranslationMultiSimpleEpochTask.build_generator, GeneratorHubInterface.string
    assert build.hltmt_patched and string.hltmt_patched
    hub_generator.install(TranslationMultiSimpleEpochTask, GeneratorHubInterface)
    assert TranslationMultiSimpleEpochTask.build_generator is build and GeneratorHubInterface.string is string


def plain_checkpoint(data_bin, folder):
    """fairseq's transformer trained a few updates by fairseq-train alone, with fairseq's
    ``--encoder-langtok src --decoder-langtok``, and seeded noise on its weights."""
    train = ["--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1500", "--max-update", "3"]
    save = ["--disable-validation", "--no-save-optimizer-state", "--no-epoch-checkpoints", "--save-dir", folder]
    done = run(
        [
            cli("fairseq-train"),
            *task_options(data_bin, *SRC_CONVENTION),
            "--arch",
            "transformer",
            *SMALL,
            "--cpu",
            *train,
            *save,
        ]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return perturbed(f"{folder}/checkpoint_last.pt", f"{folder}.pt")


def test_fairseqs_hub_translates_a_plain_multilingual_checkpoint_without_its_language_token(
    data_bin, tmp_path, patched
):
    """fairseq's own ``from_pretrained(...).translate`` on fairseq's multilingual task, with
    ``--decoder-langtok``: no TypeError from build_generator, no ``__de__`` in the text, and the
    text fairseq-generate writes for the same sentence."""
    from fairseq import hub_utils

    ckpt = plain_checkpoint(data_bin, str(tmp_path / "plain"))
    loaded = hub_utils.from_pretrained(
        os.path.dirname(ckpt),
        os.path.basename(ckpt),
        data_bin,
        source_lang="en",
        target_lang="de",
        bpe="sentencepiece",
        sentencepiece_model=spm_of(data_bin),
    )
    hub = GeneratorHubInterface(loaded["args"], loaded["task"], loaded["models"])
    text = sentences("en", "de")[0]
    out = hub.translate(text, beam=BEAM, max_len_a=0, max_len_b=MAX_LEN)
    assert "__de__" not in out and "__" not in out, out
    # (--user-dir: this torch's fairseq reads a checkpoint through the plugin's safe loading)
    generate = [cli("fairseq-generate"), *task_options(data_bin, *SRC_CONVENTION), "--user-dir", PLUGIN]
    generate += ["-s", "en", "-t", "de", "--path", ckpt, "--cpu", "--beam", str(BEAM), "--max-len-b", str(MAX_LEN)]
    generate += ["--gen-subset", "test", "--max-tokens", "3000", "--remove-bpe", "sentencepiece"]
    done = run([*generate, "--required-batch-size-multiple", "1"])  # fairseq's task would drop a last partial batch
    assert done.returncode == 0, done.stderr[-3000:]
    assert out == parse_hypotheses(done.stdout)[0][0]
