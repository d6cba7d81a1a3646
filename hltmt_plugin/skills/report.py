"""Skill parameters by name and the skill report: parameters per skill and, per direction,
the share of the model it activates."""

from typing import Dict, List, Optional, Sequence, Tuple

from torch import nn

SKILL_FFN, SKILL_ATTN = "skill_ffn", "skills"  # module names that mark skill parameters


def is_skill_parameter(name: str) -> bool:
    return skill_of(name) is not None


def skill_of(name: str) -> Optional[Tuple[str, str]]:
    """(``ffn`` | ``attention``, skill) of a skill parameter name, else None."""
    parts = name.split(".")
    if SKILL_FFN in parts:
        return "ffn", parts[parts.index(SKILL_FFN) + 2]
    if SKILL_ATTN in parts and "self_attn" in parts:
        return "attention", parts[parts.index(SKILL_ATTN) + 1]
    return None


def skill_report(model: nn.Module, layout, directions: Optional[Sequence[str]] = None) -> Dict:
    """Parameters per skill and, per direction, the parameters it activates (share of all)."""
    total = 0
    per_skill: Dict[str, Dict[str, int]] = {"ffn": {}, "attention": {}}
    for name, p in model.named_parameters():
        total += p.numel()
        kind = skill_of(name)
        if kind is not None:
            per_skill[kind[0]][kind[1]] = per_skill[kind[0]].get(kind[1], 0) + p.numel()
    skill_params = sum(sum(v.values()) for v in per_skill.values())
    out = {"total": total, "skill_parameters": skill_params, "per_skill": per_skill, "directions": {}}
    for key in directions if directions is not None else layout.train_directions:
        src = key.split("-")[0]
        ffn = sum(per_skill["ffn"].get(s, 0) for s in layout.matrix.directions.get(key, []))
        attn = per_skill["attention"].get(src, 0)
        active = total - skill_params + ffn + attn
        out["directions"][key] = {
            "skills": list(layout.matrix.directions.get(key, [])),
            "active_skill": ffn + attn,
            "active": active,
            "share": active / total,
        }
    return out


def format_skill_report(report: Dict, layout) -> List[str]:
    layers = ",".join(map(str, layout.layers))
    lines = [
        f"skills: encoder layers {layers}; model {report['total']:,} parameters, "
        f"{report['skill_parameters']:,} in skills"
    ]
    for kind, label in (("ffn", "skill FFN"), ("attention", "language Q/K/V")):
        counts = report["per_skill"][kind]
        if counts:
            groups: Dict[int, List[str]] = {}
            for skill, n in counts.items():
                groups.setdefault(n, []).append(skill)
            lines.append(f"  {label}: " + "; ".join(f"{','.join(s)}: {n:,} each" for n, s in groups.items()))
    for key, d in report["directions"].items():
        lines.append(
            f"  {key}: skills {'+'.join(d['skills']) or '-'}; active {d['active']:,} of "
            f"{report['total']:,} parameters ({100.0 * d['share']:.1f}%)"
        )
    others = len(layout.matrix.directions) - len(report["directions"])
    if others > 0:
        lines.append(f"  (+{others} more direction(s) in the skill matrix, e.g. for decoding without retraining)")
    return lines
