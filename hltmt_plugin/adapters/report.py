"""Adapter parameters by name: which are adapters, of which kind and language, and the
parameter report (what each language adds, like MAD-X's table 5)."""

from typing import Dict, List, Optional, Tuple

from torch import nn

from hltmt_plugin.adapters.modules import INVERTIBLE_ADAPTERS, LANGUAGE_ADAPTERS, SHARED_ADAPTER


def is_adapter_parameter(name: str) -> bool:
    return adapter_kind(name) is not None


def adapter_kind(name: str) -> Optional[str]:
    """``language`` / ``shared`` / ``invertible`` for an adapter parameter name, else None."""
    parts = name.split(".")
    for part, kind in (
        (LANGUAGE_ADAPTERS, "language"),
        (SHARED_ADAPTER, "shared"),
        (INVERTIBLE_ADAPTERS, "invertible"),
    ):
        if part in parts:
            return kind
    return None


def adapter_language(name: str) -> Optional[str]:
    """The language of a per-language adapter parameter name (None for shared / non-adapter)."""
    parts = name.split(".")
    for marker in (LANGUAGE_ADAPTERS, INVERTIBLE_ADAPTERS):
        if marker in parts:
            i = parts.index(marker)
            if marker == INVERTIBLE_ADAPTERS:
                i += 1  # invertible_adapters.adapters.<lang>
            return parts[i + 1] if i + 1 < len(parts) else None
    return None


def bottleneck_parameters(dim: int, hidden: int) -> int:
    """``2md + d + m``: Houlsby's count for one adapter."""
    return 2 * dim * hidden + dim + hidden


def parameter_report(model: nn.Module) -> Dict[str, object]:
    """Parameters added by adapters, per language and as a share of the base model."""
    base = 0
    per_lang: Dict[str, Dict[str, int]] = {}
    shared = 0
    for name, p in model.named_parameters():
        kind = adapter_kind(name)
        if kind is None:
            base += p.numel()
        elif kind == "shared":
            shared += p.numel()
        else:
            key = f"{name.split('.')[0]} {kind}"
            counts = per_lang.setdefault(adapter_language(name), {})
            counts[key] = counts.get(key, 0) + p.numel()
    return {
        "base": base,
        "per_language": per_lang,
        "shared": shared,
        "total": base + shared + sum(sum(c.values()) for c in per_lang.values()),
    }


def format_parameter_report(report: Dict[str, object]) -> List[str]:
    base = report["base"]

    def share(n):
        return f"{100.0 * n / base:.2f}%" if base else "n/a"

    lines = [f"adapters: base model {base:,} parameters; added (+params, % of base):"]
    per_lang = report["per_language"]
    groups: Dict[Tuple[Tuple[str, int], ...], List[str]] = {}
    order = ["encoder language", "encoder invertible", "decoder language", "decoder invertible"]
    for lang, counts in per_lang.items():
        key = tuple(sorted(counts.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))
        groups.setdefault(key, []).append(lang)
    for counts, langs in groups.items():
        total = sum(n for _, n in counts)
        detail = ", ".join(f"{key} {n:,}" for key, n in counts)
        lines.append(f"  per language ({','.join(langs)}): +{total:,} ({share(total)}) = {detail}")
    if report["shared"]:
        lines.append(f"  shared adapters (all languages): +{report['shared']:,} ({share(report['shared'])})")
    added = report["total"] - base
    lines.append(f"  all adapters, {len(per_lang)} language(s): +{added:,} ({share(added)})")
    return lines
