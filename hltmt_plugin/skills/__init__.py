"""Encoder skills (SkillNet-X): sparsely activated skill FFNs and language-specific attention,
one job per file:

- :mod:`~hltmt_plugin.skills.config`: options, the skill matrix, their resolved layout;
- :mod:`~hltmt_plugin.skills.modules`: the skill FFN, skill attention, the direction table;
- :mod:`~hltmt_plugin.skills.layers`: fairseq's encoder layer built with them;
- :mod:`~hltmt_plugin.skills.feature`: installing them into a model;
- :mod:`~hltmt_plugin.skills.report`: parameter names and the report.

Dense-to-skill initialisation: every skill FFN starts as a copy of the layer's dense FFN and
every language's Q/K/V as a copy of the dense ones, both for a fresh model and when a dense
checkpoint (MNMT / HLT-MT) is loaded (``upgrade_state_dict_named`` converts its keys), so the
converted model computes what the dense one did. A direction absent from training runs with
the skills the matrix gives it.
"""

from hltmt_plugin.skills.config import (  # noqa: F401
    SkillConfig,
    SkillLayout,
    SkillMatrix,
    default_matrix,
    layout_skills,
    load_matrix,
)
from hltmt_plugin.skills.modules import SkillFFN, SkillSelfAttention  # noqa: F401
from hltmt_plugin.skills.report import format_skill_report, is_skill_parameter, skill_report  # noqa: F401
