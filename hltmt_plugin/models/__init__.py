from hltmt_plugin.models import hltmt_transformer  # noqa: F401  (registers the model first)

# isort: split
from hltmt_plugin.models import archs, baselines  # noqa: F401  (then its architectures and the baselines')
