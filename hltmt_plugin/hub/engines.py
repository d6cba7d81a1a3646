"""The engines, declared once: every engine a translation runs on, with what each command, the
manifest, the model card and the install need to know of it. Every switch on an engine reads
this table:

- ``hltmt-export --to`` and ``hltmt-translate`` / ``hltmt-serve --engine`` take its names;
  ``hltmt-export`` runs the engine's exporter (:func:`exporter`) with the options only that
  engine takes (``export_options``) and says what it wrote (``summary``);
- an export folder's manifest (:mod:`hltmt_plugin.hub.manifest`) is of the engine's ``format``,
  holds the engine's own ``fields`` and the ``files`` it serves from; loading the folder gives
  the engine's translator (:func:`translator`);
- the model card names the engine's library (``library``), what made the folder (``made``) and
  shows the engine's usage (``card_usage``);
- the engine's library is installed by setup.py's extra of the engine's name
  (``requirements``, tests/hub/test_engines.py compares them), and a missing one is said with
  :func:`install_line`;
- the search options say how each engine takes them (:mod:`hltmt_plugin.hub.decoding`, one
  entry per engine name).

A new engine is its exporter and translator modules and one entry here (docs/architecture.md,
"How to add an engine"). Imports neither torch nor fairseq; modules are named, imported only
when used.
"""

import dataclasses
import importlib
import os
from typing import Callable, Dict, List, Optional, Tuple

from hltmt_plugin import records
from hltmt_plugin.errors import HltmtConfigError
from hltmt_plugin.hub import decoding

LANG = records.Text(min_len=1, max_len=64, pattern=r"[^\s/\\,:]+")  # a language code of a manifest


@dataclasses.dataclass(frozen=True)
class Engine:
    """One engine: ``name`` (the commands' and the manifest's), ``label`` (as messages name it),
    ``translator`` (``module:Class`` of the translator serving it), ``exporter`` (the module of
    ``hltmt-export --to NAME``, whose ``export(checkpoint, out, spm=, data=, force=, card=,
    option=, **own)`` writes a folder; None: the engine translates checkpoints), ``format`` (its
    manifest's ``format``; ``formats_read``: the names earlier versions wrote, read too),
    ``fields`` (the manifest's fields of this engine), ``files`` (the files a folder of this
    engine must hold, from its manifest), ``root_model`` (a model without a pool is written in
    the folder itself, not ``models/main``), ``requirements`` (setup.py's extra of this name),
    ``export_options`` (``hltmt-export``'s options only this engine takes: the parsed option's
    name -> the exporter's keyword), ``summary`` / ``made`` (what the command / the model card say
    the folder is, formatted with the manifest and its ``source``), ``library`` (the model card's
    ``library_name``), ``card_usage`` (``module:function`` giving the card's usage lines),
    ``notes`` (``module:function`` giving the command's advice on a folder written)."""

    name: str
    label: str
    translator: str
    exporter: Optional[str] = None
    format: Optional[str] = None
    formats_read: Tuple[str, ...] = ()
    fields: Dict[str, object] = dataclasses.field(default_factory=dict)
    files: Optional[Callable[[dict], List[str]]] = None
    root_model: bool = False
    requirements: Tuple[str, ...] = ()
    export_options: Dict[str, str] = dataclasses.field(default_factory=dict)
    summary: str = ""
    made: str = ""
    library: str = ""
    card_usage: Optional[str] = None
    notes: Optional[str] = None


def _ctranslate2_files(record: dict) -> List[str]:
    """The sentencepiece model, the dictionary, and each group's model (whole, or a patch)."""
    patches = record["patches"]
    return ["spm.model", "dict.txt"] + [
        f"{entry}/model.{'patch' if group in patches else 'bin'}" for group, entry in record["models"].items()
    ]


# an export to transformers: the tokenizer's files and the card (in the folder) and each model's (in its folder)
TRANSFORMERS_TOKENIZER = ("README.md", "dict.txt", "vocab.json", "source.spm", "target.spm", "tokenizer_config.json")
TRANSFORMERS_MODEL = ("config.json", "generation_config.json", "model.safetensors")


def _transformers_files(record: dict) -> List[str]:
    """The tokenizer's files and the card, and each model's configuration, generation settings and weights."""
    return [*TRANSFORMERS_TOKENIZER] + [
        os.path.normpath(f"{entry}/{name}").replace(os.sep, "/")
        for entry in record["models"].values()
        for name in TRANSFORMERS_MODEL
    ]


ENGINES: Dict[str, Engine] = {
    engine.name: engine
    for engine in (
        Engine(
            name="fairseq",
            label="the checkpoint",
            translator="hltmt_plugin.hub.translator:HltmtTranslator",
        ),
        Engine(
            name="ctranslate2",
            label="CTranslate2",
            translator="hltmt_plugin.hub.ct2_engine:Ct2Translator",
            exporter="hltmt_plugin.export.ctranslate2",
            format="hltmt-ctranslate2",
            files=_ctranslate2_files,
            requirements=("ctranslate2>=4.5",),
            export_options={"quantization": "quantization", "whole_groups": "whole"},
            summary="CTranslate2 {source[ctranslate2]}, {quantization}",
            made="CTranslate2 {source[ctranslate2]} by `hltmt-export`",
            library="ctranslate2",
            card_usage="hltmt_plugin.export.model_card:usage_ctranslate2",
            notes="hltmt_plugin.export.ctranslate2:notes",
        ),
        Engine(
            name="transformers",
            label="transformers",
            translator="hltmt_plugin.hub.hf_engine:HfTranslator",
            exporter="hltmt_plugin.export.transformers",
            format="hltmt-transformers",
            formats_read=("hltmt-ctranslate2",),  # the name an export to transformers had before it had its own
            fields={"language_codes": records.MapOf(records.Text(min_len=1, max_len=64), key=LANG)},
            files=_transformers_files,
            root_model=True,
            requirements=("transformers>=5.25,<6", "safetensors>=0.4"),
            summary="{source[class]}, transformers {source[transformers]}",
            made="`{source[class]}` (transformers {source[transformers]}) by `hltmt-export --to transformers`",
            library="transformers",
            card_usage="hltmt_plugin.export.model_card:usage_transformers",
            notes="hltmt_plugin.export.tokenizers:notes",
        ),
    )
}
EXPORTED = tuple(name for name, engine in ENGINES.items() if engine.exporter)  # the engines of hltmt-export --to
FORMATS = sorted({name for engine in ENGINES.values() for name in (engine.format, *engine.formats_read) if name})


def reads_format(name: str, format_name: str) -> bool:
    """Whether a manifest of ``format_name`` can be one of the engine ``name``'s."""
    engine = ENGINES.get(name)
    return engine is not None and format_name in (engine.format, *engine.formats_read)


def _check_declarations() -> None:
    """The table agrees with the search options' (each engine there, and only these) and each
    exported engine declares what a folder needs."""
    if set(ENGINES) != set(decoding.ENGINES):
        raise TypeError(f"the engines {sorted(ENGINES)} and the search options' {sorted(decoding.ENGINES)} differ")
    for name in EXPORTED:
        engine = ENGINES[name]
        if not (engine.format and engine.files and engine.summary and engine.made and engine.card_usage):
            raise TypeError(f"the engine {name} is exported but does not declare its format, files, summary and card")


_check_declarations()


def get(name: str) -> Engine:
    """The engine ``name``; HltmtConfigError naming the engines there are."""
    if name not in ENGINES:
        raise HltmtConfigError(f"{str(name)[:40]!r} is not an engine (they are: {', '.join(ENGINES)})")
    return ENGINES[name]


def _named(path: str):
    module, _, attribute = path.partition(":")
    found = importlib.import_module(module)
    return getattr(found, attribute) if attribute else found


def exporter(name: str):
    """The exporter module of the engine ``name`` (``hltmt-export --to NAME``)."""
    return _named(get(name).exporter)


def translator(name: str):
    """The translator class of the engine ``name``."""
    return _named(get(name).translator)


def card_usage(record: dict, facts: dict) -> List[str]:
    """The model card's usage lines for the folder of ``record`` (its manifest; ``facts``: the
    card's other facts, :func:`hltmt_plugin.export.model_card.card`)."""
    return _named(get(record["engine"]).card_usage)(record, facts)


def notes(record: dict) -> List[str]:
    """``hltmt-export``'s advice on the folder of ``record`` (its manifest), if its engine has any."""
    engine = get(record["engine"])
    return _named(engine.notes)(record) if engine.notes else []


def said(template: str, record: dict) -> str:
    """``template`` (an engine's ``summary`` or ``made``) filled from ``record``, its manifest."""
    return template.format(**record)


def install_line(name: str) -> str:
    """How to install the engine ``name``'s library: pip's line, or the plugin's extra."""
    requirements = " ".join(f'"{r}"' for r in get(name).requirements)
    return f'pip install {requirements} (or pip install -e ".[{name}]")'
