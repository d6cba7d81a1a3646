from hltmt_plugin.models import baselines, hltmt_transformer  # noqa: F401  (registers models and archs)
