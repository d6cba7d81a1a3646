"""fairseq's start-up noise, kept out when the plugin is what imports fairseq (the plugin's own
commands, ``import hltmt_plugin`` in Python); fairseq's commands, which import fairseq before the
plugin, print what they always print."""

import os

# fairseq 0.12's own noise, not the plugin's: the notice it logs on import when tensorboardX is
# missing (fairseq/tasks/text_to_speech.py), hydra's deprecation warnings when fairseq composes
# its config, torch's pin_memory warning without a GPU. Kept out of the output of the commands
# that import the plugin before fairseq (the warnings: unless PYTHONWARNINGS is set).
FAIRSEQ_NOISE_LOG = "Please install tensorboardX"
FAIRSEQ_NOISE_WARNINGS = (
    r"hydra\.experimental\.\w+\(\) is no longer experimental",
    r"\s*The version_base parameter is not specified",
    r"\s*'config' is validated against ConfigStore schema",
    r"In 'config': Usage of deprecated keyword in package header",
    r"\s*The strict flag in the compose API is deprecated",
    r"'pin_memory' argument is set as true but no accelerator is found",
)


def quiet_fairseq():
    """Filter fairseq's own noise (above) in this process, before fairseq is imported: the log
    notice always, the warnings unless PYTHONWARNINGS says which warnings to show."""
    import logging
    import warnings

    logging.getLogger("fairseq.tasks.text_to_speech").addFilter(
        lambda record: FAIRSEQ_NOISE_LOG not in record.getMessage()
    )
    if os.environ.get("PYTHONWARNINGS"):
        return
    for message in FAIRSEQ_NOISE_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=UserWarning)
