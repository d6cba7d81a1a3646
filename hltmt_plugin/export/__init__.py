"""Models that leave fairseq: :mod:`hltmt_plugin.export.ctranslate2` writes a checkpoint as
CTranslate2 models with a manifest (:mod:`hltmt_plugin.hub.manifest`); the translator serves
the folder (:mod:`hltmt_plugin.hub.ct2_engine`) with the contract it has for checkpoints."""
