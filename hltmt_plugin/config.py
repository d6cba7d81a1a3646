"""The base of the plugin's option groups: a fairseq dataclass (help text, argparse through
``gen_parser_from_dataclass``) that can be read back from fairseq's flat argument namespace."""
from fairseq.dataclass import FairseqDataclass


class OptionGroup(FairseqDataclass):
    @classmethod
    def from_namespace(cls, args):
        """This group's fields as they stand in ``args`` (defaults for the absent ones)."""
        return cls(**{k: getattr(args, k) for k in cls.__dataclass_fields__ if hasattr(args, k)})
