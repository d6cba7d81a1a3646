"""A sentence's languages (hltmt_plugin/languages.py): the language list a checkpoint was trained
with, by name and in order, checked against the options it is used with; and fairseq's other
language-token convention, ``--encoder-langtok src --decoder-langtok`` (its
examples/multilingual), end to end for the plugin's model: the source carries ``__src__``, each
translation starts with ``__tgt__``, and the record's target comes from each row's
target-language id (``--enable-lang-ids``) or ``-t``. Trained by fairseq-train,
decoded by fairseq-generate, fairseq-interactive and the translator (mixed directions), beam
search scored as a full forward pass; other combinations are one line naming the two that work.
"""

import functools
import random

import pytest
import torch

from conftest import LANGS, PAIRS, PLUGIN, assert_clear, build, cli, decode_as, generate_args, perturbed, run, spm_of
from hltmt_plugin.errors import HltmtConfigError
from hub_common import BEAM, MAX_LEN, assert_same, parse_hypotheses, sentences


# ---- the language list of the checkpoint
def test_checkpoint_of_another_model(data_bin, trained):
    ckpt, _ = trained
    # one language fewer: another vocabulary, so another embedding matrix; the language list
    # saved with the weights names the difference first
    done = run([cli("fairseq-generate"), *generate_args(data_bin, ckpt, langs="en,de,fr,gu")])
    assert_clear(
        done,
        "the checkpoint does not fit: vocabulary: checkpoint 2008 symbols, given 2007; languages: "
        "checkpoint en,de,fr,gu,hi, given en,de,fr,gu",
        whole_output=False,
    )


def test_decoding_with_the_languages_in_another_order_is_refused_naming_both_lists(data_bin, trained):
    done = decode_as(data_bin, trained[0], langs="en,fr,de,gu,hi")
    assert done.returncode != 0
    assert (
        "hltmt_plugin: error: the checkpoint does not fit: vocabulary: checkpoint 2008 symbols, given 2008 "
        "(same size, other symbols); languages: checkpoint en,de,fr,gu,hi, given en,fr,de,gu,hi"
    ) in done.stderr
    assert "Traceback" not in done.stderr


# ---- --encoder-langtok src --decoder-langtok
SRC_CONVENTION = ["--encoder-langtok", "src", "--decoder-langtok", "--lang-tok-style", "multilingual"]
MODEL = ["--arch", "hltmt_transformer_tiny", "--high-resource-langs", "de,fr", "--slp-pool-size", "2"]
DIRECTIONS = [("en", "de"), ("en", "gu"), ("de", "en")]


def options(data_bin, *extra):
    return [
        data_bin,
        "--user-dir",
        PLUGIN,
        "--task",
        "hltmt_translation",
        "--langs",
        LANGS,
        "--lang-pairs",
        PAIRS,
        *SRC_CONVENTION,
        *extra,
    ]


@pytest.fixture(scope="module")
def checkpoint(data_bin, tmp_path_factory):
    save = tmp_path_factory.mktemp("src_convention")
    done = run(
        [
            cli("fairseq-train"),
            *options(data_bin, *MODEL, "--enable-lang-ids"),
            "--cpu",
            "--optimizer",
            "adam",
            "--lr",
            "1e-3",
            "--max-tokens",
            "1500",
            "--high-stage-updates",
            "2",
            "--max-update",
            "4",
            "--disable-validation",
            "--no-save-optimizer-state",
            "--no-epoch-checkpoints",
            "--save-dir",
            str(save),
        ]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "stage all" in done.stdout + done.stderr
    return perturbed(str(save / "checkpoint_last.pt"))


@functools.lru_cache(maxsize=None)
def generate(data_bin, ckpt, src, tgt):
    done = run(
        [
            cli("fairseq-generate"),
            *options(data_bin, "--enable-lang-ids"),
            "-s",
            src,
            "-t",
            tgt,
            "--path",
            ckpt,
            "--cpu",
            "--beam",
            str(BEAM),
            "--max-len-b",
            str(MAX_LEN),
            "--gen-subset",
            "test",
            "--max-tokens",
            "3000",
            "--remove-bpe",
            "sentencepiece",
        ]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = parse_hypotheses(done.stdout)
    return [found[i] for i in range(12)]


def test_generate_interactive_and_the_translator_agree(data_bin, checkpoint):
    from hltmt_plugin.hub import HltmtTranslator

    items = [
        (src, tgt, text, ref)
        for src, tgt in DIRECTIONS
        for text, ref in zip(sentences(src, tgt), generate(data_bin, checkpoint, src, tgt))
    ]
    random.Random(2).shuffle(items)
    translator = HltmtTranslator.load(checkpoint, spm=spm_of(data_bin), device="cpu")
    results = translator.translate_batch(
        [i[:3] for i in items], beam=BEAM, max_len=MAX_LEN, details=True, max_tokens=400
    )
    assert_same(results, [i[3] for i in items], "--encoder-langtok src --decoder-langtok")
    assert len({r.text for r in results}) > 3
    # the same mixed input through hltmt-translate
    done = run(
        [
            cli("hltmt-translate"),
            "--checkpoint",
            checkpoint,
            "--spm",
            spm_of(data_bin),
            "--device",
            "cpu",
            "--beam",
            str(BEAM),
            "--max-len",
            str(MAX_LEN),
        ],
        input="".join(f"{s}\t{t}\t{text}\n" for s, t, text, _ in items[:12]),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:-1] == [ref[0] for *_, ref in items[:12]]
    # fairseq-interactive: one direction, the target language from -t
    texts = sentences("en", "de")
    done = run(
        [
            cli("fairseq-interactive"),
            *options(data_bin),
            "-s",
            "en",
            "-t",
            "de",
            "--path",
            checkpoint,
            "--cpu",
            "--beam",
            str(BEAM),
            "--max-len-b",
            str(MAX_LEN),
            "--bpe",
            "sentencepiece",
            "--sentencepiece-model",
            spm_of(data_bin),
            "--buffer-size",
            "64",
            "--max-tokens",
            "3000",
        ],
        input="".join(t + "\n" for t in texts),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = parse_hypotheses(done.stdout)
    got, ref = [found[i] for i in range(len(texts))], generate(data_bin, checkpoint, "en", "de")
    assert [t for t, _ in got] == [t for t, _ in ref]
    assert [s for _, s in got] == pytest.approx([s for _, s in ref], abs=1e-3)


def test_beam_search_scores_equal_a_full_forward(data_bin):
    from fairseq.data import language_pair_dataset

    from conftest import generate as beam_search

    args, task, model = build(
        data_bin,
        "--encoder-langtok",
        "src",
        "--decoder-langtok",
        "--enable-lang-ids",
        "--source-lang",
        "en",
        "--target-lang",
        "de",
    )
    model.encoder.languages.default_target = None  # the target from each row's id, as in a mixed batch
    torch.manual_seed(1)
    for p in model.parameters():
        p.data.add_(torch.randn_like(p) * 0.3)
    model.eval()
    d, dm = task.source_dictionary, task.data_manager
    g = torch.Generator().manual_seed(0)
    items = []
    for i in range(4):
        words = torch.randint(d.nspecial, d.nspecial + 500, (3 + i,), generator=g)
        source = torch.cat([torch.tensor([dm.get_encoder_langtok("en", "de", "src")]), words, torch.tensor([d.eos()])])
        items.append({"id": i, "source": source, "target": torch.tensor([d.eos()])})
    sample = language_pair_dataset.collate(items, d.pad(), d.eos(), left_pad_source=True, left_pad_target=False)
    sample["net_input"]["tgt_lang_id"] = torch.full((4, 1), dm.lang_dict.index("de"))
    hypos = beam_search(task, model, sample, beam=3)
    de = dm.get_decoder_langtok("de", "tgt")
    net = sample["net_input"]
    for b, nbest in enumerate(hypos):
        for hypo in nbest:
            tokens = hypo["tokens"].unsqueeze(0)
            assert int(tokens[0, 0]) == de  # the translation starts with __de__
            prev = torch.cat([torch.tensor([[d.eos()]]), tokens[:, :-1]], dim=1)
            with torch.no_grad():
                out = model(
                    net["src_tokens"][b : b + 1],
                    net["src_lengths"][b : b + 1],
                    prev,
                    tgt_lang_id=net["tgt_lang_id"][b : b + 1],
                )
            full = model.get_normalized_probs(out, log_probs=True).gather(-1, tokens.unsqueeze(-1)).view(-1)
            torch.testing.assert_close(full, hypo["positional_scores"], rtol=0, atol=1e-4)


def test_other_conventions_are_one_line_naming_the_two_that_work(data_bin):
    with pytest.raises(HltmtConfigError, match="--encoder-langtok tgt or from --encoder-langtok src --decoder-langtok"):
        build(data_bin, "--encoder-langtok", "src")
    with pytest.raises(HltmtConfigError, match="add --enable-lang-ids"):
        build(data_bin, "--encoder-langtok", "src", "--decoder-langtok")
