"""The base of the plugin's option groups, and the one parser of layer lists.

:class:`OptionGroup` is a fairseq dataclass (help text, argparse through
``gen_parser_from_dataclass``) that can be read back from fairseq's flat argument namespace."""
from typing import List, Optional

from fairseq.dataclass import FairseqDataclass

from hltmt_plugin.errors import HltmtConfigError


class OptionGroup(FairseqDataclass):
    @classmethod
    def from_namespace(cls, args):
        """This group's fields as they stand in ``args`` (defaults for the absent ones)."""
        return cls(**{k: getattr(args, k) for k in cls.__dataclass_fields__ if hasattr(args, k)})


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
        raise HltmtConfigError(f"--{option} names layer(s) {','.join(map(str, bad)) or '(none)'}; "
                               f"this model has layers 0..{num_layers - 1}")
    return layers
