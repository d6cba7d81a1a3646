"""The decoding options, declared once: :class:`Search`, a dataclass whose every field carries
in its metadata (:func:`option`) the option's help, its bounds, and how each engine takes it.

From these declarations come:

- the command line of ``hltmt-translate`` and ``hltmt-serve`` (:func:`add_arguments`: each
  field's ``--flag``, type, metavar, default and help with its range, and :func:`as_flags`,
  which names a refused value by its flag);
- the check of a call's values (:func:`checked`: each field within its own bounds; the rules
  between fields are :func:`hltmt_plugin.hub.arguments.search`'s);
- each engine's arguments (:func:`engine_arguments`: fairseq's ``GenerationConfig``,
  CTranslate2's ``translate_batch``, transformers' ``generate``), and each engine's own range of
  an option where it searches otherwise (:func:`limits`, refused by the contract;
  :func:`differences`, accepted and documented in docs/deploying.md).

A new decoding option is one field here, with one entry per engine in its ``engines``
(docs/architecture.md, "How to add a decoding option"). Imports neither torch nor fairseq.
"""

import dataclasses
import math
import numbers
import re
from typing import Callable, Dict, NamedTuple, Optional, Union

from hltmt_plugin.errors import HltmtConfigError

ENGINES = ("fairseq", "ctranslate2", "transformers")  # every engine a search runs on (hltmt_plugin.hub.engines)

MAX_LENPEN = 10.0  # |lenpen|: a length to a larger power overflows the scores of long translations
MIN_TOPP = 2.0**-126  # the smallest normal float32: every engine computes p in float32, where a smaller one is 0
MIN_TEMPERATURE, MAX_TEMPERATURE = 0.01, 100.0  # logits over 0.01 still fit half precision; over 100, all but uniform
MAX_SEED = 2**31 - 1  # what every engine's generator takes


class Limit(NamedTuple):
    """An engine's own range of one search option, narrower than the contract's: ``low`` /
    ``high`` (None: the contract's), and ``why`` the engine differs there."""

    low: Optional[float]
    high: Optional[float]
    why: str


class Elsewhere(NamedTuple):
    """An option an engine does not take as an argument of its search: ``how`` it is applied
    (by the contract, or by the engine around the call)."""

    how: str


class To(NamedTuple):
    """How one engine takes an option: ``argument`` (its parameter of the same value, or a
    function of the call's :class:`Search` and the engine's ``context`` giving its parameters),
    ``limit`` (a range the engine refuses outside of) and ``difference`` (a range outside of which
    the engine accepts the value but gives other lines than fairseq's, said in docs/deploying.md)."""

    argument: Union[str, Callable, Elsewhere]
    limit: Optional[Limit] = None
    difference: Optional[Limit] = None


def option(
    default,
    help: str,
    kind: str,
    engines: Dict[str, Union[str, Callable, Elsewhere, To]],
    low=None,
    high=None,
    off=None,
    why: str = "",
    metavar: Optional[str] = None,
    sampling: bool = False,
):
    """A field of :class:`Search`: its ``default`` and ``help``; ``kind``: ``count`` (a whole
    number of at least 1), ``whole`` (a whole number), ``real`` (a finite number) or ``flag``;
    ``low`` / ``high``: its range (``off``: the one value outside it that turns the option off;
    ``why``: said of a value out of range); ``sampling``: it applies to sampling only; ``engines``:
    how each engine of :data:`ENGINES` takes it (a parameter's name, a function, an
    :class:`Elsewhere`, or a :class:`To` with the engine's own ranges)."""
    given = {name: entry if isinstance(entry, To) else To(entry) for name, entry in engines.items()}
    meta = dict(help=help, kind=kind, engines=given, low=low, high=high, off=off, why=why)
    return dataclasses.field(default=default, metadata=dict(meta, metavar=metavar, sampling=sampling))


def _when_sampling(arguments: Callable[["Search"], dict]) -> Callable:
    return lambda s, context: arguments(s) if s.sampling else {}


def _ct2_topk(s: "Search") -> dict:
    # CTranslate2 takes top-k 1 for greedy search, one hypothesis: the smallest top-p draws the same (_ct2_topp)
    return {"sampling_topk": 0 if s.sampling_topk in (None, 1) else s.sampling_topk}  # 0: the whole vocabulary


def _ct2_topp(s: "Search") -> dict:
    if s.sampling_topk == 1:
        return {"sampling_topp": MIN_TOPP}
    return {"sampling_topp": 1.0 if s.sampling_topp is None else s.sampling_topp}


RANKED = Elsewhere("the contract ranks the engine's hypotheses by fairseq's score and keeps the nbest best")
SEEDED = Elsewhere("the engine's generator is seeded around the call (Translator._seeded)")


@dataclasses.dataclass(frozen=True)
class Search:
    """A call's search options, checked, the same meaning in every engine: fairseq-generate's
    ``--beam``, ``--lenpen``, ``--max-len-b`` (``--max-len-a 0``), ``--nbest``, ``--sampling``,
    ``--sampling-topk``, ``--sampling-topp``, ``--temperature``, ``--seed``,
    ``--no-repeat-ngram-size``, ``--min-len``. With ``sampling`` the ``beam`` hypotheses are
    samples drawn one token at a time (from the ``sampling_topk`` most likely tokens, or the
    fewest whose probability reaches ``sampling_topp``; None: the whole vocabulary), at
    ``temperature``; ``seed`` (None: not seeded) makes a call's samples the same every time.
    The ``nbest`` best hypotheses by score come back. ``min_len``: no end of sentence before
    that many tokens (a forced target-language token counts; 1, fairseq's default: none at the
    first step); with ``min_len == max_len`` every translation is exactly ``max_len`` tokens and
    its end of sentence, the same work on every engine."""

    beam: int = option(
        5,
        "beam size (with --sampling: the samples drawn)",
        "count",
        {
            "fairseq": "beam",
            "ctranslate2": lambda s, context: {"beam_size": 1 if s.sampling else s.beam, "num_hypotheses": s.beam},
            "transformers": lambda s, context: {
                "num_beams": 1 if s.sampling else s.beam,
                "num_return_sequences": s.beam,
            },
        },
    )
    lenpen: float = option(
        1.0,
        "length penalty",
        "real",
        {
            "fairseq": "lenpen",
            "ctranslate2": "length_penalty",
            "transformers": To(
                lambda s, context: {} if s.sampling else {"length_penalty": s.lenpen},
                limit=Limit(
                    0.0,
                    1.0,
                    "generate keeps the finished hypotheses that rank best by its own count of their length, not "
                    "fairseq's: a negative penalty then puts a short one first that fairseq's search never finished, "
                    "one above 1 drops from the n-best some that fairseq keeps (tests/hub/test_engine_contract.py)",
                ),
            ),
        },
        low=-MAX_LENPEN,
        high=MAX_LENPEN,
        why="a length to a larger power overflows the scores of long translations",
    )
    max_len: int = option(
        200,
        "the most tokens of a translation",
        "count",
        {
            "fairseq": lambda s, context: {"max_len_a": 0, "max_len_b": s.max_len},
            "ctranslate2": "max_decoding_length",
            "transformers": lambda s, context: {"max_new_tokens": s.max_len + 1},  # and the end of sentence
        },
    )
    nbest: int = option(
        1,
        "translations per line, best first (at most --beam)",
        "count",
        {"fairseq": RANKED, "ctranslate2": RANKED, "transformers": RANKED},
        metavar="N",
    )
    sampling: bool = option(
        False,
        "draw --beam samples instead of a beam search",
        "flag",
        {
            "fairseq": "sampling",
            "ctranslate2": Elsewhere("a beam of 1 and beam hypotheses (beam's entry) samples"),
            "transformers": lambda s, context: {"do_sample": True} if s.sampling else {},
        },
    )
    sampling_topk: Optional[int] = option(
        None,
        "sample from the K most likely tokens (default: all)",
        "count",
        {
            "fairseq": lambda s, context: {"sampling_topk": -1 if s.sampling_topk is None else s.sampling_topk},
            "ctranslate2": _when_sampling(_ct2_topk),
            "transformers": _when_sampling(lambda s: {"top_k": s.sampling_topk or 0}),
        },
        metavar="K",
        sampling=True,
    )
    sampling_topp: Optional[float] = option(
        None,
        "sample from the fewest tokens whose probability reaches P (default: all)",
        "real",
        {
            "fairseq": lambda s, context: {"sampling_topp": -1.0 if s.sampling_topp is None else s.sampling_topp},
            "ctranslate2": _when_sampling(_ct2_topp),
            "transformers": _when_sampling(lambda s: {"top_p": 1.0 if s.sampling_topp is None else s.sampling_topp}),
        },
        low=MIN_TOPP,
        high=1.0,
        why="its least is the smallest float32, which every engine computes p in",
        metavar="P",
        sampling=True,
    )
    temperature: float = option(
        1.0,
        "sampling temperature",
        "real",
        {
            "fairseq": "temperature",
            "ctranslate2": _when_sampling(lambda s: {"sampling_temperature": s.temperature}),
            "transformers": _when_sampling(lambda s: {"temperature": s.temperature}),
        },
        low=MIN_TEMPERATURE,
        high=MAX_TEMPERATURE,
        sampling=True,
    )
    seed: Optional[int] = option(
        None,
        "seed of the samples: the same every run on one engine; each engine (fairseq, CTranslate2, transformers) "
        "draws its own, so one seed gives other samples on another (default: not seeded)",
        "whole",
        {"fairseq": SEEDED, "ctranslate2": SEEDED, "transformers": SEEDED},
        low=0,
        high=MAX_SEED,
        sampling=True,
    )
    no_repeat_ngram_size: int = option(
        0,
        "no n-gram of this size twice in a translation",
        "whole",
        {
            "fairseq": "no_repeat_ngram_size",
            "ctranslate2": "no_repeat_ngram_size",
            "transformers": "no_repeat_ngram_size",
        },
        low=2,
        off=0,
        why="with 1 a translation could never end on every engine",  # transformers counts the start as generated
        metavar="N",
    )
    min_len: int = option(
        1,
        "no end of sentence before this many tokens (a forced target-language token counts; 1: none at the first "
        "step; --min-len equal to --max-len gives every translation exactly --max-len tokens)",
        "count",
        {
            "fairseq": "min_len",
            "ctranslate2": To(
                # with the default 1 fairseq forbids the end of sentence at the first step only, which a forced
                # token already fills: 0
                lambda s, context: {
                    "min_decoding_length": s.min_len if not context.get("prefix") or s.min_len > 1 else 0
                },
                difference=Limit(
                    None,
                    1,
                    "CTranslate2 takes the end of sentence out before normalizing a step's distribution, fairseq after",
                ),
            ),
            "transformers": lambda s, context: {"min_new_tokens": s.min_len} if s.min_len > 1 else {},
        },
        metavar="N",
    )

    def replace(self, **changes) -> "Search":
        """This search with ``changes``."""
        return dataclasses.replace(self, **changes)


FIELDS = {field.name: field for field in dataclasses.fields(Search)}
SAMPLING = tuple(name for name, field in FIELDS.items() if field.metadata["sampling"])


def _declared() -> None:
    """Every field says how every engine takes it (a field without an engine's entry is refused
    when this module loads)."""
    for name, field in FIELDS.items():
        missing = set(ENGINES) - set(field.metadata["engines"])
        if missing:
            raise TypeError(f"the search option {name} does not say how {', '.join(sorted(missing))} takes it")


_declared()


# ---- a call's values -------------------------------------------------------------------------


def _shown(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _bound(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def range_text(low, high) -> str:
    """A range as a message says it (``from low to high``, ``at least low``, ``at most high``)."""
    if low is not None and high is not None:
        return f"from {_bound(low)} to {_bound(high)}"
    return f"at least {_bound(low)}" if low is not None else f"at most {_bound(high)}"


def check_value(name: str, value):
    """``value`` of the option ``name`` within its own declaration (its kind and range; None
    where the default is None), else one HltmtConfigError naming it."""
    meta = FIELDS[name].metadata
    kind, low, high = meta["kind"], meta["low"], meta["high"]
    if value is None and FIELDS[name].default is None:
        return None
    if kind == "flag":
        if not isinstance(value, bool):
            raise HltmtConfigError(f"{name} must be True or False, got {value!r:.60}")
        return value
    if kind in ("count", "whole"):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            what = "a whole number of at least 1" if kind == "count" else "a whole number"
            raise HltmtConfigError(f"{name} must be {what}, got {value!r:.60}")
        value, low = int(value), 1 if kind == "count" else low
    else:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise HltmtConfigError(f"{name} must be a number, got {value!r:.60}")
        if not math.isfinite(float(value)):
            raise HltmtConfigError(f"{name} must be a finite number, got {value}")
        value = float(value)
    if value == meta["off"] or not ((low is not None and value < low) or (high is not None and value > high)):
        return value
    shown = range_text(low, high)
    if meta["off"] is not None:
        shown = f"{_shown(meta['off'])} (off) or {shown}"
    why = f" ({meta['why']})" if meta["why"] else ""
    raise HltmtConfigError(f"{name} must be {shown}, got {_shown(value)}{why}")


def checked(options: dict) -> Search:
    """A :class:`Search` of ``options`` (a name of :class:`Search` each, the others their
    defaults), each value within its own declaration (:func:`check_value`); an unknown name is
    one HltmtConfigError naming it."""
    unknown = sorted(set(options) - set(FIELDS))
    if unknown:
        raise HltmtConfigError(f"{unknown[0]!r:.60} is not a search option (they are: {', '.join(FIELDS)})")
    return Search(**{name: check_value(name, value) for name, value in options.items()})


def given_sampling_options(search: Search) -> list:
    """The options of :data:`SAMPLING` given a value other than their default."""
    return [name for name in SAMPLING if getattr(search, name) != FIELDS[name].default]


# ---- each engine's arguments and ranges ------------------------------------------------------


def engine_arguments(search: Search, engine: str, **context) -> dict:
    """The arguments ``engine``'s search takes for ``search`` (its fields' entries of that engine
    merged in field order); ``context``: what an entry may depend on besides the options (e.g.
    CTranslate2's ``prefix``: whether a target-language token is forced first)."""
    out: dict = {}
    for name, field in FIELDS.items():
        argument = field.metadata["engines"][engine].argument
        if isinstance(argument, str):
            out[argument] = getattr(search, name)
        elif callable(argument):
            out.update(argument(search, context))
    return out


def limits(engine: str) -> Dict[str, Limit]:
    """``engine``'s own refused ranges of the options (the contract refuses a value outside them)."""
    return {
        name: f.metadata["engines"][engine].limit for name, f in FIELDS.items() if f.metadata["engines"][engine].limit
    }


def differences(engine: str) -> Dict[str, Limit]:
    """``engine``'s accepted ranges outside which it gives other lines than the checkpoint's."""
    entries = {name: f.metadata["engines"][engine] for name, f in FIELDS.items()}
    return {name: entry.difference for name, entry in entries.items() if entry.difference}


# ---- the command line ----------------------------------------------------------------------


def flag_of(name: str) -> str:
    """The command line's flag of the option ``name``."""
    return "--" + name.replace("_", "-")


def _help(name: str, helps: dict) -> str:
    meta = FIELDS[name].metadata
    text = helps.get(name, meta["help"])
    if meta["low"] is not None or meta["high"] is not None:
        shown = range_text(meta["low"], meta["high"])
        text += f"; {_shown(meta['off'])}: off, else {shown}" if meta["off"] is not None else f"; {shown}"
    return text


def add_arguments(parser, names=None, helps: Optional[dict] = None) -> None:
    """The options ``names`` (default: every field) on ``parser``: flag, type, metavar, default
    and help (``helps``: a command's own words for some) with the range, from the declarations."""
    helps = helps or {}
    for name in names or FIELDS:
        field, meta = FIELDS[name], FIELDS[name].metadata
        if meta["kind"] == "flag":
            parser.add_argument(flag_of(name), action="store_true", help=_help(name, helps))
            continue
        kind = float if meta["kind"] == "real" else int  # the commands' parser reads them bounded (paths.py)
        extra = {"metavar": meta["metavar"]} if meta["metavar"] else {}
        parser.add_argument(flag_of(name), type=kind, default=field.default, help=_help(name, helps), **extra)


def of_args(args, names=None) -> dict:
    """The options ``names`` (default: every field) of parsed ``args``."""
    return {name: getattr(args, name) for name in names or FIELDS}


def as_flags(message: str) -> str:
    """A refusal of the Python API's options said in the command line's flags."""
    message = message.replace("sampling=True (--sampling)", "--sampling")
    names = sorted((name for name in FIELDS if name != "sampling"), key=len, reverse=True)
    return re.sub(rf"\b({'|'.join(names)})\b", lambda m: flag_of(m.group(1)), message)
