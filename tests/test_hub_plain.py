"""The translator and hltmt-translate serve fairseq's own multilingual checkpoints: a plain
``transformer`` trained by fairseq-train with ``--task translation_multi_simple_epoch`` (no
plugin), with either language-token convention (``--encoder-langtok tgt``; fairseq's
``--encoder-langtok src --decoder-langtok``). One loaded model translates mixed directions in
one call, each sentence as fairseq-generate translates it for the same direction and beam; the
model does not route, so results carry no routing.
"""
import functools
import random

import pytest

from conftest import LANGS, PAIRS, PLUGIN, cli, run
from test_hub import BEAM, MAX_LEN, N, assert_same, parse_hypotheses, perturbed, sentences, spm_of

from hltmt_plugin.hub import HltmtTranslator

CONVENTIONS = {"tgt": ["--encoder-langtok", "tgt"],
               "src": ["--encoder-langtok", "src", "--decoder-langtok", "--lang-tok-style", "multilingual"]}
DIRECTIONS = [("en", "de"), ("en", "gu"), ("de", "en")]
SMALL = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
         "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2",
         "--decoder-attention-heads", "2"]


def task_options(data_bin, convention):
    return [data_bin, "--task", "translation_multi_simple_epoch", "--langs", LANGS, "--lang-pairs", PAIRS,
            *CONVENTIONS[convention]]


@functools.lru_cache(maxsize=None)
def plain_checkpoint(data_bin, folder, convention):
    """fairseq's transformer trained a few updates by fairseq-train alone, with seeded noise on
    its weights (so that a wrong language token shows in the text)."""
    done = run([cli("fairseq-train"), *task_options(data_bin, convention), "--arch", "transformer", *SMALL,
                "--cpu", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1500", "--max-update", "3",
                "--disable-validation", "--no-save-optimizer-state", "--no-epoch-checkpoints",
                "--save-dir", f"{folder}/{convention}"])
    assert done.returncode == 0, done.stderr[-3000:]
    return perturbed(f"{folder}/{convention}/checkpoint_last.pt", f"{folder}/{convention}.pt")


@functools.lru_cache(maxsize=None)
def generate(data_bin, ckpt, convention, src, tgt):
    # (--user-dir: this torch's fairseq reads a checkpoint through the plugin's safe loading)
    done = run([cli("fairseq-generate"), *task_options(data_bin, convention), "--user-dir", PLUGIN,
                "-s", src, "-t", tgt, "--path", ckpt,
                "--cpu", "--beam", str(BEAM), "--max-len-b", str(MAX_LEN), "--gen-subset", "test",
                "--max-tokens", "3000", "--remove-bpe", "sentencepiece",
                "--required-batch-size-multiple", "1"])  # fairseq's task would drop a last partial batch
    assert done.returncode == 0, done.stderr[-3000:]
    found = parse_hypotheses(done.stdout)
    return [found[i] for i in range(N)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return str(tmp_path_factory.mktemp("plain_multilingual"))


@pytest.mark.parametrize("convention", ["tgt", "src"])
def test_a_plain_multilingual_transformer_translates_mixed_directions_as_fairseq_generate(
        data_bin, folder, convention):
    ckpt = plain_checkpoint(data_bin, folder, convention)
    items = [(src, tgt, text, ref) for src, tgt in DIRECTIONS
             for text, ref in zip(sentences(src, tgt), generate(data_bin, ckpt, convention, src, tgt))]
    random.Random(1).shuffle(items)
    translator = HltmtTranslator.load(ckpt, spm=spm_of(data_bin), device="cpu")
    results = translator.translate_batch([i[:3] for i in items], beam=BEAM, max_len=MAX_LEN, details=True,
                                         max_tokens=400)
    assert_same(results, [i[3] for i in items], f"--encoder-langtok {convention}")
    assert all(r.routing == {} for r in results)
    assert len({r.text for r in results}) > 3  # the directions and sentences write different text

    # the same mixed input through hltmt-translate
    lines = "".join(f"{s}\t{t}\t{text}\n" for s, t, text, _ in items[:12])
    done = run([cli("hltmt-translate"), "--checkpoint", ckpt, "--spm", spm_of(data_bin), "--device", "cpu",
                "--beam", str(BEAM), "--max-len", str(MAX_LEN)], input=lines)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:-1] == [ref[0] for *_, ref in items[:12]]
