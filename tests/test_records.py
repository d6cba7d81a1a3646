"""The one reader of records (hltmt_plugin/records.py): types, required fields, sizes and
nesting checked; an empty or partial record, a file nested too deep, too large or not a regular
file each one HltmtInputError line."""

import os

import pytest

from hltmt_plugin import records
from hltmt_plugin.errors import HltmtInputError

SCHEMA = records.Record(
    {"name": records.Text(min_len=1), "sizes": records.ListOf(records.Int(low=0), min_len=1)},
    optional={"note": (str, None), "parts": records.MapOf(records.Record({"beam": records.Int(low=1)}))},
)
GOOD = {"name": "x", "sizes": [1, 2], "note": None, "parts": {"a": {"beam": 5}}}


def refused(obj, schema=SCHEMA) -> str:
    with pytest.raises(HltmtInputError) as caught:
        records.check(obj, schema, "the test record")
    message = str(caught.value)
    assert "\n" not in message and message.startswith("the test record")
    return message


@pytest.mark.fast
def test_a_record_is_checked_field_by_field_in_one_line():
    assert records.check(GOOD, SCHEMA, "the test record") is GOOD
    assert "is empty: a partial record" in refused({})
    assert "lacks 'sizes'" in refused({"name": "x"})
    assert "field 'name' must be a string, got a whole number" in refused({**GOOD, "name": 3})
    assert "field 'sizes[1]' must be a whole number, got true/false" in refused({**GOOD, "sizes": [1, True]})
    assert "field 'sizes[0]' must be at least 0" in refused({**GOOD, "sizes": [-1]})
    assert "field 'sizes' must hold" in refused({**GOOD, "sizes": []})
    assert "field 'note' must be a string or null" in refused({**GOOD, "note": 1.5})
    assert "field 'parts.a.beam' must be at least 1" in refused({**GOOD, "parts": {"a": {"beam": 0}}})
    assert "field 'parts.a' is empty" in refused({**GOOD, "parts": {"a": {}}})
    assert "unknown field 'other'" in refused({**GOOD, "other": 1})
    assert "must be a map, got a list" in refused([GOOD])
    assert "(written by hltmt_plugin 9.9)" in refused(
        {"plugin_version": "9.9"}, SCHEMA.extended(optional={}, extra=True)
    )


def test_numbers_are_finite_and_bounded():
    number = records.Number(low=-1, high=1)
    assert records.check(0.5, number, "x") == 0.5
    for bad in (float("nan"), float("inf"), 2, "1", True):
        with pytest.raises(HltmtInputError):
            records.check(bad, number, "x")


def test_any_value_is_bounded_in_depth_without_recursion():
    loop: list = []
    loop.append(loop)
    assert "nests more than" in refused(loop, records.ANYTHING)
    deep: dict = {}
    for _ in range(10_000):
        deep = {"a": deep}
    assert "nests more than" in refused(deep, records.ANYTHING)
    assert "plain value" in refused({"a": object()}, records.ANYTHING)
    assert records.check({"a": [1, 2.5, None, "x", {"b": True}]}, records.ANYTHING, "x")


def test_a_json_record_is_read_bounded(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('{"name": "x", "sizes": [1]}')
    assert records.read_json(path, SCHEMA, "test record") == {"name": "x", "sizes": [1]}
    for text, why in (
        ("[" * 100_000 + "]" * 100_000, "nests more than"),
        ("{}", "is empty"),
        ('{"name": "x", "sizes": [NaN]}', "not valid JSON"),
        ('{"name": "x", "sizes": [1', "not valid JSON"),
        ('"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["', "must be a map, got a string"),
    ):
        path.write_text(text)
        with pytest.raises(HltmtInputError, match=why):
            records.read_json(path, SCHEMA, "test record")
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(HltmtInputError, match="not UTF-8"):
        records.read_json(path, SCHEMA, "test record")
    path.write_text(" " * 2000)
    with pytest.raises(HltmtInputError, match="more than the 1000 bytes"):
        records.read_json(path, SCHEMA, "test record", max_bytes=1000)


def test_a_special_file_is_refused_without_being_opened(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero", tmp_path, tmp_path / "missing.json"):
        with pytest.raises(HltmtInputError) as caught:
            records.read_json(path, SCHEMA, "test record")
        assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_the_json_depth_leaves_strings_out():
    assert records.json_depth('{"a": "[[[[{{", "b": [[1]], "c": "\\"]]"}') == 3


def test_a_required_field_holding_null_is_refused_like_a_missing_one():
    schema = records.Record({"dicts": records.MapOf(records.SHA256, min_len=1)}, optional={"note": str})
    with pytest.raises(HltmtInputError, match="^the record: field 'dicts' must be a map, got null$"):
        records.check({"dicts": None}, schema, "the record")
    with pytest.raises(HltmtInputError, match="^the record: field 'note' must be a string, got null$"):
        records.check({"dicts": {"a": "0" * 64}, "note": None}, schema, "the record")  # optional: there or absent
    with pytest.raises(HltmtInputError, match="lacks 'dicts': a partial record"):
        records.check({"note": "x"}, schema, "the record")
