"""hltmt_plugin.export.manifest: an export folder is checked on load like a checkpoint is:
its record, its languages and groups, and every file by content (no CTranslate2 needed)."""

import os

import pytest

from export_common import make_folder
from hltmt_plugin.errors import HltmtInputError
from hltmt_plugin.export import manifest


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
        (lambda d: open(os.path.join(d, manifest.MANIFEST), "w").write("{"), "is not an export manifest"),
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
        ({"format": "other"}, "not an hltmt-ctranslate2 manifest"),
        ({"langs": "en,de"}, "field 'langs'"),
        ({"decoder_langtok": 1}, "field 'decoder_langtok'"),
        ({"targets": {"en": "main"}}, "'targets' must name the model serving each language"),
        ({"targets": {"en": "main", "de": "m0"}}, "names model.s. m0 that 'models' lacks"),
        ({"routing_map": {"xx": 0}}, "'routing_map' must map languages"),
        ({"models": {"main": "../elsewhere"}}, "does not list"),
    ],
)
def test_a_record_that_does_not_hold_together_is_refused(tmp_path, changes, message):
    folder = make_folder(tmp_path / "f", **changes)
    with pytest.raises(HltmtInputError, match=message):
        manifest.read(folder)


def test_a_patch_rebuilds_the_other_file_exactly_and_a_bad_one_is_refused():
    base = bytes(range(256)) * 40
    other = bytearray(base)
    other[10:20] = b"x" * 10
    other[5000] = 7
    patch = manifest.make_patch(base, bytes(other))
    assert manifest.apply_patch(base, patch, "p") == bytes(other)
    assert len(patch) < 200 and manifest.make_patch(base, base + b"!") is None
    with pytest.raises(HltmtInputError, match="p is cut short"):
        manifest.apply_patch(base, patch[: len(manifest.PATCH_MAGIC) + 5], "p")
    with pytest.raises(HltmtInputError, match="not a model patch"):
        manifest.apply_patch(base, b"junk", "p")
    with pytest.raises(HltmtInputError, match="does not fit"):
        manifest.apply_patch(base[:100], patch, "p")


def test_a_patch_must_apply_to_a_model_stored_whole(tmp_path):
    folder = make_folder(tmp_path / "f", patches={"main": "main"})
    with pytest.raises(HltmtInputError, match="'patches' must name models stored whole"):
        manifest.read(folder)
