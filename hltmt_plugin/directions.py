"""Which directions a checkpoint serves, from the options it was trained with: the one rule the
Python API, ``hltmt-translate`` and ``fairseq-generate`` / ``fairseq-interactive`` under
``--task hltmt_translation`` apply.

A direction ``src-tgt`` of a model is

- **trained** (:data:`TRAINED`): one of its ``--lang-pairs``;
- **zero-shot** (:data:`ZERO_SHOT`): not one of them, but the model read ``src`` and produced
  ``tgt`` in training (each in some trained direction). Served only when asked for
  (``zero_shot=True``, ``hltmt-translate --zero-shot``): a model that never saw the pair
  often answers in another language;
- **refused** (:data:`REFUSED`): the model never produced ``tgt`` (no trained direction into
  it) or never saw ``src`` at all. Its output would not be a translation into ``tgt``.

A language whose adapters were added to the model after training (``hltmt-adapters import``:
it is in the stored ``--adapter-langs`` and in no trained direction) counts as seen and
produced: its directions are zero-shot.

Nothing here imports torch or fairseq.
"""

from typing import Iterable, List, Optional

from hltmt_plugin.errors import HltmtInputError

TRAINED, ZERO_SHOT, REFUSED = "trained", "zero-shot", "refused"


def _names(value) -> List[str]:
    """A comma-separated option (or a list) as a list of names."""
    if value is None:
        return []
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    return [str(v).strip() for v in items if str(v).strip()]


class TrainedDirections:
    """The directions a model was trained on (``--lang-pairs``) and the languages given their
    own capacity after training; :meth:`kind` is the rule."""

    def __init__(self, lang_pairs, added_langs: Iterable[str] = ()):
        self.pairs = _names(lang_pairs)
        sides = [pair.split("-", 1) for pair in self.pairs if "-" in pair]
        self.sources = sorted({src for src, _ in sides})
        self.targets = sorted({tgt for _, tgt in sides})
        seen = {lang for side in sides for lang in side}
        self.added = sorted(set(_names(added_langs)) - seen)
        self.seen = seen | set(self.added)
        self.produced = set(self.targets) | set(self.added)

    @classmethod
    def from_options(cls, options) -> Optional["TrainedDirections"]:
        """From a training run's options (a namespace or dict holding ``lang_pairs`` and, with
        adapters, ``adapter_langs``); None when they name no direction."""
        get = options.get if isinstance(options, dict) else lambda name: getattr(options, name, None)
        pairs = _names(get("lang_pairs"))
        return cls(pairs, _names(get("adapter_langs"))) if pairs else None

    def kind(self, src: str, tgt: str) -> str:
        """:data:`TRAINED`, :data:`ZERO_SHOT` or :data:`REFUSED` for the direction ``src-tgt``."""
        if f"{src}-{tgt}" in self.pairs:
            return TRAINED
        if tgt not in self.produced or src not in self.seen:
            return REFUSED
        return ZERO_SHOT

    def describe(self) -> str:
        """What the model was trained on, in one phrase."""
        added = f"; adapters added for {','.join(self.added)}" if self.added else ""
        return f"trained on {','.join(self.pairs)} (targets {','.join(self.targets)}{added})"

    def why_refused(self, src: str, tgt: str) -> str:
        """Why a :data:`REFUSED` direction is refused (one phrase)."""
        if tgt not in self.produced:
            return f"the model never produced {tgt}"
        return f"the model never read {src}"

    def check(
        self, src: str, tgt: str, zero_shot: bool, option: str = "zero_shot=True (hltmt-translate --zero-shot)"
    ) -> str:
        """The kind of ``src-tgt``; :class:`HltmtInputError` naming the direction and what the
        model was trained on when it is refused, or zero-shot without ``zero_shot``."""
        found = self.kind(src, tgt)
        if found == REFUSED:
            raise HltmtInputError(
                f"direction {src}-{tgt} refused: {self.why_refused(src, tgt)}; it was {self.describe()}"
            )
        if found == ZERO_SHOT and not zero_shot:
            raise HltmtInputError(
                f"direction {src}-{tgt} is zero-shot (the model was {self.describe()}): translated only with {option}"
            )
        return found
