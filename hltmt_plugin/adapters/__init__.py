"""Adapters (Houlsby / Pfeiffer bottleneck adapters, MAD-X language adapters with a shared
adapter stacked on top, invertible NICE adapters), one job per file:

- :mod:`~hltmt_plugin.adapters.config`: options and their resolved layout;
- :mod:`~hltmt_plugin.adapters.modules`: the modules, routed per row by language;
- :mod:`~hltmt_plugin.adapters.layers`: fairseq's layers calling them after their sublayers;
- :mod:`~hltmt_plugin.adapters.feature`: installing them into a model, loading checkpoints;
- :mod:`~hltmt_plugin.adapters.report`: parameter names and the parameter report;
- :mod:`~hltmt_plugin.adapters.files`: one language's adapters as a file (export / import);
- :mod:`~hltmt_plugin.adapters.mlm`: a language's adapters trained by masked LM (MAD-X).
"""

from hltmt_plugin.adapters.config import HOULSBY, PFEIFFER, AdapterConfig, AdapterLayout, layout_adapters  # noqa: F401
from hltmt_plugin.adapters.layers import AdapterDecoderLayer, AdapterEncoderLayer  # noqa: F401
from hltmt_plugin.adapters.modules import AdapterStack, Bottleneck, InvertibleAdapter, InvertibleAdapters  # noqa: F401
from hltmt_plugin.adapters.report import (  # noqa: F401
    adapter_kind,
    adapter_language,
    bottleneck_parameters,
    format_parameter_report,
    is_adapter_parameter,
    parameter_report,
)
