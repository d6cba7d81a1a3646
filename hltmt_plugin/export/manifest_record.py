"""The manifest record every exporter writes (:mod:`hltmt_plugin.hub.manifest`, without the
files' digests): what the model serves (its languages, trained directions, language-token
convention, routing map and the group serving each target), of the engine's format and name
(:mod:`hltmt_plugin.hub.engines`), with what the engine adds to ``source``."""

import os

from hltmt_plugin.directions import TRAINED_KEY, trained_pairs
from hltmt_plugin.hub import engines, loading, manifest  # loading registers the plugin first
from hltmt_plugin.models.hltmt_transformer import pool_model


def describe(
    loaded, targets: dict, models: dict, engine: str, quantization: str, checkpoint: str, source: dict
) -> dict:
    """The record of ``loaded`` (a checkpoint loaded for translation) exported to ``engine``:
    ``targets`` (language -> group), ``models`` (group -> its folder), the weights'
    ``quantization``, the ``checkpoint``'s file name and the engine's ``source`` fields (its
    library's version ...)."""
    args, dm = loaded.task.args, loaded.task.data_manager
    encoder_langtok = getattr(args, "encoder_langtok", None)
    decoder_langtok = bool(getattr(args, "decoder_langtok", False))
    languages = loaded.languages
    tokens = {lang: languages.token(lang) for lang in loaded.langs} if encoder_langtok or decoder_langtok else {}
    model = pool_model(loaded.model)
    pooled = model is not None
    return {
        "format": engines.get(engine).format,
        "version": manifest.VERSION,
        "engine": engine,
        "langs": list(loaded.langs),
        "lang_pairs": trained_pairs(
            {
                TRAINED_KEY: loading._stored(loaded.cfg, "model", TRAINED_KEY),
                "lang_pairs": getattr(args, "lang_pairs", None),
            }
        ),
        "encoder_langtok": encoder_langtok,
        "decoder_langtok": decoder_langtok,
        "language_tokens": tokens,
        "routing_map": {k: int(v) for k, v in model.map_by_language().items()} if pooled else {},
        "targets": targets,
        "models": models,
        "routes": pooled,
        "quantization": quantization,
        "max_source_positions": int(loaded.max_source_positions),
        "max_target_positions": int(loaded.max_target_positions),
        "source": {
            "checkpoint": os.path.basename(checkpoint),
            "arch": str(getattr(loaded.cfg.model, "arch", "")),
            **source,
            "data_langtok_spec": list(map(str, args.langtoks["main"])),
            "dm_langs": len(dm.lang_dict) if getattr(dm, "lang_dict", None) is not None else 0,
        },
    }
