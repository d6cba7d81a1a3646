"""The SLP's options (``--high-resource-langs``, ``--slp-*``) and their checks."""

from dataclasses import dataclass, field
from typing import List, Optional, Sequence

from hltmt_plugin.config import OptionGroup, check_allocation
from hltmt_plugin.errors import HltmtConfigError
from hltmt_plugin.languages import check_known, split_list


@dataclass
class SlpConfig(OptionGroup):
    high_resource_langs: Optional[str] = field(
        default=None,
        metadata={
            "help": "comma-separated target languages routed into the selective "
            "language-specific pool; every other target language goes through "
            "the universal layer (e.g. fr,cs,de,fi,et,tr); without it the model has no pool "
            "(the decoder top is fairseq's own: adapters and/or skills alone) and "
            "every direction trains from the start"
        },
    )
    slp_pool_size: int = field(
        default=3,
        metadata={"help": "T, the number of modules in the pool (1 <= T <= number of high-resource languages)"},
    )
    slp_hidden_dim: Optional[int] = field(
        default=None,
        metadata={"help": "inner dimension h of each pool / universal module (default: --decoder-ffn-embed-dim)"},
    )
    slp_hard_prob: float = field(
        default=0.5,
        metadata={
            "help": "probability that a training update routes hard (argmax "
            "module only) rather than soft while the gate is learning"
        },
    )
    slp_language_specific: bool = field(
        default=False,
        metadata={
            "help": "LS-MNMT baseline: one pool module per language of "
            "--high-resource-langs (in that order), no gate: the routing map is "
            "the identity from the start; needs --slp-pool-size equal to their number"
        },
    )

    @property
    def high_langs(self) -> List[str]:
        """``--high-resource-langs`` as a list (empty: no pool)."""
        return split_list(self.high_resource_langs)


def check_slp(slp: SlpConfig, langs: Sequence[str], width: int = 1) -> List[str]:
    """Check the SLP options against the task's ``--langs`` (``width``: the decoder's, for the
    size of a pool module); return the high-resource languages (empty: no pool)."""
    high = slp.high_langs
    if not high:
        if slp.slp_language_specific:
            raise HltmtConfigError(
                "--slp-language-specific gives each language of --high-resource-langs its own "
                "pool module: name them, e.g. --high-resource-langs fr,de,cs"
            )
        return high
    check_known(high, langs, "--high-resource-langs")
    if not 1 <= slp.slp_pool_size <= len(high):
        raise HltmtConfigError(
            f"--slp-pool-size must lie in [1, {len(high)}] (the number of "
            f"high-resource languages), got {slp.slp_pool_size}"
        )
    if slp.slp_hidden_dim is not None and slp.slp_hidden_dim < 1:
        raise HltmtConfigError(f"--slp-hidden-dim must be positive, got {slp.slp_hidden_dim}")
    if slp.slp_hidden_dim is not None:  # one pool module: in and out projections of the decoder's width
        check_allocation("--slp-hidden-dim", slp.slp_hidden_dim, 2 * slp.slp_hidden_dim * width)
    if slp.slp_language_specific and slp.slp_pool_size != len(high):
        raise HltmtConfigError(
            f"--slp-language-specific gives each of the {len(high)} languages of "
            f"--high-resource-langs its own module: set --slp-pool-size {len(high)}"
        )
    if not 0.0 <= slp.slp_hard_prob <= 1.0:
        raise HltmtConfigError(f"--slp-hard-prob must lie in [0, 1], got {slp.slp_hard_prob}")
    return high
