"""An export folder's shape without CTranslate2 (tests/hub/test_manifest.py,
tests/cli/test_export.py)."""

import os

from hltmt_plugin.hub import engines, manifest


def make_folder(path, **changes):
    """A folder shaped like an export (dummy file contents) with a manifest listing its files."""
    os.makedirs(os.path.join(path, "models", "main"))
    for name, text in (
        ("spm.model", "spm"),
        ("dict.txt", "a 1\n__en__ 1\n__de__ 1\n"),
        ("models/main/model.bin", "weights"),
    ):
        with open(os.path.join(path, name), "w") as f:
            f.write(text)
    record = {
        "format": engines.ENGINES["ctranslate2"].format,
        "version": manifest.VERSION,
        "engine": "ctranslate2",
        "langs": ["en", "de"],
        "lang_pairs": ["en-de"],
        "encoder_langtok": "tgt",
        "decoder_langtok": False,
        "language_tokens": {"en": "__en__", "de": "__de__"},
        "routing_map": {},
        "targets": {"en": "main", "de": "main"},
        "models": {"main": "models/main"},
        "routes": False,
        "quantization": "float32",
        "max_source_positions": 1024,
        "max_target_positions": 1024,
        "source": {},
        "patches": {},
    }
    record.update(changes)
    manifest.write(str(path), record)  # its files and digests, as an export writes them
    return str(path)
