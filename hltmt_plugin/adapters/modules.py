"""The adapter modules: the bottleneck, the invertible (NICE) adapter, and the per-language
collections routed per row (:class:`AdapterStack`, :class:`InvertibleAdapters`).

Every adapter is a residual bottleneck ``delta(h) = U act(D h)`` (``D: d -> m``, ``U: m -> d``,
ReLU as in MAD-X). ``U`` starts at exactly zero, so a model with freshly added adapters
computes exactly what the model without them computes; ``D`` starts as a default ``nn.Linear``.
"""

from typing import Callable, List, Optional, Sequence

import torch
from torch import Tensor, nn

from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.routing import PassRows, route

ADAPTER_IDS = "adapters"  # the PassRows ids of adapters: the row's source (encoder) or target (decoder) language

# Module names that mark adapter parameters in a state dict (see adapters.report).
LANGUAGE_ADAPTERS, SHARED_ADAPTER, INVERTIBLE_ADAPTERS = "language_adapters", "shared_adapter", "invertible_adapters"


class Bottleneck(nn.Module):
    """``delta(h) = U relu(D h)``, ``2md + d + m`` parameters; ``U`` starts at zero."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.down = nn.Linear(dim, hidden)
        self.up = nn.Linear(hidden, dim)
        nn.init.zeros_(self.down.bias)
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)

    def forward(self, h: Tensor) -> Tensor:
        return self.up(torch.relu(self.down(h)))


class InvertibleAdapter(nn.Module):
    """NICE coupling ``o1 = e1 + F(e2)``, ``o2 = e2 + G(o1)`` with an exact inverse."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        if dim % 2:
            raise HltmtConfigError(f"an invertible adapter needs an even dimension, got {dim}")
        self.half = dim // 2
        self.f = Bottleneck(self.half, hidden)
        self.g = Bottleneck(self.half, hidden)

    def forward(self, e: Tensor) -> Tensor:
        e1, e2 = e[..., : self.half], e[..., self.half :]
        o1 = e1 + self.f(e2)
        o2 = e2 + self.g(o1)
        return torch.cat([o1, o2], dim=-1)

    def inverse(self, o: Tensor) -> Tensor:
        o1, o2 = o[..., : self.half], o[..., self.half :]
        e2 = o2 - self.g(o1)
        e1 = o1 - self.f(e2)
        return torch.cat([e1, e2], dim=-1)


def language_fns(
    per_lang: nn.ModuleDict, langs: Sequence[str], side: str, kind: str, method: Optional[str] = None
) -> List[Callable]:
    """One callable per language of ``langs`` (``route``'s ``fns``); a language without an
    adapter gets one that raises an error naming it (only if a row needs it)."""
    what = "source" if side == "encoder" else "target"

    def missing(lang):
        def fail(*_):
            raise HltmtInputError(
                f"a sentence with {what} language {lang!r} reached the {side}, which has no {kind} for "
                f"{lang!r} (adapters exist for {','.join(per_lang.keys())}): add it to --adapter-langs "
                "(and train its adapters) or leave it out of the batch"
            )

        return fail

    fns = []
    for lang in langs:
        module = per_lang[lang] if lang in per_lang else None
        fns.append(missing(lang) if module is None else (getattr(module, method) if method else module))
    return fns


class _PerLanguage(nn.Module):
    """Shared by the per-language collections (``langs``: the languages that row ids index,
    ``--langs``; only some of them may have adapters)."""

    def _device_dtype(self):
        p = next(self.parameters())
        return p.device, p.dtype


class AdapterStack(_PerLanguage):
    """The adapters at one place of one layer (MAD-X eq. 2, AdapterHub's ``Stack``): the row's
    language adapter, then the shared one, each taking the previous output and the same skip
    ``r``: ``h1 = delta_lang(h) + r``, ``h2 = delta_shared(h1) + r``."""

    def __init__(
        self,
        dim: int,
        language_dim: Optional[int],
        adapter_langs: Sequence[str],
        shared_dim: Optional[int],
        langs: Optional[Sequence[str]] = None,
    ):
        super().__init__()
        self.dim, self.language_dim = dim, language_dim
        self.langs = list(adapter_langs if langs is None else langs)
        self.language_adapters = (
            nn.ModuleDict({lang: Bottleneck(dim, language_dim) for lang in adapter_langs}) if language_dim else None
        )
        self.shared_adapter = Bottleneck(dim, shared_dim) if shared_dim else None

    def add_language(self, lang: str) -> None:
        if self.language_adapters is not None and lang not in self.language_adapters:
            self.language_adapters[lang] = Bottleneck(self.dim, self.language_dim).to(*self._device_dtype())

    def forward(self, h: Tensor, r: Tensor, rows: PassRows) -> Tensor:
        if self.language_adapters is not None:
            fns = language_fns(self.language_adapters, self.langs, rows.side, "language adapter")
            h = route(h, rows.plan(ADAPTER_IDS), fns, dim=1) + r
        if self.shared_adapter is not None:
            h = self.shared_adapter(h) + r
        return h


class InvertibleAdapters(_PerLanguage):
    """One invertible adapter per language, chosen per row."""

    def __init__(self, dim: int, hidden: int, adapter_langs: Sequence[str], langs: Optional[Sequence[str]] = None):
        super().__init__()
        self.dim, self.hidden = dim, hidden
        self.langs = list(adapter_langs if langs is None else langs)
        self.adapters = nn.ModuleDict({lang: InvertibleAdapter(dim, hidden) for lang in adapter_langs})

    def add_language(self, lang: str) -> None:
        if lang not in self.adapters:
            self.adapters[lang] = InvertibleAdapter(self.dim, self.hidden).to(*self._device_dtype())

    def forward(self, x: Tensor, rows: PassRows, dim: int) -> Tensor:
        fns = language_fns(self.adapters, self.langs, rows.side, "invertible adapter")
        return route(x, rows.plan(ADAPTER_IDS), fns, dim=dim)

    def inverse(self, x: Tensor, rows: PassRows, dim: int) -> Tensor:
        fns = language_fns(self.adapters, self.langs, rows.side, "invertible adapter", "inverse")
        return route(x, rows.plan(ADAPTER_IDS), fns, dim=dim)
