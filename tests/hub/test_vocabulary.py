"""hltmt_plugin.hub.vocabulary: an export's dictionary and sentencepiece model give the ids and
the text fairseq's Dictionary and sentencepiece BPE give, without fairseq."""

import os

import pytest

from conftest import ROOT
from hltmt_plugin.errors import HltmtInputError
from hltmt_plugin.hub.vocabulary import Dictionary, Pieces

MODELS = os.path.join(ROOT, "docs", "results", "cpu-study", "models")
DICT, SPM = os.path.join(MODELS, "dict.en.txt"), os.path.join(MODELS, "spm.model")
TEXTS = [
    "The file is open.",
    "  two\tspaces\u3000and an ideographic one\u00a0here  ",
    "Ünïcödé wörds, 数字 123 and a rare glyph \u2603 (a snowman)",
    "line\u2028separator and \x1c file separator",
    "<unk> <pad> </s> __de__ are plain text here",
]


def fairseq_side():
    from fairseq.data import Dictionary as FairseqDictionary
    from fairseq.data.encoders.sentencepiece_bpe import SentencepieceBPE, SentencepieceConfig

    return FairseqDictionary.load(DICT), SentencepieceBPE(SentencepieceConfig(sentencepiece_model=SPM))


def test_the_ids_and_text_are_fairseqs():
    theirs, bpe = fairseq_side()
    ours, pieces = Dictionary.load(DICT), Pieces(SPM)
    assert ours.symbols == theirs.symbols and ours.indices == theirs.indices and len(ours) == len(theirs)
    assert (ours.bos_index, ours.pad_index, ours.eos_index, ours.unk_index) == (
        theirs.bos(),
        theirs.pad(),
        theirs.eos(),
        theirs.unk(),
    )
    encoded = pieces.encode(TEXTS)
    for text, found in zip(TEXTS, encoded):
        want = theirs.encode_line(bpe.encode(text), add_if_not_exist=False, append_eos=True).tolist()
        ids = ours.ids(found)
        assert ids == want, text
        leave_out = {theirs.eos(), theirs.index("__de__")}
        import torch

        assert ours.text(ids + [len(theirs) + 5], leave_out) == bpe.decode(
            theirs.string(torch.tensor(ids + [len(theirs) + 5]), extra_symbols_to_ignore=leave_out)
        )
    assert ours.ids([]) == [ours.eos_index] and pieces.encode([]) == []


@pytest.mark.fast
def test_fairseqs_rules_for_dict_txt(tmp_path):
    path = tmp_path / "dict.txt"
    path.write_text("a 5\nb 3\na 1 #fairseq:overwrite\nword with space 2\n", encoding="utf-8")
    found = Dictionary.load(str(path))
    assert found.symbols[4:] == ["a", "b", "a", "word with space"] and found.index("a") == 6
    assert found.index("never seen") == found.unk_index
    for body, why in (
        ("a 5\na 2\n", "repeats the symbol 'a' without #fairseq:overwrite"),
        ("a 5\n\n", "line 2 is not 'SYMBOL COUNT"),
        ("a five\n", "line 1 is not 'SYMBOL COUNT"),
        ("<unk> 3\n", "repeats the symbol '<unk>'"),
    ):
        path.write_text(body, encoding="utf-8")
        with pytest.raises(HltmtInputError, match=why):
            Dictionary.load(str(path))
    path.write_bytes(b"\xff\xfe 1\n")
    with pytest.raises(HltmtInputError, match="cannot read the dictionary"):
        Dictionary.load(str(path))


def test_a_file_that_is_not_a_sentencepiece_model_is_one_line(tmp_path):
    bad = tmp_path / "spm.model"
    bad.write_bytes(b"not a model")
    for path in (str(bad), str(tmp_path / "missing.model"), str(tmp_path)):
        with pytest.raises(HltmtInputError, match="is not a sentencepiece model"):
            Pieces(path)
