"""Skill options (:class:`SkillConfig`), the skill matrix (which skills each direction
activates) and what the options resolve to against the task (:class:`SkillLayout`).

The default matrix (for translation): skills ``generic``, one per language of ``--langs``
and, when ``en`` is one of them, ``to_en`` / ``from_en``; direction ``s-t`` activates
``generic``, ``s`` (its source language), ``to_en`` if ``t`` is en and ``from_en`` if ``s`` is.
A JSON file given by ``--skill-matrix`` replaces it::

    {"skills": ["generic", "en", "de", "to_en", "from_en"],
     "directions": {"en-de": ["generic", "en", "from_en"], "de-en": ["generic", "de", "to_en"]}}
"""

import logging
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from torch import nn

from hltmt_plugin import records
from hltmt_plugin.config import OptionGroup, parse_layers
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.languages import check_known, single_source_language, task_pairs

logger = logging.getLogger(__name__)

GENERIC, TO_EN, FROM_EN = "generic", "to_en", "from_en"
SAVED_MATRIX = "skill_matrix_saved"  # args attribute: the matrix file's content, saved in checkpoints
NAME = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass
class SkillConfig(OptionGroup):
    skill_ffn: bool = field(
        default=False,
        metadata={
            "help": "SkillNet-X skill FFNs: the FFN of each chosen encoder layer becomes one "
            "FFN per skill of the skill matrix; a sentence's direction activates some "
            "of them and the layer outputs their mean (needs --enable-lang-ids, or -s "
            "when decoding one source language)"
        },
    )
    skill_attention: bool = field(
        default=False,
        metadata={
            "help": "SkillNet-X skill attention: one set of Q/K/V projections per language "
            "in each chosen encoder layer, chosen by the sentence's source language"
        },
    )
    skill_layers: Optional[str] = field(
        default=None, metadata={"help": "comma-separated encoder layers (0-based) that get skills (default: all)"}
    )
    skill_matrix: Optional[str] = field(
        default=None,
        metadata={
            "help": 'JSON file {"skills": [...], "directions": {"src-tgt": [skills]}} '
            "giving the skills each direction activates (default: generic + the "
            "source language + to_en / from_en, for every pair of --langs)",
            "path": "read-file",
        },
    )

    @property
    def enabled(self) -> bool:
        return self.skill_ffn or self.skill_attention


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
                active = (
                    {GENERIC, s}
                    | ({TO_EN} if english and t == "en" else set())
                    | ({FROM_EN} if english and s == "en" else set())
                )
                directions[f"{s}-{t}"] = [k for k in skills if k in active]
    return SkillMatrix(skills, directions)


_NAMES = records.ListOf(records.Text(max_len=100), max_len=1000)
# the matrix file, and its copy in a checkpoint's arguments (with the file's path)
MATRIX = records.Record({"skills": _NAMES, "directions": records.MapOf(_NAMES, max_len=100_000)})
SAVED = MATRIX.extended(fields={"path": records.Text(min_len=1, max_len=4096)})


def _check_skill_names(skills, where: str) -> None:
    if not isinstance(skills, list) or not skills or not all(isinstance(s, str) and s.strip() for s in skills):
        raise HltmtConfigError(f'{where}: "skills" must be a non-empty list of names, got {skills!r}')
    if len(set(skills)) != len(skills):
        raise HltmtConfigError(f'{where}: "skills" lists a skill twice: {",".join(skills)}')
    module = nn.ModuleDict()
    bad = [s for s in skills if not NAME.match(s) or hasattr(module, s)]
    if bad:
        raise HltmtConfigError(
            f"{where}: skill name(s) {','.join(map(repr, bad))} cannot name a module: use "
            "letters, digits, '_' and '-', and no name of a module attribute (e.g. train)"
        )


def _check_direction(key, active, skills, langs, where: str) -> List[str]:
    entry = f'{where}: direction "{key}"'
    parts = key.split("-")
    if len(parts) != 2 or not all(parts):
        raise HltmtConfigError(f"{entry}: directions are written src-tgt, e.g. en-de")
    check_known(parts, langs, entry, what="language ")
    if not isinstance(active, list) or not all(isinstance(s, str) for s in active):
        raise HltmtConfigError(f"{entry}: expected a list of skill names, got {active!r}")
    if not active:
        raise HltmtConfigError(f"{entry} activates no skill: give it at least one of {','.join(skills)}")
    unknown = [s for s in active if s not in skills]
    if unknown:
        raise HltmtConfigError(f'{entry} names skill {",".join(unknown)}, not in "skills" ({",".join(skills)})')
    language_skills = [s for s in active if s in langs]
    if len(language_skills) > 1:
        logger.warning(
            f"{entry} activates {len(language_skills)} language skills ({','.join(language_skills)}); "
            "SkillNet-X activates one (the source language's)"
        )
    return [s for s in skills if s in active]


def load_matrix(path: str, langs: Sequence[str]) -> SkillMatrix:
    where = f"--skill-matrix {path}"
    data = records.read_json(path, MATRIX, "--skill-matrix")  # {"skills": [names], "directions": {"src-tgt": [names]}}
    skills = data["skills"]
    _check_skill_names(skills, where)
    directions = {
        key: _check_direction(key, active, skills, langs, where) for key, active in data["directions"].items()
    }
    if not directions:
        raise HltmtConfigError(f'{where}: "directions" is empty')
    return SkillMatrix(list(skills), directions)


def _matrix_of(cfg: SkillConfig, args, langs: Sequence[str]) -> SkillMatrix:
    """The matrix file (read again each time the model is built, so directions can be added
    for decoding); a checkpoint whose file is gone uses the copy saved in its arguments."""
    if not cfg.skill_matrix:
        return default_matrix(langs)
    saved = getattr(args, SAVED_MATRIX, None)
    if saved is not None:
        records.check(saved, SAVED, "the checkpoint's copy of the skill matrix")
    if not os.path.exists(cfg.skill_matrix) and saved is not None and saved["path"] == cfg.skill_matrix:
        logger.info(f"skills: {cfg.skill_matrix} is gone; using the copy of the skill matrix saved in the checkpoint")
        matrix = SkillMatrix(list(saved["skills"]), {k: list(v) for k, v in saved["directions"].items()})
    else:
        matrix = load_matrix(cfg.skill_matrix, langs)
    setattr(args, SAVED_MATRIX, {"path": cfg.skill_matrix, "skills": matrix.skills, "directions": matrix.directions})
    return matrix


@dataclass
class SkillLayout:
    """The skill options resolved against the task: which layers, which skills, the matrix."""

    cfg: SkillConfig
    langs: List[str]
    layers: List[int]
    matrix: SkillMatrix
    train_directions: List[str]

    def route(self, src: str, tgt: str) -> Dict[str, object]:
        """The skills of ``src -> tgt`` (the FFN skill set, the attention's language), or
        HltmtInputError when the skill matrix does not name the direction."""
        active = self.matrix.directions.get(f"{src}-{tgt}")
        if self.cfg.skill_ffn and active is None:
            raise HltmtInputError(
                f"direction {src}-{tgt} is not in the model's skill matrix (it names "
                f"{len(self.matrix.directions)} directions): add it to the --skill-matrix file"
            )
        return {
            "ffn": list(active) if self.cfg.skill_ffn else None,
            "attention": src if self.cfg.skill_attention else None,
        }


def layout_skills(args, task) -> Optional[SkillLayout]:
    """Check the skill options against the task (before the model is built)."""
    cfg = SkillConfig.from_namespace(args)
    if not cfg.enabled:
        if cfg.skill_matrix or cfg.skill_layers:
            raise HltmtConfigError(
                "--skill-matrix / --skill-layers configure skills: add --skill-ffn and/or --skill-attention"
            )
        return None
    if getattr(args, "checkpoint_activations", False):
        raise HltmtConfigError(
            "encoder skills choose per sentence inside the layers, which activation "
            "checkpointing re-runs out of order: drop --checkpoint-activations"
        )
    langs = list(task.langs)
    if not getattr(task.args, "enable_lang_ids", False) and single_source_language(task) is None:
        raise HltmtConfigError(
            "encoder skills choose by each sentence's source language: add --enable-lang-ids "
            "(or give -s when decoding a single source language)"
        )
    layers = parse_layers(cfg.skill_layers, args.encoder_layers, "skill-layers")
    matrix = _matrix_of(cfg, args, langs)
    pairs = task_pairs(task)
    if cfg.skill_ffn:
        missing = [p for p in pairs if p not in matrix.directions]
        if missing:
            raise HltmtConfigError(
                f"--skill-matrix has no entry for direction(s) {','.join(missing)} of "
                "--lang-pairs: list the skills each of them activates"
            )
    return SkillLayout(cfg, langs, layers, matrix, pairs)
