"""Skills as a feature of ``hltmt_transformer``: after the encoder is built with skill layers
(:mod:`~hltmt_plugin.skills.layers`), :func:`install` names the rows' ids (the direction's
skill set for the FFN, the source language for attention) and logs the report."""

import logging
from typing import Optional

from hltmt_plugin.skills.config import SkillLayout
from hltmt_plugin.skills.modules import ATTENTION_IDS, FFN_IDS, SkillDirections, source_ids
from hltmt_plugin.skills.report import format_skill_report, skill_report

logger = logging.getLogger(__name__)


def install(model, layout: Optional[SkillLayout]) -> None:
    if layout is None:
        return
    encoder = model.encoder
    encoder.skill_directions = SkillDirections(layout.langs, layout.matrix)
    encoder.rows.define(FFN_IDS, encoder.skill_directions.ffn_ids)
    encoder.rows.define(ATTENTION_IDS, source_ids)
    encoder.languages.need_source = True
    encoder.skill_layout = layout
    for line in format_skill_report(skill_report(model, layout), layout):
        logger.info(line)
