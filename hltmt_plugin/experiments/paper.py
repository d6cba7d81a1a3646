"""The HLT-MT paper's WMT-10 rows (Yang et al., IJCAI 2022), one table per recipe, written once.

The paper's WMT-10 table (the authors' repository, "En-X evaluation results ... on WMT-10")
gives En->X average BLEU (sacreBLEU, 13a, case-sensitive, detokenized) of many-to-many (N-N)
models and, for reference, one-to-many (1-N) ones. Its systems start from XLM-R (the XLM-R,
LS-MNMT and HLT-MT rows) or from scratch (MNMT); a system of a recipe that has no row in the
paper says why. ``hltmt-report --paper-rows RECIPE`` sets a run's averages beside its recipe's
rows; examples/wmt10/README.md shows :func:`readme_table` (``tests/experiments/test_paper.py``
checks that the two agree).
"""

from dataclasses import dataclass
from typing import Dict, List, Optional


@dataclass(frozen=True)
class PaperRow:
    """What the paper reports for a system of a recipe: its row's name, N-N En->X average BLEU,
    parameters and 1-N figure, or (``bleu`` None) why it has no row."""

    name: str
    bleu: Optional[float] = None
    params: str = ""
    one_to_many: Optional[float] = None
    no_row: str = ""


@dataclass(frozen=True)
class Recipe:
    """A recipe of examples/wmt10: the command that runs it and its systems' paper rows."""

    command: str
    systems: Dict[str, str]  # system -> what it is in this recipe
    rows: Dict[str, PaperRow]


RECIPES = {
    "xlmr": Recipe(
        "bash examples/wmt10/run_xlmr.sh --gpu --ngpu 8",
        {
            "mnmt": "fairseq's transformer, encoder from XLM-R",
            "lsmnmt": "one module per target language, from XLM-R",
            "hltmt": "T = 3, from XLM-R",
        },
        {
            "mnmt": PaperRow("XLM-R", 22.4, "362M", 22.5),
            "lsmnmt": PaperRow("LS-MNMT", 22.0, "409M", 22.3),
            "hltmt": PaperRow("HLT-MT", 23.1, "381M", 23.2),
        },
    ),
    "scratch": Recipe(
        "bash examples/wmt10/run.sh --gpu --ngpu 8",
        {
            "mnmt": "transformer-base, from scratch",
            "hltmt": "from scratch",
            "lsmnmt": "from scratch",
        },
        {
            "mnmt": PaperRow("MNMT", 22.0, "242M", 22.0),
            "hltmt": PaperRow(
                "HLT-MT", no_row="no N-N row; the paper's ablation, two stages and SLP without XLM-R: 22.8"
            ),
            "lsmnmt": PaperRow("LS-MNMT", no_row="no row (the paper's LS-MNMT starts from XLM-R)"),
        },
    ),
}


def readme_table() -> List[str]:
    """The table of examples/wmt10/README.md: each recipe's command, systems and paper rows."""
    lines = [
        "| your command | your systems | paper row (N-N, En→X avg BLEU) | 1-N row, for reference |",
        "|---|---|---|---|",
    ]
    for recipe in RECIPES.values():
        for i, (system, what) in enumerate(recipe.systems.items()):
            row = recipe.rows[system]
            paper = f"{row.name}: **{row.bleu}** ({row.params} parameters)" if row.bleu is not None else row.no_row
            one_to_many = "" if row.one_to_many is None else f"{row.one_to_many}"
            command = f"`{recipe.command}`" if i == 0 else ""
            cells = (command, f"`{system}` ({what})", paper, one_to_many)
            lines.append("|" + "|".join(f" {c} " if c else " " for c in cells) + "|")
    return lines
