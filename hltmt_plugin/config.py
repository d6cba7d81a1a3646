"""The base of the plugin's option groups, and the one parser of layer lists.

:class:`OptionGroup` is a fairseq dataclass (help text, argparse through
``gen_parser_from_dataclass``) that can be read back from fairseq's flat argument namespace."""

import math
import os
from typing import List, Optional

from fairseq.dataclass import FairseqDataclass

from hltmt_plugin.errors import HltmtConfigError
from hltmt_plugin.paths import check_field_value, field_kind


class OptionGroup(FairseqDataclass):
    """Fields that name a file or folder say so (``metadata={"path": KIND}``, :mod:`hltmt_plugin.paths`)
    and are checked as the plugin's commands check theirs when the group is read."""

    @classmethod
    def from_namespace(cls, args):
        """This group's fields as they stand in ``args`` (defaults for the absent ones); a declared
        path that cannot be what it names is one HltmtConfigError."""
        group = cls(**{k: getattr(args, k) for k in cls.__dataclass_fields__ if hasattr(args, k)})
        for name, spec in cls.__dataclass_fields__.items():
            kind = field_kind(spec)
            if kind is not None:
                check_field_value(name, getattr(group, name), kind)
        return group


def parse_layers(value: Optional[str], num_layers: int, option: str) -> List[int]:
    """A comma-separated list of 0-based layer numbers (default: every layer)."""
    if value is None or str(value).strip() == "":
        return list(range(num_layers))
    try:
        layers = sorted({int(v) for v in str(value).split(",") if v.strip()})
    except ValueError:
        raise HltmtConfigError(f"--{option} takes comma-separated layer numbers, got {value!r}") from None
    bad = [i for i in layers if not 0 <= i < num_layers]
    if bad or not layers:
        raise HltmtConfigError(
            f"--{option} names layer(s) {','.join(map(str, bad)) or '(none)'}; "
            f"this model has layers 0..{num_layers - 1}"
        )
    return layers


def physical_memory() -> int:
    """This machine's memory in bytes (0 where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def check_allocation(option: str, value, parameters: int, bytes_per: int = 4) -> None:
    """Refuse an option whose ``parameters`` (float32 unless ``bytes_per`` says) would not fit in
    this machine's memory, before anything is allocated."""
    memory = physical_memory()
    need = int(parameters) * bytes_per
    if memory and need > memory:
        raise HltmtConfigError(
            f"{option} {value} asks for {parameters:,} parameters ({need / 2**30:.1f} GiB) in one "
            f"module, more than this machine's memory ({memory / 2**30:.1f} GiB)"
        )


def check_finite(args) -> None:
    """Every floating-point option in ``args`` is a number: nan and inf are refused by name."""
    for name, value in sorted(vars(args).items()):
        values = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            raise HltmtConfigError(f"--{name.replace('_', '-')} {value}: give a finite number")
