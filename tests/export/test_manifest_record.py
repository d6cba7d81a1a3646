"""The manifest record every exporter writes (hltmt_plugin.export.manifest_record): one record of
what the model serves, of the engine's own format and name, whatever the engine."""

import os

import pytest

from conftest import ROOT
from hltmt_plugin.export import manifest_record
from hltmt_plugin.hub import engines, loading

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def loaded():
    return loading.load_for_translation(os.path.join(ROOT, "docs", "results", "cpu-study", "models", "hltmt.pt"))[0]


def test_every_engine_gets_the_same_record_of_what_the_model_serves_in_its_own_format(loaded):
    targets = {lang: "main" for lang in loaded.langs}
    records = {
        name: manifest_record.describe(loaded, targets, {"main": "."}, name, "float32", "/any/where/x.pt", {name: "1"})
        for name in engines.EXPORTED
    }
    common = {
        name: {k: v for k, v in r.items() if k not in ("format", "engine", "source")} for name, r in records.items()
    }
    assert len({repr(sorted(c.items())) for c in common.values()}) == 1
    for name, record in records.items():
        assert (record["format"], record["engine"]) == (engines.ENGINES[name].format, name)
        assert record["source"]["checkpoint"] == "x.pt" and record["source"][name] == "1"  # no path of the machine
    first = next(iter(records.values()))
    assert first["routes"] and first["routing_map"] and set(first["langs"]) == set(loaded.langs)
