"""What a translation call returns: one :class:`Translation` per sentence (text, score,
routing, error; with ``nbest`` above 1 its :class:`Hypothesis` list), and the error that names
the sentences that failed."""

from dataclasses import asdict, dataclass
from typing import Dict, List, Optional

import hltmt_plugin  # noqa: F401  (registers the task and model, safe checkpoint loading)
from hltmt_plugin.errors import HltmtInputError


class TranslationErrors(HltmtInputError):
    """Some sentences of a call could not be translated; ``results`` holds every sentence's
    result in input order (``None``, or a :class:`Translation` with ``error``, for those)."""

    def __init__(self, message: str, results: list, failed: List["Translation"]):
        super().__init__(message)
        self.results, self.failed = results, failed


@dataclass
class Hypothesis:
    """One of a sentence's ``nbest`` hypotheses: as :class:`Translation`'s text, score and tokens."""

    text: str
    score: float
    tokens: int


@dataclass
class Translation:
    """One sentence's result. ``line`` is its 1-based position in the input."""

    line: int
    src: str
    tgt: str
    source: str
    text: Optional[str] = None  # the detokenized translation; None if it failed
    score: Optional[float] = None  # fairseq's hypothesis score in base 2, as fairseq-generate's H-/D- lines print it
    tokens: Optional[int] = None  # pieces of the translation, end of sentence included
    routing: Optional[Dict[str, object]] = None
    error: Optional[str] = None
    zero_shot: bool = False  # a direction outside the model's training directions (hltmt_plugin.directions)
    hypotheses: Optional[List[Hypothesis]] = None  # with nbest > 1: the nbest best, best first (text is the first's)

    def to_dict(self) -> Dict[str, object]:
        """For JSON: every field; ``error`` only on a failed sentence, ``zero_shot`` only on a
        sentence translated in a zero-shot direction, ``hypotheses`` only with ``nbest`` above 1."""
        out = asdict(self)
        if out["hypotheses"] is None:
            del out["hypotheses"]
        if out["error"] is None:
            del out["error"]
        if not out["zero_shot"]:
            del out["zero_shot"]
        return out
