"""The one check of a model, on every route a model enters.

A model enters through a file read with torch (a checkpoint to translate, export, average,
fine-tune or resume from, an adapter file, a ``pytorch_model.bin``: every one read by the
plugin's one call of ``torch.load``, ``compat/safe_loading``, which calls :func:`check_loaded`),
through ``hltmt-import`` (a transformers folder's weights and the
options read from its ``config.json``: :func:`check_options`, :func:`check_finite`) and through
a new model fairseq-train builds from its command line (the task's ``build_model``:
:func:`check_options`). Refused, each in one line naming the option or weight:

- an option outside what fairseq's modules accept, before fairseq asserts (:data:`RULES`): an
  embedding dimension that the attention heads do not divide, a dropout probability outside
  [0, 1], an activation fairseq's transformer does not compute, a size below one;
- a weight holding NaN or an infinity (a diverged run, a damaged file): every engine would turn it
  into a wrong line, or none.

The rules are read from the options' names, whatever the architecture (fairseq's
``transformer``, the plugin's, a baseline): every option ending in ``dropout`` or ``layerdrop``
is a probability; every ``*_attention_heads`` divides its side's ``*_embed_dim``.
"""

import re
from typing import Callable, Iterator, List, Optional, Tuple

from hltmt_plugin.errors import HltmtConfigError, HltmtInputError

PROBABILITY = re.compile(r".*(dropout|layerdrop)$")
HEADS = re.compile(r"(encoder|decoder)_attention_heads$")
SIZES = re.compile(r"(encoder|decoder)_(embed_dim|ffn_embed_dim|attention_heads|output_dim)$")


def _options(model_cfg) -> dict:
    """The model's options as a plain map (a Namespace, fairseq's config or a dict)."""
    if model_cfg is None:
        return {}
    if isinstance(model_cfg, dict):
        return dict(model_cfg)
    if hasattr(model_cfg, "items"):  # omegaconf's DictConfig
        return {k: v for k, v in model_cfg.items()}
    return dict(vars(model_cfg))


def _number(value) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _probabilities(options: dict) -> Iterator[Tuple[str, str]]:
    for name, value in options.items():
        number = _number(value)
        if PROBABILITY.fullmatch(name) and number is not None and not 0.0 <= number <= 1.0:
            yield name, f"{value} is not a probability (0 to 1)"


def _sizes(options: dict) -> Iterator[Tuple[str, str]]:
    for name, value in options.items():
        number = _number(value)
        if SIZES.fullmatch(name) and number is not None and (number < 1 or number != int(number)):
            yield name, f"{value} is not a size of at least 1"


def _heads(options: dict) -> Iterator[Tuple[str, str]]:
    for name, heads in options.items():
        side = HEADS.fullmatch(name)
        dim = options.get(f"{side.group(1)}_embed_dim") if side else None
        if side and _number(heads) and _number(dim) and heads >= 1 and dim % heads:
            yield name, f"{heads} does not divide --{side.group(1)}-embed-dim {dim} (each head takes an equal share)"


def activations() -> List[str]:
    """The activations fairseq's transformer computes: its options' choices (fairseq 0.12's
    ``get_activation_fn`` also knows "swish", which returns a class, not a function)."""
    from fairseq.utils import get_available_activation_fns

    return list(get_available_activation_fns())


def _activation(options: dict) -> Iterator[Tuple[str, str]]:
    value = options.get("activation_fn")
    if value is not None and value not in activations():
        yield (
            "activation_fn",
            f"{str(value)[:40]!r} is not one fairseq's transformer computes ({', '.join(activations())})",
        )


# each rule: the model's options -> (option, what is wrong) for every option it refuses
RULES: List[Callable[[dict], Iterator[Tuple[str, str]]]] = [_sizes, _heads, _probabilities, _activation]


def problems(model_cfg) -> List[str]:
    """One line per option of ``model_cfg`` that fairseq's modules would refuse or misuse."""
    options = _options(model_cfg)
    return [f"--{name.replace('_', '-')} {why}" for rule in RULES for name, why in rule(options)]


def check_options(model_cfg, where: str) -> None:
    """The model's options within what fairseq's modules accept: the first that is not, one line."""
    found = problems(model_cfg)
    if found:
        raise HltmtConfigError(f"{where}: {found[0]}")


def _tensors(value, place: str = "") -> Iterator[Tuple[str, object]]:
    """Every tensor of a nested map or list, with where it lies (``a.b[2]``)."""
    import torch

    stack = [(place, value)]
    while stack:
        at, item = stack.pop()
        if isinstance(item, torch.Tensor):
            yield at, item
        elif isinstance(item, dict):
            stack.extend((f"{at}.{k}" if at else str(k), v) for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((f"{at}[{i}]", v) for i, v in enumerate(item))


def check_finite(weights, where: str) -> None:
    """Every floating-point tensor of ``weights`` (a state dict, or any nesting of maps and lists
    of tensors) finite; the first that holds NaN or an infinity, one line."""
    import torch

    for name, tensor in _tensors(weights):
        if tensor.is_floating_point() and tensor.numel() and not bool(torch.isfinite(tensor).all()):
            bad = "NaN" if bool(torch.isnan(tensor).any()) else "an infinity"
            raise HltmtInputError(f"{where}: the weight {name[:120]} holds {bad}: the model cannot translate")


def stored_options(state: dict):
    """The model's options a fairseq checkpoint stores (``cfg.model``, else ``args``), or None."""
    cfg = state.get("cfg")
    if cfg is not None:
        model = cfg.get("model") if hasattr(cfg, "get") else getattr(cfg, "model", None)
        if model is not None:
            return model
    return state.get("args")


def check_checkpoint(where: str, state: dict) -> None:
    """A fairseq checkpoint's model: its stored options and its weights (``state["model"]``);
    ``where`` names the file (``checkpoint x.pt``)."""
    check_options(stored_options(state), where)
    check_finite(state["model"], where)


def check_loaded(where: str, found) -> None:
    """What the plugin's one torch loader read from the file ``where`` names (``checkpoint
    x.pt``, ``adapter file hi.pt``): a fairseq checkpoint (a ``model`` map with its ``cfg`` or
    ``args``) checked whole (:func:`check_checkpoint`), any other file's tensors finite (an
    adapter file, a transformers folder's ``pytorch_model.bin``)."""
    if isinstance(found, dict) and isinstance(found.get("model"), dict) and ("cfg" in found or "args" in found):
        check_checkpoint(where, found)
    else:
        check_finite(found, where)
