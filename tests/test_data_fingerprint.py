"""hltmt_plugin/data_fingerprint.py: the record of a data folder's dictionaries, written whole,
in its fixed format, and the differences from it."""
import json
import os

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
    assert check_dictionaries(str(tmp_path)) == ["dict.de.txt changed since the data was binarized",
                                                 "dict.en.txt is missing"]
