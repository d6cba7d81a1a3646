"""The layering of docs/architecture.md, read from the code: every import of one part of the
package from another points to a lower layer (so no two parts import each other, and no
feature knows another feature)."""
import ast
import os

import pytest

from conftest import ROOT

PACKAGE = os.path.join(ROOT, "hltmt_plugin")

# lowest first; a part may import only parts of lower layers (and itself)
LAYERS = [
    ["errors"],
    ["atomic_files"],  # every file written whole or not at all
    ["config", "compat", "data_fingerprint"],
    ["modules", "modules.routing"],  # modules/__init__.py is empty
    ["languages", "directions", "compatibility"],  # directions: which directions a checkpoint serves, from its options
    ["modules.language_pool"],  # the SLP's modules, routed by a decision: routing only
    ["modules.language_router", "adapters", "skills"],  # the features: each knows languages and routing only
    ["peft", "pretrained"],
    ["models"],
    ["tasks", "criterions"],  # the model's public surface only
    ["export.manifest"],  # the export folder's manifest: read by the hub, written by export
    ["hub"],
    ["export"],  # models that leave fairseq: CTranslate2 export
    ["cli"],
]
RANK = {part: i for i, layer in enumerate(LAYERS) for part in layer}
# `import hltmt_plugin` registers the task, model and criterion with fairseq: what a command does first
REGISTERS = {"hub", "cli"}


def part_of(module: str) -> str:
    """The layer table's name for a module ``hltmt_plugin.a.b``: 'a.b' when listed, else 'a'."""
    rest = module.split(".")[1:]
    return next((".".join(rest[:n]) for n in (2, 1) if ".".join(rest[:n]) in RANK), ".".join(rest[:1]))


def modules():
    for folder, _, files in os.walk(PACKAGE):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path[:-3], ROOT).replace(os.sep, ".")
                yield path, dotted[:-len(".__init__")] if dotted.endswith(".__init__") else dotted


def imports(path):
    """(line, imported module) of every import of the package in ``path``, at any depth."""
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("hltmt_plugin"):
            yield node.lineno, node.module
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names if a.name.startswith("hltmt_plugin"))


def test_every_part_of_the_package_has_a_layer():
    parts = {part_of(dotted) for _, dotted in modules() if dotted != "hltmt_plugin"}
    assert parts <= set(RANK), f"not in the layer table: {sorted(parts - set(RANK))}"


def violations():
    found = []
    for path, dotted in modules():
        if dotted == "hltmt_plugin":  # the registration: imports what it registers
            continue
        source = part_of(dotted)
        for line, target in imports(path):
            where = f"{os.path.relpath(path, ROOT)}:{line} imports {target}"
            if target == "hltmt_plugin":
                if source not in REGISTERS:
                    found.append(where + " (the registration, imported only by commands and the Python API)")
            elif part_of(target) != source and RANK[part_of(target)] >= RANK[source]:
                found.append(f"{where} ({part_of(target)} is not below {source})")
    return found


def test_imports_point_down_the_layers():
    assert violations() == []


@pytest.mark.parametrize("source, target", [("skills/layers.py", "hltmt_plugin.adapters.layers"),
                                            ("adapters/files.py", "hltmt_plugin.peft"),
                                            ("tasks/hltmt_translation.py", "hltmt_plugin.hub.translator")])
def test_the_check_fails_on_an_import_against_the_layers(source, target, monkeypatch):
    path = os.path.join(PACKAGE, source)
    real = imports
    monkeypatch.setitem(globals(), "imports", lambda p: [*real(p), *([(1, target)] if p == path else [])])
    assert [v for v in violations() if v.startswith(f"hltmt_plugin/{source}:1 imports {target}")]
