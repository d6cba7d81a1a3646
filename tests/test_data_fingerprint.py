"""hltmt_plugin/data_fingerprint.py: the record of a data folder's dictionaries, written whole,
in its fixed format, and the differences from it; and through the real fairseq-train, a
dictionary edited after binarization refused before the first update (hltmt-prepare-data's
tests check the record it writes)."""

import json
import os
import shutil

from conftest import HIGH, LANGS, PAIRS, PLUGIN, cli, run
from hltmt_plugin.data_fingerprint import FINGERPRINT_FILE, check_dictionaries, read_fingerprint, write_fingerprint


def test_the_fingerprint_is_written_whole_in_its_format_and_finds_a_changed_dictionary(tmp_path):
    (tmp_path / "dict.en.txt").write_text("a 1\nb 1\n", encoding="utf-8")
    (tmp_path / "dict.de.txt").write_text("c 1\n", encoding="utf-8")
    record = write_fingerprint(str(tmp_path))
    path = tmp_path / FINGERPRINT_FILE
    assert path.read_text(encoding="utf-8") == json.dumps(record, indent=1, sort_keys=True) + "\n"
    assert list(json.loads(path.read_text())) == ["dicts", "format", "version"]
    assert sorted(os.listdir(tmp_path)) == ["dict.de.txt", "dict.en.txt", FINGERPRINT_FILE]  # no temporary file
    assert read_fingerprint(str(tmp_path)) == record["dicts"] and check_dictionaries(str(tmp_path)) == []
    (tmp_path / "dict.de.txt").write_text("d 1\n", encoding="utf-8")
    os.remove(tmp_path / "dict.en.txt")
    assert check_dictionaries(str(tmp_path)) == [
        "dict.de.txt changed since the data was binarized",
        "dict.en.txt is missing",
    ]


def test_a_malformed_fingerprint_is_one_line_naming_it(tmp_path):
    import pytest

    from hltmt_plugin.errors import HltmtInputError

    path = tmp_path / FINGERPRINT_FILE
    good = {"format": "hltmt_plugin.dict_fingerprint", "version": 1, "dicts": {"dict.en.txt": "0" * 64}}
    for record, why in (
        ({}, "is empty"),
        ({**good, "dicts": {}}, "field 'dicts' must hold"),
        ({**good, "dicts": {"dict.en.txt": 7}}, "field 'dicts.dict.en.txt' must be a string"),
        ({**good, "version": "1"}, "field 'version' must be a whole number"),
        ([good], "must be a map"),
    ):
        path.write_text(json.dumps(record))
        with pytest.raises(HltmtInputError, match=why) as caught:
            read_fingerprint(str(tmp_path))
        assert "\n" not in str(caught.value) and str(path) in str(caught.value)
    path.write_text("[" * 50_000)
    with pytest.raises(HltmtInputError, match="nests more than"):
        check_dictionaries(str(tmp_path))


def test_a_dictionary_changed_after_binarization_is_refused(data_bin, tmp_path):
    copy = tmp_path / "bin"
    shutil.copytree(data_bin, copy)
    for name in os.listdir(copy):
        if name.startswith("dict.") and name.endswith(".txt"):
            lines = (copy / name).read_text(encoding="utf-8").splitlines(keepends=True)
            (copy / name).write_text("".join(lines[:5] + lines[6:]), encoding="utf-8")  # one line removed
    done = run(
        [
            cli("fairseq-train"),
            str(copy),
            "--user-dir",
            PLUGIN,
            "--task",
            "hltmt_translation",
            "--arch",
            "hltmt_transformer_tiny",
            "--langs",
            LANGS,
            "--lang-pairs",
            PAIRS,
            "--encoder-langtok",
            "tgt",
            "--high-resource-langs",
            HIGH,
            "--slp-pool-size",
            "2",
            "--cpu",
            "--max-update",
            "1",
            "--optimizer",
            "adam",
            "--lr",
            "1e-3",
            "--max-tokens",
            "1000",
            "--save-dir",
            str(tmp_path / "s"),
        ]
    )
    assert done.returncode != 0
    assert "dict.de.txt changed since the data was binarized" in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "s" / "checkpoint_last.pt").exists()
