from hltmt_plugin.tasks import hltmt_translation  # noqa: F401  (registers the task)
