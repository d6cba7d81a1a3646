"""The text side of an exported model, without fairseq: its dictionary (``dict.txt``) and its
sentencepiece model, giving the ids fairseq's translator gives and the text it writes.

:class:`Dictionary` reads ``dict.txt`` by fairseq's rules (``fairseq.data.Dictionary.load``):
the special symbols ``<s>``, ``<pad>``, ``</s>``, ``<unk>`` at indices 0 to 3, then one
``SYMBOL COUNT`` line per symbol in order, a repeated symbol only with the
``#fairseq:overwrite`` flag (the later index wins). :class:`Pieces` is the sentencepiece model
as fairseq's ``sentencepiece`` BPE uses it (no sampling), a batch of lines encoded in one call.
A line's ids: its pieces split at whitespace (fairseq's ``tokenize_line``), each symbol's index
(``<unk>``'s when the dictionary lacks it), end of sentence last. A translation's text: the
symbols of its ids but the ones left out (end of sentence, beginning of sentence, the target
language's token), joined, spaces dropped and ``▁`` turned into spaces (fairseq's
``Dictionary.string`` and ``SentencepieceBPE.decode``).
"""

import os
from typing import Iterable, List, Sequence

from hltmt_plugin.errors import HltmtInputError

OVERWRITE = "#fairseq:overwrite"
WORD_START = "\u2581"


class Dictionary:
    """fairseq's dictionary of a ``dict.txt``: ``symbols`` (index -> symbol), ``index(symbol)``."""

    bos_word, pad_word, eos_word, unk_word = "<s>", "<pad>", "</s>", "<unk>"

    def __init__(self):
        self.symbols: List[str] = []
        self.indices = {}
        for word in (self.bos_word, self.pad_word, self.eos_word, self.unk_word):
            self._add(word)
        self.bos_index, self.pad_index, self.eos_index, self.unk_index = 0, 1, 2, 3

    def _add(self, word: str, overwrite: bool = False) -> int:
        if word in self.indices and not overwrite:
            return self.indices[word]
        self.indices[word] = len(self.symbols)
        self.symbols.append(word)
        return self.indices[word]

    @classmethod
    def load(cls, path: str) -> "Dictionary":
        """``dict.txt`` read as fairseq reads it; HltmtInputError naming the file and line that
        fairseq would refuse."""
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.readlines()
        except (OSError, UnicodeDecodeError) as error:
            raise HltmtInputError(f"cannot read the dictionary {path}: {getattr(error, 'strerror', None) or error}")
        found = cls()
        for number, line in enumerate(lines, 1):
            try:
                word, field = line.rstrip().rsplit(" ", 1)
                overwrite = field == OVERWRITE
                if overwrite:
                    word, field = word.rsplit(" ", 1)
                int(field)
            except ValueError:
                raise HltmtInputError(
                    f"{path}: line {number} is not 'SYMBOL COUNT [{OVERWRITE}]': {line.rstrip()!r:.80}"
                ) from None
            if word in found.indices and not overwrite:
                raise HltmtInputError(f"{path}: line {number} repeats the symbol {word!r:.60} without {OVERWRITE}")
            found._add(word, overwrite=overwrite)
        return found

    def __len__(self) -> int:
        return len(self.symbols)

    def index(self, symbol: str) -> int:
        return self.indices.get(symbol, self.unk_index)

    def ids(self, pieces: Iterable[str]) -> List[int]:
        """The ids of a line's pieces (fairseq's ``encode_line``: split at whitespace, end of
        sentence appended)."""
        get, unk = self.indices.get, self.unk_index
        return [get(word, unk) for word in " ".join(pieces).split()] + [self.eos_index]

    def text(self, ids: Iterable[int], leave_out) -> str:
        """The detokenized text of ``ids`` without the ids of ``leave_out`` (fairseq's
        ``Dictionary.string`` then ``SentencepieceBPE.decode``)."""
        symbols, unk = self.symbols, self.unk_index
        words = (symbols[i] if i != unk and i < len(symbols) else self.unk_word for i in ids if i not in leave_out)
        return " ".join(words).replace(" ", "").replace(WORD_START, " ").strip()


class Pieces:
    """A sentencepiece model: the pieces of a batch of lines in one call."""

    def __init__(self, path: str):
        import sentencepiece

        self.path = path
        self.model = sentencepiece.SentencePieceProcessor()
        try:
            if not os.path.isfile(path):
                raise OSError(f"{path} is not a file")
            self.model.Load(path)
        except (OSError, RuntimeError) as error:
            raise HltmtInputError(
                f"{path} is not a sentencepiece model: {str(error).splitlines()[0] if str(error) else error}"
            ) from None

    def encode(self, texts: Sequence[str]) -> List[List[str]]:
        """The pieces of each text (sentencepiece's batch encoding, without sampling)."""
        return self.model.encode(list(texts), out_type=str) if texts else []
