from hltmt_plugin.models import hltmt_transformer  # noqa: F401  (registers model and archs)
