from hltmt_plugin.criterions import hltmt_cross_entropy  # noqa: F401  (registers the criterion)
