"""Encoder skills (SkillNet-X): sparsely activated skill FFNs and language-specific attention.

- **Skill FFN**: in each chosen encoder layer the dense FFN becomes ``n`` parallel FFNs, one
  per named skill. A *skill matrix* says which skills each direction ``src-tgt`` activates;
  the FFN's output is the mean of the active skills' outputs. Each distinct set of active
  skills is one routing id, so :func:`~hltmt_plugin.modules.routing.route` groups the rows of a
  mixed batch by their set and runs only that set's skills on them: an inactive skill is
  neither computed nor given a gradient.
- **Skill attention**: in the chosen layers, one set of Q/K/V projections per language
  (the language skills), chosen per sentence by its source language; the output projection
  stays shared. Each language's attention is the call fairseq's ``MultiheadAttention`` makes
  (``F.multi_head_attention_forward``) with that language's Q/K/V.
- **Dense-to-skill initialisation**: every skill FFN starts as a copy of the layer's dense
  FFN and every language's Q/K/V as a copy of the dense ones, both for a fresh model and when
  a dense checkpoint (MNMT / HLT-MT) is loaded (``upgrade_state_dict_named`` converts its
  keys), so the converted model computes what the dense one did. The mean is computed as
  ``y_1 + sum_k (y_k - y_1) / n``, exactly ``y_1`` while the active skills agree.
- **New directions**: a direction absent from training runs with the skills the matrix
  gives it (the default matrix has an entry for every ordered pair of ``--langs``).

The default matrix (for translation): skills ``generic``, one per language of ``--langs``
and, when ``en`` is one of them, ``to_en`` / ``from_en``; direction ``s-t`` activates
``generic``, ``s`` (its source language), ``to_en`` if ``t`` is en and ``from_en`` if ``s`` is.
A JSON file given by ``--skill-matrix`` replaces it::

    {"skills": ["generic", "en", "de", "to_en", "from_en"],
     "directions": {"en-de": ["generic", "en", "from_en"], "de-en": ["generic", "de", "to_en"]}}

The layers stay fairseq's (``TransformerEncoderLayerBase`` or the adapter layer): the skill
modules replace the layer's ``self_attn`` and its FFN (``fc1``, activation and activation
dropout become the identity, ``fc2`` the skill FFN), so adapters after the sublayers and the
SLP in the decoder work unchanged around them. The rows' languages and skill sets are set by
the encoder around its forward pass in a :class:`RowSkills` that the layers share.
"""
import contextlib
import json
import logging
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fairseq import utils

from hltmt_plugin.config import OptionGroup
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.modules.routing import RoutePlan, route

logger = logging.getLogger(__name__)

GENERIC, TO_EN, FROM_EN = "generic", "to_en", "from_en"
SKILL_FFN, SKILL_ATTN = "skill_ffn", "skills"  # module names that mark skill parameters


@dataclass
class SkillConfig(OptionGroup):
    skill_ffn: bool = field(
        default=False, metadata={"help": "SkillNet-X skill FFNs: the FFN of each chosen encoder layer becomes one "
                                         "FFN per skill of the skill matrix; a sentence's direction activates some "
                                         "of them and the layer outputs their mean (needs --enable-lang-ids, or -s "
                                         "when decoding one source language)"})
    skill_attention: bool = field(
        default=False, metadata={"help": "SkillNet-X skill attention: one set of Q/K/V projections per language "
                                         "in each chosen encoder layer, chosen by the sentence's source language"})
    skill_layers: Optional[str] = field(
        default=None, metadata={"help": "comma-separated encoder layers (0-based) that get skills (default: all)"})
    skill_matrix: Optional[str] = field(
        default=None, metadata={"help": "JSON file {\"skills\": [...], \"directions\": {\"src-tgt\": [skills]}} "
                                        "giving the skills each direction activates (default: generic + the "
                                        "source language + to_en / from_en, for every pair of --langs)"})

    @property
    def enabled(self) -> bool:
        return self.skill_ffn or self.skill_attention


# ---------------------------------------------------------------------------------------
# the skill matrix


@dataclass
class SkillMatrix:
    skills: List[str]
    directions: Dict[str, List[str]]  # "src-tgt" -> active skills, in the order of `skills`

    def combos(self) -> List[Tuple[str, ...]]:
        """The distinct sets of active skills (the routing ids), in first-seen order."""
        seen: Dict[Tuple[str, ...], None] = {}
        for active in self.directions.values():
            seen.setdefault(tuple(active), None)
        return list(seen)


def default_matrix(langs: Sequence[str]) -> SkillMatrix:
    english = "en" in langs
    skills = [GENERIC, *langs] + ([TO_EN, FROM_EN] if english else [])
    directions = {}
    for s in langs:
        for t in langs:
            if s != t:
                active = {GENERIC, s} | ({TO_EN} if english and t == "en" else set()) | (
                    {FROM_EN} if english and s == "en" else set())
                directions[f"{s}-{t}"] = [k for k in skills if k in active]
    return SkillMatrix(skills, directions)


def load_matrix(path: str, langs: Sequence[str]) -> SkillMatrix:
    where = f"--skill-matrix {path}"
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise HltmtConfigError(f"{where}: cannot read the file ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise HltmtConfigError(f"{where}: not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    if not isinstance(data, dict) or not isinstance(data.get("skills"), list) or not isinstance(
            data.get("directions"), dict):
        raise HltmtConfigError(f'{where}: expected an object {{"skills": [names], "directions": '
                               f'{{"src-tgt": [names]}}}}')
    skills = data["skills"]
    bad = [s for s in skills if not isinstance(s, str) or not s.strip()]
    if bad or not skills:
        raise HltmtConfigError(f'{where}: "skills" must be a non-empty list of names, got {skills!r}')
    if len(set(skills)) != len(skills):
        raise HltmtConfigError(f'{where}: "skills" lists a skill twice: {",".join(skills)}')
    directions = {}
    for key, active in data["directions"].items():
        entry = f'{where}: direction "{key}"'
        parts = key.split("-")
        if len(parts) != 2 or not all(parts):
            raise HltmtConfigError(f"{entry}: directions are written src-tgt, e.g. en-de")
        unknown = [lang for lang in parts if lang not in langs]
        if unknown:
            raise HltmtConfigError(f"{entry} names language {','.join(unknown)}, not in --langs ({','.join(langs)})")
        if not isinstance(active, list) or not all(isinstance(s, str) for s in active):
            raise HltmtConfigError(f"{entry}: expected a list of skill names, got {active!r}")
        if not active:
            raise HltmtConfigError(f"{entry} activates no skill: give it at least one of {','.join(skills)}")
        unknown = [s for s in active if s not in skills]
        if unknown:
            raise HltmtConfigError(f"{entry} names skill {','.join(unknown)}, not in \"skills\" "
                                   f"({','.join(skills)})")
        directions[key] = [s for s in skills if s in active]
    if not directions:
        raise HltmtConfigError(f'{where}: "directions" is empty')
    return SkillMatrix(list(skills), directions)


SAVED_MATRIX = "skill_matrix_saved"  # args attribute: the matrix file's content, saved in checkpoints


def _matrix_of(cfg: SkillConfig, args, langs: Sequence[str]) -> SkillMatrix:
    """The matrix file (read again each time the model is built, so directions can be added
    for decoding); a checkpoint whose file is gone uses the copy saved in its arguments."""
    import os

    if not cfg.skill_matrix:
        return default_matrix(langs)
    saved = getattr(args, SAVED_MATRIX, None)
    if not os.path.exists(cfg.skill_matrix) and isinstance(saved, dict) and saved.get("path") == cfg.skill_matrix:
        logger.info(f"skills: {cfg.skill_matrix} is gone; using the copy of the skill matrix saved in the checkpoint")
        matrix = SkillMatrix(list(saved["skills"]), {k: list(v) for k, v in saved["directions"].items()})
    else:
        matrix = load_matrix(cfg.skill_matrix, langs)
    setattr(args, SAVED_MATRIX, {"path": cfg.skill_matrix, "skills": matrix.skills, "directions": matrix.directions})
    return matrix


@dataclass
class SkillPlan:
    cfg: SkillConfig
    langs: List[str]
    layers: List[int]
    matrix: SkillMatrix
    train_directions: List[str]


def plan_skills(cfg: SkillConfig, args, task) -> Optional[SkillPlan]:
    """Check the skill options against the task (before the model is built)."""
    if not cfg.enabled:
        if cfg.skill_matrix or cfg.skill_layers:
            raise HltmtConfigError("--skill-matrix / --skill-layers configure skills: add --skill-ffn and/or "
                                   "--skill-attention")
        return None
    from hltmt_plugin.modules.adapters import _layers, single_source_language

    if getattr(args, "checkpoint_activations", False):
        raise HltmtConfigError("encoder skills choose per sentence inside the layers, which activation "
                               "checkpointing re-runs out of order: drop --checkpoint-activations")
    langs = list(task.langs)
    if not getattr(task.args, "enable_lang_ids", False) and single_source_language(task) is None:
        raise HltmtConfigError("encoder skills choose by each sentence's source language: add --enable-lang-ids "
                               "(or give -s when decoding a single source language)")
    layers = _layers(cfg.skill_layers, args.encoder_layers, "skill-layers")
    matrix = _matrix_of(cfg, args, langs)
    pairs = getattr(task, "lang_pairs", None) or []
    if isinstance(pairs, str):
        pairs = pairs.split(",")
    pairs = [p.strip() for p in pairs if p.strip()]
    if cfg.skill_ffn:
        missing = [p for p in pairs if p not in matrix.directions]
        if missing:
            raise HltmtConfigError(f"--skill-matrix has no entry for direction(s) {','.join(missing)} of "
                                   "--lang-pairs: list the skills each of them activates")
    return SkillPlan(cfg, langs, layers, matrix, pairs)


# ---------------------------------------------------------------------------------------
# per-row ids


class RowSkills:
    """Each row's source language (attention skill) and set of active skills (FFN), set by
    the encoder around its forward pass and read by the skill modules of its layers."""

    def __init__(self):
        self.langs: List[str] = []
        self.combos: List[Tuple[str, ...]] = []
        self.combo_of: Optional[Tensor] = None  # (L, L): direction (src, tgt) -> combo id, -1 if none
        self.lang_ids: Optional[Tensor] = None
        self.combo_ids: Optional[Tensor] = None
        self.plans: Dict[str, RoutePlan] = {}

    def set_plan(self, plan: SkillPlan) -> None:
        self.langs = list(plan.langs)
        self.combos = plan.matrix.combos()
        table = torch.full((len(self.langs), len(self.langs)), -1, dtype=torch.long)
        for key, active in plan.matrix.directions.items():
            s, t = key.split("-")
            table[self.langs.index(s), self.langs.index(t)] = self.combos.index(tuple(active))
        self.combo_of = table

    @contextlib.contextmanager
    def use(self, src: Optional[Tensor], tgt: Optional[Tensor]) -> Iterator[None]:
        previous = self.lang_ids, self.combo_ids
        combo = None
        if src is not None and tgt is not None and self.combo_of is not None:
            table = self.combo_of.to(src.device)
            combo = table[src, tgt]
            if bool((combo < 0).any()):
                b = int((combo < 0).nonzero()[0, 0])
                raise HltmtInputError(
                    f"direction {self.langs[int(src[b])]}-{self.langs[int(tgt[b])]} has no entry in the skill "
                    "matrix: add it to the --skill-matrix file with the skills it should combine")
        self.lang_ids, self.combo_ids = src, combo
        previous_plans, self.plans = self.plans, {}
        try:
            yield
        finally:
            (self.lang_ids, self.combo_ids), self.plans = previous, previous_plans

    def require(self, what: str) -> RoutePlan:
        """The rows' route plan for ``what`` ("ffn": skill sets, "attention": source
        languages), made once per forward pass (every layer routes the same rows)."""
        if what not in self.plans:
            ids = self.combo_ids if what == "ffn" else self.lang_ids
            if ids is None:
                raise HltmtInputError("the encoder's skills got no direction per sentence: run the layer "
                                      "through the hltmt_transformer encoder")
            self.plans[what] = RoutePlan(ids)
        return self.plans[what]


# ---------------------------------------------------------------------------------------
# the modules


class SkillFFN(nn.Module):
    """One FFN (fc1, activation, activation dropout, fc2) per skill; output = mean of the
    active skills' outputs, per row by its set of active skills."""

    def __init__(self, layer: nn.Module, skills: Sequence[str], rows: RowSkills):
        super().__init__()
        self.activation_fn = layer.activation_fn
        self.activation_dropout_module = layer.activation_dropout_module
        self.rows = rows
        self.experts = nn.ModuleDict()
        for skill in skills:  # dense-to-skill: each skill starts as the layer's dense FFN
            expert = nn.Module()
            expert.fc1 = _copy_linear(layer.fc1)
            expert.fc2 = _copy_linear(layer.fc2)
            self.experts[skill] = expert

    def run_skill(self, skill: str, x: Tensor) -> Tensor:
        expert = self.experts[skill]
        return expert.fc2(self.activation_dropout_module(self.activation_fn(expert.fc1(x))))

    def combo_fn(self, active: Sequence[str]):
        def fn(x: Tensor) -> Tensor:
            first = self.run_skill(active[0], x)
            if len(active) == 1:
                return first
            rest = [self.run_skill(s, x) - first for s in active[1:]]  # exact y_1 while the skills agree
            return first + torch.stack(rest).sum(0) / len(active)
        return fn

    def forward(self, x: Tensor) -> Tensor:  # T x B x C
        return route(x, self.rows.require("ffn"), [self.combo_fn(c) for c in self.rows.combos], dim=1)

    def upgrade_state_dict_named(self, state_dict, name):
        """A dense checkpoint: copy the layer's fc1 / fc2 into every skill."""
        layer = name.rsplit(".", 1)[0]
        if f"{layer}.fc1.weight" not in state_dict or any(k.startswith(f"{name}.") for k in state_dict):
            return
        for skill in self.experts:
            for fc in ("fc1", "fc2"):
                for p in ("weight", "bias"):
                    state_dict[f"{name}.experts.{skill}.{fc}.{p}"] = state_dict[f"{layer}.{fc}.{p}"].clone()
        for fc in ("fc1", "fc2"):
            for p in ("weight", "bias"):
                del state_dict[f"{layer}.{fc}.{p}"]
        logger.info(f"skills: {layer}: every skill FFN initialised from the checkpoint's dense FFN")


class SkillSelfAttention(nn.Module):
    """Self-attention with one set of Q/K/V per language and the dense output projection.
    Called as fairseq's encoder layer calls ``MultiheadAttention`` (query = key = value)."""

    def __init__(self, dense: nn.Module, langs: Sequence[str], rows: RowSkills):
        super().__init__()
        if getattr(dense, "bias_k", None) is not None or dense.add_zero_attn or getattr(dense, "use_xformers", False):
            raise HltmtConfigError("--skill-attention supports fairseq's plain self-attention only")
        self.embed_dim, self.num_heads = dense.embed_dim, dense.num_heads
        self.dropout_module = dense.dropout_module
        self.out_proj = dense.out_proj
        self.rows = rows
        self.langs = list(langs)
        self.skills = nn.ModuleDict()
        for lang in langs:  # dense-to-skill: each language starts with the dense Q/K/V
            qkv = nn.Module()
            qkv.q_proj, qkv.k_proj, qkv.v_proj = (_copy_linear(dense.q_proj), _copy_linear(dense.k_proj),
                                                  _copy_linear(dense.v_proj))
            self.skills[lang] = qkv

    def attend(self, lang: str, x: Tensor, key_padding_mask: Optional[Tensor], attn_mask: Optional[Tensor]):
        qkv = self.skills[lang]
        out, _ = F.multi_head_attention_forward(  # exactly fairseq's MultiheadAttention fast path
            x, x, x, self.embed_dim, self.num_heads, torch.empty([0]),
            torch.cat((qkv.q_proj.bias, qkv.k_proj.bias, qkv.v_proj.bias)), None, None, False,
            self.dropout_module.p, self.out_proj.weight, self.out_proj.bias,
            self.training or self.dropout_module.apply_during_inference,
            key_padding_mask.bool() if key_padding_mask is not None else None, False, attn_mask,
            use_separate_proj_weight=True, q_proj_weight=qkv.q_proj.weight, k_proj_weight=qkv.k_proj.weight,
            v_proj_weight=qkv.v_proj.weight)
        return out

    def forward(self, query: Tensor, key=None, value=None, key_padding_mask: Optional[Tensor] = None,
                need_weights: bool = False, attn_mask: Optional[Tensor] = None, **unused):
        ids = self.rows.require("attention")
        if key_padding_mask is None:  # fairseq passes None for a batch without padding: keep it None
            fns = [lambda x, lang=lang: self.attend(lang, x, None, attn_mask) for lang in self.langs]
            return route(query, ids, fns, dim=1), None
        fns = [lambda x, kpm, lang=lang: self.attend(lang, x, kpm, attn_mask) for lang in self.langs]
        return route(query, ids, fns, key_padding_mask, dim=1), None

    def upgrade_state_dict_named(self, state_dict, name):
        """A dense checkpoint: copy the dense Q/K/V into every language."""
        if f"{name}.q_proj.weight" not in state_dict or any(k.startswith(f"{name}.skills.") for k in state_dict):
            return
        for lang in self.skills:
            for proj in ("q_proj", "k_proj", "v_proj"):
                for p in ("weight", "bias"):
                    state_dict[f"{name}.skills.{lang}.{proj}.{p}"] = state_dict[f"{name}.{proj}.{p}"].clone()
        for proj in ("q_proj", "k_proj", "v_proj"):
            for p in ("weight", "bias"):
                del state_dict[f"{name}.{proj}.{p}"]
        logger.info(f"skills: {name}: every language's Q/K/V initialised from the checkpoint's dense ones")


def _copy_linear(linear: nn.Linear) -> nn.Linear:
    new = nn.Linear(linear.in_features, linear.out_features, bias=linear.bias is not None)
    new = new.to(linear.weight.device, linear.weight.dtype)
    with torch.no_grad():
        new.weight.copy_(linear.weight)
        if linear.bias is not None:
            new.bias.copy_(linear.bias)
    return new


def _identity(x: Tensor) -> Tensor:
    return x


def install_layer_skills(layer: nn.Module, plan: SkillPlan, rows: RowSkills) -> None:
    """Turn one fairseq encoder layer into a skill layer (its forward stays fairseq's)."""
    if plan.cfg.skill_attention:
        layer.self_attn = SkillSelfAttention(layer.self_attn, plan.langs, rows)
    if plan.cfg.skill_ffn:
        layer.skill_ffn = SkillFFN(layer, plan.matrix.skills, rows)
        # fairseq computes fc2(activation_dropout(activation(fc1(x)))): the skill FFN does all of it
        del layer.fc1, layer.fc2, layer.activation_dropout_module
        layer.fc1 = layer.activation_dropout_module = _identity
        layer.activation_fn = _identity
        layer.fc2 = layer.skill_ffn.forward


class SkillEncoderMixin:
    """For the hltmt_transformer encoder: skills in the chosen layers, each row's source
    language and direction set around the forward pass (``self.skill_rows.use``)."""

    def __init__(self, *args, skill_cfg: Optional[SkillConfig] = None, **kwargs):
        self.skill_cfg = skill_cfg
        self.skill_rows = RowSkills()
        super().__init__(*args, **kwargs)
        self.skill_plan: Optional[SkillPlan] = None

    def install_skills(self, plan: SkillPlan) -> None:
        self.skill_rows.set_plan(plan)
        for i in plan.layers:
            install_layer_skills(self.layers[i], plan, self.skill_rows)
        self.skill_plan = plan


# ---------------------------------------------------------------------------------------
# the report


def is_skill_parameter(name: str) -> bool:
    parts = name.split(".")
    return SKILL_FFN in parts or (SKILL_ATTN in parts and "self_attn" in parts)


def skill_of(name: str) -> Optional[Tuple[str, str]]:
    """(``ffn`` | ``attention``, skill) of a skill parameter name, else None."""
    parts = name.split(".")
    if SKILL_FFN in parts:
        return "ffn", parts[parts.index(SKILL_FFN) + 2]
    if SKILL_ATTN in parts and "self_attn" in parts:
        return "attention", parts[parts.index(SKILL_ATTN) + 1]
    return None


def skill_report(model: nn.Module, plan: SkillPlan, directions: Optional[Sequence[str]] = None) -> Dict:
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
    for key in directions if directions is not None else plan.train_directions:
        src = key.split("-")[0]
        ffn = sum(per_skill["ffn"].get(s, 0) for s in plan.matrix.directions.get(key, []))
        attn = per_skill["attention"].get(src, 0)
        active = total - skill_params + ffn + attn
        out["directions"][key] = {"skills": list(plan.matrix.directions.get(key, [])), "active_skill": ffn + attn,
                                  "active": active, "share": active / total}
    return out


def format_skill_report(report: Dict, plan: SkillPlan) -> List[str]:
    layers = ",".join(map(str, plan.layers))
    lines = [f"skills: encoder layers {layers}; model {report['total']:,} parameters, "
             f"{report['skill_parameters']:,} in skills"]
    for kind, label in (("ffn", "skill FFN"), ("attention", "language Q/K/V")):
        counts = report["per_skill"][kind]
        if counts:
            groups: Dict[int, List[str]] = {}
            for skill, n in counts.items():
                groups.setdefault(n, []).append(skill)
            lines.append(f"  {label}: " + "; ".join(f"{','.join(s)}: {n:,} each" for n, s in groups.items()))
    for key, d in report["directions"].items():
        lines.append(f"  {key}: skills {'+'.join(d['skills']) or '-'}; active {d['active']:,} of "
                     f"{report['total']:,} parameters ({100.0 * d['share']:.1f}%)")
    others = len(plan.matrix.directions) - len(report["directions"])
    if others > 0:
        lines.append(f"  (+{others} more direction(s) in the skill matrix, e.g. for decoding without retraining)")
    return lines


def install_skills(model, plan: Optional[SkillPlan]) -> None:
    if plan is None:
        return
    model.encoder.install_skills(plan)
    for line in format_skill_report(skill_report(model, plan), plan):
        logger.info(line)


__all__ = ["SkillConfig", "SkillMatrix", "SkillPlan", "default_matrix", "load_matrix", "plan_skills", "RowSkills",
           "SkillFFN", "SkillSelfAttention", "SkillEncoderMixin", "install_skills", "skill_report",
           "format_skill_report", "is_skill_parameter"]
