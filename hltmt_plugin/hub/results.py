"""What a translation call returns: one :class:`Translation` per sentence (text, score,
routing, error), and the error that names the sentences that failed."""
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

    def to_dict(self) -> Dict[str, object]:
        """For JSON: every field; ``error`` only on a failed sentence."""
        out = asdict(self)
        if out["error"] is None:
            del out["error"]
        return out


# ---------------------------------------------------------------------------------------
# The one place that knows the model's insides. The rest of this module uses the task's
# public helpers and fairseq's generator only.


def _routing_of(model, task, src: str, tgt: str) -> Dict[str, object]:
    """How ``model`` routes a sentence ``src -> tgt``, or :class:`HltmtInputError` naming why
    it cannot serve that direction.

    Returns ``{"slp": "m<k>" | "universal", "adapters": {...}, "skills": {...}}`` (each only
    when the model has a pool / adapters / skills). Relies on: ``model.routing_map()`` (high-resource
    language -> pool module; every other target goes through the universal layer);
    ``model.encoder.adapter_layout`` (None without adapters; ``.cfg`` flags ``language_adapters``,
    ``shared_adapters``, ``decoder_adapters``, ``invertible_adapters``; ``.adapter_langs``, which
    includes imported languages); ``model.encoder.skill_layout`` (None without skills; ``.cfg``
    flags ``skill_ffn``, ``skill_attention``; ``.matrix.directions``: "src-tgt" -> skill names).
    ``task`` is not needed today.
    """
    routing: Dict[str, object] = {}
    if model.slp is not None:  # without a pool the decoder top is fairseq's own: nothing to name
        mapping = model.routing_map()
        routing["slp"] = f"m{int(mapping[tgt])}" if tgt in mapping else "universal"

    plan = getattr(model.encoder, "adapter_layout", None)
    if plan is not None:
        cfg, have = plan.cfg, list(plan.adapter_langs)
        by_source = cfg.language_adapters or cfg.invertible_adapters
        by_target = (cfg.language_adapters and cfg.decoder_adapters) or cfg.invertible_adapters
        for lang, needed, side in ((src, by_source, "source"), (tgt, by_target, "target")):
            if needed and lang not in have:
                raise HltmtInputError(
                    f"direction {src}-{tgt}: the model has no adapters for {side} language {lang} (adapters exist "
                    f"for {','.join(have)}); train or import them (hltmt-adapters)")
        routing["adapters"] = {"encoder": src if by_source else None, "decoder": tgt if by_target else None,
                               "shared": bool(cfg.shared_adapters)}

    skills = getattr(model.encoder, "skill_layout", None)
    if skills is not None:
        active = skills.matrix.directions.get(f"{src}-{tgt}")
        if skills.cfg.skill_ffn and active is None:
            raise HltmtInputError(f"direction {src}-{tgt} is not in the model's skill matrix (it names "
                                  f"{len(skills.matrix.directions)} directions): add it to the --skill-matrix file")
        routing["skills"] = {"ffn": list(active) if skills.cfg.skill_ffn else None,
                             "attention": src if skills.cfg.skill_attention else None}
    return routing


# ---------------------------------------------------------------------------------------
# loading
