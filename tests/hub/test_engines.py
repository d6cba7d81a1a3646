"""The engines declared once (hltmt_plugin.hub.engines): every switch on an engine reads the
table, and what the table says each engine is, is there (its modules, its install extra)."""

import ast
import os

import pytest

from hltmt_plugin.hub import decoding, engines

pytestmark = pytest.mark.fast
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def setup_extras() -> dict:
    tree = ast.parse(open(os.path.join(ROOT, "setup.py"), encoding="utf-8").read())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    extras = next(k.value for k in call.keywords if k.arg == "extras_require")
    return ast.literal_eval(extras)


def test_each_engine_names_what_is_there():
    extras = setup_extras()
    for name, engine in engines.ENGINES.items():
        translator = engines.translator(name)
        assert translator.engine == name, name
        if engine.exporter is None:
            continue
        assert translator.engine_name == engine.label, name
        module = engines.exporter(name)
        assert callable(module.export), name
        assert tuple(extras[name]) == engine.requirements, name  # setup.py's extra of the engine's name
        assert f'".[{name}]"' in engines.install_line(name)


def test_the_commands_choices_are_the_tables():
    from hltmt_plugin.cli import export, translate

    to = next(a for a in export.build_parser()._actions if "--to" in a.option_strings)
    assert tuple(to.choices) == engines.EXPORTED == ("ctranslate2", "transformers")
    engine = next(a for a in translate.build_parser()._actions if "--engine" in a.option_strings)
    assert list(engine.choices) == list(engines.ENGINES) == list(decoding.ENGINES)


def test_an_exported_engine_without_its_declarations_is_refused(monkeypatch):
    import dataclasses

    half = dataclasses.replace(engines.ENGINES["transformers"], card_usage=None)
    monkeypatch.setitem(engines.ENGINES, "transformers", half)
    with pytest.raises(TypeError, match="transformers is exported but does not declare"):
        engines._check_declarations()


def test_a_manifest_is_read_only_in_its_engines_formats():
    assert engines.reads_format("ctranslate2", "hltmt-ctranslate2")
    assert engines.reads_format("transformers", "hltmt-transformers")
    assert engines.reads_format("transformers", "hltmt-ctranslate2")  # what earlier versions wrote
    assert not engines.reads_format("ctranslate2", "hltmt-transformers")
    assert not engines.reads_format("fairseq", "hltmt-ctranslate2")


def test_an_unknown_engine_is_one_line():
    from hltmt_plugin.errors import HltmtConfigError

    with pytest.raises(
        HltmtConfigError, match="'bogus' is not an engine \\(they are: fairseq, ctranslate2, transformers\\)"
    ):
        engines.get("bogus")
