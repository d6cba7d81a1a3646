"""Parameter-efficient training: train chosen parameter groups only.

``--train-only GROUP[:LANG[+LANG...]],...`` freezes every parameter outside the groups
(``requires_grad = False``, so fairseq's optimizer never holds them and they stay
bit-identical). Groups:

================== ==========================================================================
adapters           every adapter; with languages: their language and invertible adapters
language-adapters  the language adapters (of the languages given)
shared-adapters    the shared adapters (no language)
invertible-adapters the invertible adapters (of the languages given)
slp                the T pool modules of the SLP
gate               the SLP gate
universal          the universal layer
layer-norms        every layer norm
lang-token-rows    the rows of the language tokens ``__xx__`` (of the languages given) in the
                   encoder's embedding table, where ``--encoder-langtok`` puts them; the other
                   rows keep their values (the row's gradient alone is kept)
================== ==========================================================================

Moving one language's adapters between checkpoints of the same base and adding a language
to a trained model are :mod:`hltmt_plugin.adapters.files`; whether the stages of a training run
reach each chosen group is checked with the stages (:func:`hltmt_plugin.tasks.stages.check_trains_in_run`).
"""

import logging
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import torch
from torch import Tensor, nn

from hltmt_plugin.adapters.report import adapter_kind, adapter_language
from hltmt_plugin.config import OptionGroup
from hltmt_plugin.errors import HltmtConfigError
from hltmt_plugin.languages import check_known, split_list
from hltmt_plugin.pool.keys import GATE_PARAMETERS, POOL_MODULES, UNIVERSAL_MODULE

logger = logging.getLogger(__name__)

ADAPTERS, LANGUAGE_ADAPTERS, SHARED_ADAPTERS, INVERTIBLE_ADAPTERS = (
    "adapters",
    "language-adapters",
    "shared-adapters",
    "invertible-adapters",
)
SLP, GATE, UNIVERSAL, LAYER_NORMS, LANG_TOKEN_ROWS = "slp", "gate", "universal", "layer-norms", "lang-token-rows"
GROUPS = (
    ADAPTERS,
    LANGUAGE_ADAPTERS,
    SHARED_ADAPTERS,
    INVERTIBLE_ADAPTERS,
    SLP,
    GATE,
    UNIVERSAL,
    LAYER_NORMS,
    LANG_TOKEN_ROWS,
)
WITH_LANGS = (ADAPTERS, LANGUAGE_ADAPTERS, INVERTIBLE_ADAPTERS, LANG_TOKEN_ROWS)


@dataclass
class PeftConfig(OptionGroup):
    train_only: Optional[str] = field(
        default=None,
        metadata={
            "help": "train only these parameter groups, comma-separated, each optionally "
            "restricted to languages (GROUP:LANG+LANG): adapters, language-adapters, "
            "shared-adapters, invertible-adapters, slp, gate, universal, layer-norms, "
            "lang-token-rows; everything else is frozen (e.g. adapters:hi,"
            "lang-token-rows:hi to add the language hi)"
        },
    )


def parse_train_only(spec: str, langs: List[str]) -> List[Tuple[str, Optional[List[str]]]]:
    items = []
    for item in split_list(spec):
        group, _, which = item.partition(":")
        if group not in GROUPS:
            raise HltmtConfigError(f"--train-only: unknown group {group!r}; groups are {', '.join(GROUPS)}")
        chosen = [lang for lang in which.split("+") if lang] if which else None
        if chosen is not None and group not in WITH_LANGS:
            raise HltmtConfigError(f"--train-only: group {group} has no languages (got {item!r})")
        check_known(chosen or [], langs, f"--train-only {item}")
        items.append((group, chosen))
    if not items:
        raise HltmtConfigError("--train-only is empty: name at least one parameter group")
    return items


def _in_group(name: str, group: str, langs: Optional[List[str]], layer_norm_names) -> bool:
    kind = adapter_kind(name)
    lang_ok = langs is None or adapter_language(name) in langs
    if group == ADAPTERS:
        return kind is not None and (langs is None or (kind != "shared" and lang_ok))
    if group == LANGUAGE_ADAPTERS:
        return kind == "language" and lang_ok
    if group == SHARED_ADAPTERS:
        return kind == "shared"
    if group == INVERTIBLE_ADAPTERS:
        return kind == "invertible" and lang_ok
    if group == SLP:
        return name.startswith(POOL_MODULES)
    if group == GATE:
        return name.startswith(GATE_PARAMETERS)
    if group == UNIVERSAL:
        return name.startswith(UNIVERSAL_MODULE)
    if group == LAYER_NORMS:
        return name in layer_norm_names
    return False


def apply_train_only(model, cfg: PeftConfig, args) -> None:
    """Freeze everything outside ``--train-only``; log what trains."""
    handles = getattr(model, "_train_only_hooks", [])
    for handle in handles:
        handle.remove()
    model._train_only_hooks = []
    model.train_only_items = None
    if not cfg.train_only:
        return
    items = parse_train_only(cfg.train_only, model.encoder.languages.langs)
    layer_norm_names = {
        f"{m}.{p}" if m else p
        for m, mod in model.named_modules()
        if isinstance(mod, nn.LayerNorm)
        for p, _ in mod.named_parameters(recurse=False)
    }
    params = dict(model.named_parameters())
    chosen, rows = set(), {}
    for group, langs in items:
        if group == LANG_TOKEN_ROWS:  # the rows of the encoder's table, which reads the language token
            for lang in langs or model.encoder.languages.langs:
                name, (_, index) = next(iter(model.language_token_rows(lang).items()))
                rows.setdefault(name, set()).add(index)
            continue
        hit = {n for n in params if _in_group(n, group, langs, layer_norm_names)}
        if not hit:
            raise HltmtConfigError(
                f"--train-only {group}{':' + '+'.join(langs) if langs else ''} selects no "
                f"parameter of this model{_why_empty(group, langs, model)}"
            )
        chosen |= hit
    rows = {n: sorted(r) for n, r in rows.items() if n not in chosen}
    if rows and float(getattr(args, "weight_decay", 0.0) or 0.0) > 0:
        raise HltmtConfigError(
            "--train-only lang-token-rows trains single rows of an embedding table, and "
            "--weight-decay would move its other rows: use --weight-decay 0"
        )
    for name, p in params.items():
        p.requires_grad_(name in chosen or name in rows)
    for name, indices in rows.items():
        p = params[name]
        mask = torch.zeros(p.size(0), 1, dtype=p.dtype, device=p.device)
        mask[indices] = 1
        model._train_only_hooks.append(p.register_hook(_RowMask(mask)))
    model.train_only_rows = rows
    model.train_only_items = items
    model._train_only_hooks.append(model.register_forward_hook(_keep_graph))
    total = sum(p.numel() for p in params.values())
    trained = sum(params[n].numel() for n in chosen) + sum(len(r) * params[n].size(1) for n, r in rows.items())
    logger.info(
        f"train only {cfg.train_only}: {trained:,} of {total:,} parameters train "
        f"({100.0 * trained / total:.2f}%), everything else is frozen"
    )


def _keep_graph(module, inputs, output):
    """Forward hook of a ``--train-only`` model: a training batch that reaches no trainable
    parameter (``--train-only universal`` and a batch whose targets all go through the pool,
    ``adapters:hi`` and a batch without hi) still returns an output with a graph, so that
    fairseq's backward does not fail on it. No parameter gets a gradient from it, so the
    optimizer leaves every parameter as it is for that batch (the idle-gradient rule)."""
    if not module.training or not torch.is_grad_enabled() or not isinstance(output, tuple):
        return None
    x = output[0]
    if not torch.is_tensor(x) or x.requires_grad or not x.is_floating_point():
        return None
    anchor = torch.zeros((), dtype=x.dtype, device=x.device, requires_grad=True)  # not a parameter
    return (x + anchor, *output[1:])


class _RowMask:
    """Gradient hook: keep the gradient of the chosen rows only."""

    def __init__(self, mask: Tensor):
        self.mask = mask

    def __call__(self, grad: Tensor) -> Tensor:
        if self.mask.device != grad.device or self.mask.dtype != grad.dtype:  # once, not per backward
            self.mask = self.mask.to(device=grad.device, dtype=grad.dtype)
        return grad * self.mask


def _why_empty(group, langs, model) -> str:
    layout = getattr(model.encoder, "adapter_layout", None)
    if group in (ADAPTERS, LANGUAGE_ADAPTERS, SHARED_ADAPTERS, INVERTIBLE_ADAPTERS):
        if layout is None:
            return ": it has no adapters (add --language-adapters, --shared-adapters or --invertible-adapters)"
        option = {
            LANGUAGE_ADAPTERS: "--language-adapters",
            SHARED_ADAPTERS: "--shared-adapters",
            INVERTIBLE_ADAPTERS: "--invertible-adapters",
        }.get(group)
        missing = [lang for lang in langs or [] if lang not in layout.adapter_langs]
        if missing:
            return f": {','.join(missing)} has no adapters (add it to --adapter-langs)"
        if option:
            return f" (add {option})"
    return ""
