"""The layering of docs/architecture.md, read from the code: every import of one part of the
package from another points to a lower layer (so no two parts import each other, and no
feature knows another feature); the plugin's core (below hub/) imports no tool's dependency
(:data:`TOOL_DEPENDENCIES`) and the tools import one only inside the function that needs it;
setup.py installs those dependencies only with an extra (one distribution, extras for the
tools' heavy dependencies: docs/architecture.md, "One distribution")."""

import ast
import os
import re

import pytest

from conftest import ROOT

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

PACKAGE = os.path.join(ROOT, "hltmt_plugin")

# lowest first; a part may import only parts of lower layers (and itself)
LAYERS = [
    ["errors", "corpora", "sizes", "process", "progress"],  # corpora, sizes: the corpora's languages, the model
    # sizes, known by name; process: what this process is (which command), decided once; progress: a command's lines
    ["records", "directions"],  # every record read through one schema; directions: which directions a checkpoint serves
    ["atomic_files"],  # every file written whole or not at all (its folder marker read as a record)
    ["paths", "text", "model_check"],  # every path option declared (what a file is: atomic_files); the one reader of
    # sentences; the one check of a model (its options and weights) on every route a model enters
    ["config", "compat", "data_fingerprint"],
    ["routing"],  # the one routing primitive and a pass's rows (PassRows)
    ["languages", "compatibility"],
    ["pool", "adapters", "skills"],  # the features: each knows languages and routing only
    ["peft", "pretrained"],
    ["models"],
    ["tasks", "criterions"],  # the model's public surface only
    ["hub"],
    ["export"],  # models that leave fairseq: the CTranslate2 and transformers exports, the model card
    ["serve"],  # hltmt-serve's server over the hub's contract (the batcher, the API, the metrics, the pages)
    ["cli"],  # the user's commands
    ["experiments"],  # the experiment drivers (hltmt-main-job, hltmt-study, hltmt-report): above the commands
]
RANK = {part: i for i, layer in enumerate(LAYERS) for part in layer}
# `import hltmt_plugin` registers the task, model and criterion with fairseq: what a command does first
REGISTERS = {"hub", "cli", "experiments"}
# the tools: the Python API, the exports, the user's commands and the experiment drivers; below them the core
TOOLS = ("hub", "export", "serve", "cli", "experiments")
# the tools' dependencies that a fairseq user of the core never installs (setup.py's extras)
TOOL_DEPENDENCIES = {
    "matplotlib": "plots",
    "transformers": "transformers",
    "ctranslate2": "ctranslate2",
    "sacremoses": "wmt10",
    "starlette": "serve",
    "uvicorn": "serve",
}
# a dependency of the tools that fairseq itself requires (so installed with the core), never imported by the core
NOT_IN_THE_CORE = {"sacrebleu", *TOOL_DEPENDENCIES}


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
                yield path, dotted[: -len(".__init__")] if dotted.endswith(".__init__") else dotted


def _is_module(dotted: str) -> bool:
    base = os.path.join(ROOT, *dotted.split("."))
    return os.path.isfile(base + ".py") or os.path.isfile(os.path.join(base, "__init__.py"))


def _package_of(path: str) -> str:
    dotted = os.path.relpath(path[:-3], ROOT).replace(os.sep, ".")
    return dotted[: -len(".__init__")] if dotted.endswith(".__init__") else dotted.rsplit(".", 1)[0]


def _from_import(node, package: str):
    """(line, module) of each name of ``from X import a, b``: ``X.a`` when that is a module (a
    submodule imported by name), else ``X``; a relative ``X`` resolved against ``package``."""
    module = node.module or ""
    if node.level:
        parts = package.split(".")
        module = ".".join(parts[: len(parts) - (node.level - 1)] + ([module] if module else []))
    if not module.startswith("hltmt_plugin"):
        return
    for alias in node.names:
        named = f"{module}.{alias.name}"
        yield node.lineno, named if _is_module(named) else module


def _dynamic_import(node):
    """``importlib.import_module("hltmt_plugin...")`` / ``__import__("hltmt_plugin...")``."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if (
        name in ("import_module", "__import__")
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and str(node.args[0].value).startswith("hltmt_plugin")
    ):
        yield node.lineno, node.args[0].value


def imports(path, text=None):
    """(line, imported module) of every import of the package in ``path`` (or in ``text``, as if
    it were that file's), at any depth: absolute and relative imports, a submodule imported by
    name (``from hltmt_plugin.pool import router``), and dynamic imports."""
    package = _package_of(path)
    tree = ast.parse(text if text is not None else open(path, encoding="utf-8").read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            yield from _from_import(node, package)
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names if a.name.startswith("hltmt_plugin"))
        elif isinstance(node, ast.Call):
            yield from _dynamic_import(node)


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


@pytest.mark.parametrize(
    "source, target",
    [
        ("skills/layers.py", "hltmt_plugin.adapters.layers"),
        ("adapters/files.py", "hltmt_plugin.peft"),
        ("tasks/hltmt_translation.py", "hltmt_plugin.hub.translator"),
    ],
)
def test_the_check_fails_on_an_import_against_the_layers(source, target, monkeypatch):
    path = os.path.join(PACKAGE, source)
    real = imports
    monkeypatch.setitem(globals(), "imports", lambda p: [*real(p), *([(1, target)] if p == path else [])])
    assert [v for v in violations() if v.startswith(f"hltmt_plugin/{source}:1 imports {target}")]


@pytest.mark.parametrize(
    "source, text",
    [
        ("routing.py", "from .pool.router import LanguageRouter"),
        ("pool/modules.py", "from hltmt_plugin.skills import modules"),
        ("models/decoder.py", "from ..tasks import stages"),
        ("tasks/hltmt_translation.py", "import importlib\nimportlib.import_module('hltmt_plugin.hub.translator')"),
        ("adapters/files.py", "import hltmt_plugin.peft"),
        ("skills/layers.py", "def f():\n    from ..adapters.layers import x"),
    ],
)
def test_every_import_form_against_the_layers_is_caught(source, text, monkeypatch):
    path = os.path.join(PACKAGE, source)
    real = imports
    monkeypatch.setitem(globals(), "imports", lambda p: [*real(p), *(real(p, text) if p == path else [])])
    assert [v for v in violations() if v.startswith(f"hltmt_plugin/{source}:")], text


def outside_imports(path, text=None):
    """(line, top-level module, whether it is imported when ``path`` is) of every import of a
    module outside the package in ``path`` (or in ``text``, as if it were that file's): an
    import inside a function runs only when the function does."""
    tree = ast.parse(text if text is not None else open(path, encoding="utf-8").read(), path)

    def visit(node, at_import):
        for child in ast.iter_child_nodes(node):
            inner = at_import and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                yield from ((child.lineno, a.name.split(".")[0], at_import) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                yield child.lineno, child.module.split(".")[0], at_import
            yield from visit(child, inner)

    yield from visit(tree, True)


def is_core(dotted: str) -> bool:
    return dotted == "hltmt_plugin" or RANK[part_of(dotted)] < RANK[TOOLS[0]]


def dependency_violations(read=outside_imports):
    """One line per import of a tool's dependency in the core, or in a tool at its import."""
    found = []
    for path, dotted in modules():
        for line, name, at_import in read(path):
            where = f"{os.path.relpath(path, ROOT)}:{line} imports {name}"
            if name in NOT_IN_THE_CORE and is_core(dotted):
                found.append(where + " (a tool's dependency, in the core)")
            elif name in NOT_IN_THE_CORE and at_import:
                found.append(where + " (at the import of a tool: import it in the function that needs it)")
    return found


def test_the_core_never_imports_a_tool_nor_a_tools_dependency():
    into_tools = [
        f"{dotted}:{line} imports {target}"
        for path, dotted in modules()
        # the registration names a plugin command's process (cli.command_name), only in that process
        if is_core(dotted) and dotted != "hltmt_plugin"
        for line, target in imports(path)
        if target != "hltmt_plugin" and part_of(target) in TOOLS
    ]
    assert into_tools == []
    assert dependency_violations() == []
    core = {part_of(d) for _, d in modules() if is_core(d)}
    assert {"pool", "models", "tasks", "routing", "records", "compat"} <= core and not core & set(TOOLS)


@pytest.mark.parametrize(
    "source, text",
    [
        ("models/decoder.py", "import matplotlib.pyplot as plt"),
        ("pool/router.py", "def f():\n    from transformers import AutoModel"),
        ("tasks/hltmt_translation.py", "def f():\n    import sacrebleu"),
        ("compat/quiet.py", "try:\n    import ctranslate2\nexcept ImportError:\n    pass"),
        ("experiments/report.py", "from sacrebleu.metrics import BLEU"),
        ("hub/translator.py", "import matplotlib"),
    ],
)
def test_a_planted_tool_dependency_is_caught(source, text):
    path = os.path.join(PACKAGE, source)
    found = dependency_violations(lambda p: [*outside_imports(p), *(outside_imports(p, text) if p == path else [])])
    assert [v for v in found if v.startswith(f"hltmt_plugin/{source}:")], text


def test_a_tool_may_import_its_dependency_where_it_is_used():
    text = "def chart():\n    import matplotlib\n"
    assert [i[2] for i in outside_imports(os.path.join(PACKAGE, "experiments", "plots.py"), text)] == [False]


def setup_requirements():
    """setup.py's install_requires and extras_require, read from its text (no code run)."""
    tree = ast.parse(open(os.path.join(ROOT, "setup.py"), encoding="utf-8").read())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    given = {k.arg: k.value for k in call.keywords}

    def names(node):
        return [re.split(r"[<>=!\[ ]", e.value)[0] for e in node.elts if isinstance(e, ast.Constant)]

    extras = given["extras_require"]
    return names(given["install_requires"]), {k.value: names(v) for k, v in zip(extras.keys, extras.values)}


def test_the_tools_dependencies_are_extras_of_the_one_distribution():
    required, extras = setup_requirements()
    assert not set(TOOL_DEPENDENCIES) & set(required), required
    for name, extra in TOOL_DEPENDENCIES.items():
        assert name in extras[extra], (name, extra)
