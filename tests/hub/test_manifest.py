"""hltmt_plugin.hub.manifest: an export folder is checked on load like a checkpoint is:
its record, its languages and groups, and every file by content (no CTranslate2 needed)."""

import json
import os

import pytest

from export_common import make_folder
from hltmt_plugin.errors import HltmtInputError
from hltmt_plugin.hub import engines, manifest

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


def test_the_folder_as_written_is_read(tmp_path):
    folder = make_folder(tmp_path / "ok")
    assert manifest.is_export(folder) and not manifest.is_export(str(tmp_path))
    assert manifest.read(folder)["targets"] == {"en": "main", "de": "main"}


@pytest.mark.parametrize(
    "tamper,message",
    [
        (lambda d: open(os.path.join(d, "models/main/model.bin"), "a").write("x"), "model.bin is not the file"),
        (lambda d: os.remove(os.path.join(d, "spm.model")), "spm.model is missing"),
        (lambda d: open(os.path.join(d, "extra.bin"), "w").write("x"), "extra.bin is not a file of the export"),
        (lambda d: open(os.path.join(d, manifest.MANIFEST), "w").write("{"), "export manifest .* is not valid JSON"),
    ],
)
def test_a_changed_missing_or_extra_file_is_refused_in_one_line(tmp_path, tamper, message):
    folder = make_folder(tmp_path / "f")
    tamper(folder)
    with pytest.raises(HltmtInputError, match=message) as refused:
        manifest.read(folder)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"version": 99}, "version 99 of the export format"),
        ({"format": "other"}, "is not a manifest of hltmt-export"),
        ({"langs": "en,de"}, "field 'langs'"),
        ({"decoder_langtok": 1}, "field 'decoder_langtok'"),
        ({"targets": {"en": "main"}}, "'targets' must name the model serving each language"),
        ({"targets": {"en": "main", "de": "m0"}}, "sends de to m0, but a model without a pool has one, main"),
        ({"routing_map": {"xx": 0}}, "'routing_map' must map languages"),
        ({"models": {"main": "../elsewhere"}}, "must name folders inside the export folder"),
    ],
)
def test_a_record_that_does_not_hold_together_is_refused(tmp_path, changes, message):
    folder = make_folder(tmp_path / "f", **changes)
    with pytest.raises(HltmtInputError, match=message):
        manifest.read(folder)


def test_a_patch_must_apply_to_a_model_stored_whole(tmp_path):
    folder = make_folder(tmp_path / "f", patches={"main": "main"})
    with pytest.raises(HltmtInputError, match="'patches' must name models stored whole"):
        manifest.read(folder)


def pooled_folder(path, **changes):
    """An export of a model with a pool (de -> m0, en and fr -> universal), as written."""
    for group in ("m0", "universal"):
        os.makedirs(os.path.join(path, "models", group))
        with open(os.path.join(path, "models", group, "model.bin"), "w") as f:
            f.write(group)
    for name, text in (("spm.model", "spm"), ("dict.txt", "a 1\n__en__ 1\n__de__ 1\n__fr__ 1\n")):
        with open(os.path.join(path, name), "w") as f:
            f.write(text)
    record = {
        "format": engines.ENGINES["ctranslate2"].format,
        "version": manifest.VERSION,
        "engine": "ctranslate2",
        "langs": ["en", "de", "fr"],
        "lang_pairs": ["en-de", "en-fr", "de-en"],
        "encoder_langtok": "tgt",
        "decoder_langtok": False,
        "language_tokens": {"en": "__en__", "de": "__de__", "fr": "__fr__"},
        "routing_map": {"de": 0},
        "targets": {"en": "universal", "de": "m0", "fr": "universal"},
        "models": {"m0": "models/m0", "universal": "models/universal"},
        "routes": True,
        "quantization": "float32",
        "max_source_positions": 1024,
        "max_target_positions": 1024,
        "source": {},
        "patches": {},
        **changes,
    }
    manifest.write(str(path), record)
    return str(path)


def edit_manifest(folder, edit):
    """Edit manifest.json alone, as a text editor would (no digest recomputed)."""
    path = os.path.join(folder, manifest.MANIFEST)
    with open(path) as f:
        record = json.load(f)
    edit(record)
    with open(path, "w") as f:
        json.dump(record, f)


@pytest.mark.parametrize(
    "edit",
    [
        lambda r: r["targets"].update(de="universal", fr="m0"),  # another language comes out
        lambda r: r["lang_pairs"].clear(),  # every direction served as trained
        lambda r: r.update(encoder_langtok="src"),  # another language-token convention
        lambda r: r["language_tokens"].update(de="__fr__", fr="__de__"),
        lambda r: r["routing_map"].update(de=0, fr=0),
        lambda r: r["files"].update({"dict.txt": "0" * 64}),
    ],
)
def test_an_edit_of_the_manifest_alone_is_refused_in_one_line(tmp_path, edit):
    folder = pooled_folder(tmp_path / "f")
    assert manifest.read(folder)["targets"]["de"] == "m0"
    edit_manifest(folder, edit)
    with pytest.raises(HltmtInputError, match="was edited|is not the file that was exported") as refused:
        manifest.read(folder)
    assert "\n" not in str(refused.value)


def test_the_digest_file_is_itself_a_listed_file(tmp_path):
    folder = pooled_folder(tmp_path / "f")
    with open(os.path.join(folder, manifest.DIGEST), "w") as f:
        f.write("0" * 64 + "\n")
    with pytest.raises(HltmtInputError, match="manifest.sha256 is not the file that was exported"):
        manifest.read(folder)


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"lang_pairs": []}, "'lang_pairs' is empty"),
        ({"lang_pairs": ["en-xx"]}, "not a direction between two of 'langs'"),
        ({"targets": {"en": "universal", "de": "universal", "fr": "m0"}}, "sends de to universal, but the routing map"),
        ({"models": {"m0": "models/universal", "universal": "models/m0"}}, "model m0 must be in models/m0"),
        ({"language_tokens": {"en": "__en__", "de": "__fr__", "fr": "__de__"}}, "'__fr__' is not the token of 'de'"),
        ({"language_tokens": {"en": "[en]", "de": "[de]", "fr": "[fr]"}}, r"the language token \[de\] is not in dict"),
        ({"language_tokens": {"en": "[en]", "de": "__de__", "fr": "__fr__"}}, "mix conventions"),
        ({"language_tokens": {}}, "must give the token of each language"),
        ({"routing_map": {"de": "0"}}, "field 'routing_map.de' must be a whole number"),
        ({"targets": {}}, "field 'targets' must hold"),
        ({"engine": "onnx"}, "field 'engine' must be one of"),
        ({"language_codes": {"en": "en"}}, "unknown field 'language_codes'"),
    ],
)
def test_a_record_at_odds_with_itself_or_its_folder_is_refused(tmp_path, changes, message):
    folder = pooled_folder(tmp_path / "f", **changes)
    with pytest.raises(HltmtInputError, match=message) as refused:
        manifest.read(folder)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    "text,message",
    [
        ("{}", "is not a manifest of hltmt-export"),
        ("[" * 100_000 + "]" * 100_000, "nests more than"),
        ('{"format": "hltmt-ctranslate2", "version": 2}', "lacks 'engine'"),
    ],
)
def test_an_empty_partial_or_deeply_nested_manifest_is_one_line(tmp_path, text, message):
    folder = make_folder(tmp_path / "f")
    with open(os.path.join(folder, manifest.MANIFEST), "w") as f:
        f.write(text)
    with pytest.raises(HltmtInputError, match=message):
        manifest.read(folder)


@pytest.mark.parametrize(
    "plant",
    [
        lambda d: os.symlink("/dev/zero", os.path.join(d, "models", "main", "zero")),
        lambda d: os.mkfifo(os.path.join(d, "models", "main", "fifo")),
        lambda d: os.symlink(os.path.join(d, "spm.model"), os.path.join(d, "spm2.model")),
        lambda d: (
            os.rename(os.path.join(d, "dict.txt"), os.path.join(d, "..", "dict.txt")),
            os.symlink(os.path.join(d, "..", "dict.txt"), os.path.join(d, "dict.txt")),
        ),
        lambda d: os.symlink("/", os.path.join(d, "models", "root")),
        lambda d: (
            os.rename(os.path.join(d, manifest.MANIFEST), os.path.join(d, "..", "m.json")),
            os.symlink(os.path.join(d, "..", "m.json"), os.path.join(d, manifest.MANIFEST)),
        ),
    ],
)
def test_a_link_or_special_file_in_the_folder_is_refused_without_being_opened(tmp_path, plant):
    import signal

    folder = make_folder(tmp_path / "f")
    plant(folder)
    signal.alarm(30)  # a FIFO opened for reading would wait for a writer forever
    try:
        with pytest.raises(HltmtInputError, match="is a (symbolic link|FIFO)") as refused:
            manifest.read(folder)
    finally:
        signal.alarm(0)
    assert "refused without being opened" in str(refused.value)


def test_the_manifest_names_the_plugin_version_that_wrote_it(tmp_path):
    import hltmt_plugin

    record = manifest.read(make_folder(tmp_path / "f"))
    assert record["plugin_version"] == hltmt_plugin.__version__
    assert manifest.DIGEST in record["files"]
