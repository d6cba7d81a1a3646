"""Which directions a checkpoint serves, from the options it was trained with: the one rule the
Python API, ``hltmt-translate`` (checkpoints and exports) and ``fairseq-generate`` /
``fairseq-interactive`` / fairseq's hub apply, under ``--task hltmt_translation`` and under
fairseq's own ``translation_multi_simple_epoch`` (:mod:`hltmt_plugin.compat.direction_rule`).

A direction ``src-tgt`` of a model is

- **trained** (:data:`TRAINED`): one of the directions it was trained on (:func:`trained_pairs`:
  its ``--lang-pairs``, and those of the model its training started from or whose language's
  adapters were imported into it: :func:`extend_trained`);
- **zero-shot** (:data:`ZERO_SHOT`): not one of them, but ``src`` was the source of some
  trained direction and ``tgt`` the target of some trained direction. Served only when asked
  for (``zero_shot=True``, ``hltmt-translate --zero-shot``, fairseq's commands under ``--task
  hltmt_translation``; fairseq's own task refuses it): a model that never saw the pair often
  answers in another language;
- **refused** (:data:`REFUSED`): the model never produced ``tgt`` (no trained direction into
  it) or never read ``src`` (no trained direction from it: a language seen only as a target
  is not one the encoder learned to read). Its output would not be a translation into ``tgt``.

A language whose adapters were added to the model after training without a trained direction
(``hltmt-adapters import`` of adapters trained on monolingual text: it is in the stored
``--adapter-langs`` and in no trained direction) counts as read and produced: its directions are
zero-shot.

A model trained without a token naming the target language (neither ``--encoder-langtok
tgt`` nor ``--decoder-langtok``) cannot be told which language to produce: when its trained
directions have one target, it serves that target only (the rule above); when they have
several, every direction is refused, with that reason.

Nothing here imports torch or fairseq.
"""

import re
from typing import Iterable, List, Optional

from hltmt_plugin.errors import HltmtConfigError, HltmtInputError

TRAINED, ZERO_SHOT, REFUSED = "trained", "zero-shot", "refused"
# a model's stored options: every direction it was trained on, comma-separated (its --lang-pairs and
# those it kept from the model it started from or from an imported language's adapters)
TRAINED_KEY = "hltmt_trained_directions"
_PAIR = re.compile(r"[^\s,-]{1,64}-[^\s,-]{1,64}")
MAX_PAIRS = 100_000


def _names(value) -> List[str]:
    """A comma-separated option (or a list) as a list of names."""
    if value is None:
        return []
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    return [str(v).strip() for v in items if str(v).strip()]


def _get(options):
    return options.get if isinstance(options, dict) else lambda name: getattr(options, name, None)


def extend_trained(kept: Iterable[str], new: Iterable[str]) -> List[str]:
    """The one rule of a language added to a trained model: the model keeps every direction it
    was trained on (``kept``) and adds the new ones (``new``: the pairs of a run that started from
    it, the directions of an imported language's adapters); each once, in order."""
    out: List[str] = []
    for pair in [*_names(kept), *_names(new)]:
        if pair not in out:
            out.append(pair)
    return out


def trained_pairs(options) -> List[str]:
    """The directions a model with these stored options (a namespace or dict) was trained on:
    :data:`TRAINED_KEY` where it is stored (checked: a list of ``src-tgt``, or one
    :class:`HltmtInputError` line), else its ``--lang-pairs`` (a model trained from scratch, or
    written before the key)."""
    stored = _get(options)(TRAINED_KEY)
    if stored is None:
        return _names(_get(options)("lang_pairs"))
    pairs = _names(stored) if isinstance(stored, (str, list, tuple)) else []
    bad = next((p for p in pairs if not _PAIR.fullmatch(p)), None)
    if not pairs or bad is not None or len(pairs) > MAX_PAIRS:
        shown = bad or (f"{len(pairs):,} directions" if pairs else str(stored)[:40] or "nothing")
        raise HltmtInputError(
            f"the checkpoint's trained directions ({TRAINED_KEY}) hold {shown[:40]!r}, not a list of at most "
            f"{MAX_PAIRS:,} directions src-tgt: use the checkpoint as its training run wrote it"
        )
    return pairs


def marks_target(options) -> bool:
    """Whether a model trained with ``options`` (a namespace, or a dict such as an export's
    manifest) reads which language to produce from a token: ``--encoder-langtok tgt``, or
    ``--decoder-langtok`` (also as the target side of ``--langtoks``' main entry)."""
    get = _get(options)
    langtoks = get("langtoks")
    if isinstance(langtoks, dict) and langtoks.get("main") is not None:
        source_side, target_side = tuple(langtoks["main"])
        return source_side == "tgt" or bool(target_side)
    return get("encoder_langtok") == "tgt" or bool(get("decoder_langtok"))


class TrainedDirections:
    """The directions a model was trained on (``--lang-pairs``), the languages given their own
    capacity after training, and whether a token names the target (``marked``); :meth:`kind`
    is the rule."""

    def __init__(self, lang_pairs, added_langs: Iterable[str] = (), marked: bool = True):
        self.pairs = _names(lang_pairs)
        sides = [pair.split("-", 1) for pair in self.pairs if "-" in pair]
        self.sources = sorted({src for src, _ in sides})
        self.targets = sorted({tgt for _, tgt in sides})
        seen = {lang for side in sides for lang in side}
        self.added = sorted(set(_names(added_langs)) - seen)
        self.read = set(self.sources) | set(self.added)
        self.produced = set(self.targets) | set(self.added)
        self.marked = marked

    @classmethod
    def from_options(cls, options, marked: Optional[bool] = None) -> Optional["TrainedDirections"]:
        """From a model's stored options (a namespace or dict holding its trained directions,
        :func:`trained_pairs`, the language-token options and, with adapters, ``adapter_langs``);
        ``marked``: whether a token names the target, when not read from ``options``; None when
        they name no direction."""
        pairs = trained_pairs(options)
        marked = marks_target(options) if marked is None else marked
        return cls(pairs, _names(_get(options)("adapter_langs")), marked) if pairs else None

    def kind(self, src: str, tgt: str) -> str:
        """:data:`TRAINED`, :data:`ZERO_SHOT` or :data:`REFUSED` for the direction ``src-tgt``."""
        if not self.marked and len(self.produced) > 1:
            return REFUSED
        if f"{src}-{tgt}" in self.pairs:
            return TRAINED
        if tgt not in self.produced or src not in self.read:
            return REFUSED
        return ZERO_SHOT

    def describe(self) -> str:
        """What the model was trained on, in one phrase."""
        added = f"; adapters added for {','.join(self.added)}" if self.added else ""
        return f"trained on {','.join(self.pairs)} (targets {','.join(self.targets)}{added})"

    def why_refused(self, src: str, tgt: str) -> str:
        """Why a :data:`REFUSED` direction is refused (one phrase)."""
        if not self.marked and len(self.produced) > 1:
            return (
                "the model was trained without a token naming the target language (neither --encoder-langtok "
                f"tgt nor --decoder-langtok), so it cannot be told which of {','.join(sorted(self.produced))} "
                "to produce"
            )
        if tgt not in self.produced:
            return f"the model never produced {tgt}"
        if src in self.targets:
            return f"the model never read {src} (it was only a target)"
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

    def check_command(self, src: str, tgt: str, zero_shot: bool, option: str = "", given: str = "") -> str:
        """:meth:`check` for a direction that fairseq's commands decode: the message starts with
        what the command line gave (``given``, by default ``-s SRC -t TGT``) and names the
        checkpoint; a :class:`HltmtConfigError` (the options are wrong, not a sentence)."""
        given = given or f"-s {src} -t {tgt}"
        found = self.kind(src, tgt)
        if found == REFUSED:
            raise HltmtConfigError(
                f"{given}: direction {src}-{tgt} refused: {self.why_refused(src, tgt)}; the checkpoint was "
                f"{self.describe()}"
            )
        if found == ZERO_SHOT and not zero_shot:
            raise HltmtConfigError(
                f"{given}: direction {src}-{tgt} is zero-shot (the checkpoint was {self.describe()}): decoded only "
                f"with {option}"
            )
        return found
