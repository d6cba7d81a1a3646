"""Reading checkpoint files from the plugin's own code (pretrained encoders, adapter files):
weights-only, with the same allowlist and errors as fairseq's loader under the plugin
(:mod:`hltmt_plugin.compat.safe_loading`)."""
from hltmt_plugin.compat.safe_loading import TRUST_ENV, load_state  # noqa: F401
