"""One writer and one reader, read from the code: every file that the package, the scripts or
the examples write is written by ``hltmt_plugin/atomic_files.py`` (whole or not at all), and
every record they read (JSON) is read by ``hltmt_plugin/records.py`` (through a schema).

Every call of every ``.py`` file under hltmt_plugin/, scripts/ and examples/ is read with
``ast``: a call that writes, moves or removes a file or folder (:data:`WRITING`, an ``open``
in a mode that writes, a path's :data:`WRITING_METHODS`, an ``os.open`` that creates or
writes) anywhere but in the writer, and a call that parses JSON (:data:`READING`) anywhere but
in the reader, is a violation, unless :data:`EXCEPTIONS` lists it with its reason. A mode that
is not a literal is one the test cannot read: a violation too (closed unless proven open).
"""

import ast
import functools
import os
import re

import pytest

from conftest import ROOT

FOLDERS = ("hltmt_plugin", "scripts", "examples")
WRITER = "hltmt_plugin/atomic_files.py"
READER = "hltmt_plugin/records.py"

# module functions that write, move or remove a file or folder (the name as imported)
WRITING = {
    *(f"shutil.{f}" for f in ("copy", "copy2", "copyfile", "copytree", "move", "rmtree", "make_archive")),
    *(f"os.{f}" for f in ("replace", "rename", "renames", "remove", "unlink", "rmdir", "removedirs", "truncate")),
    *(f"os.{f}" for f in ("symlink", "link", "mkfifo", "mknod", "write")),
    "torch.save",
    "json.dump",
    "pickle.dump",
    "numpy.save",
    "numpy.savetxt",
    "numpy.savez",
}
# methods of a path (or of a chart) that write, move or remove it
WRITING_METHODS = {"write_text", "write_bytes", "unlink", "rmdir", "rename", "touch", "symlink_to", "savefig"}
# functions and methods that open a file in the mode they are given: (name, place of the mode among the arguments)
OPENING = {
    **{f: 1 for f in ("open", "io.open", "os.fdopen", "gzip.open", "bz2.open", "lzma.open", "codecs.open")},
    **{f: 1 for f in ("tarfile.open", "zipfile.ZipFile", "gzip.GzipFile")},
}
OPENING_METHODS = {"open": 0}  # Path.open(mode); a call given fileobj= writes into a stream opened already
READING = {"json.load", "json.loads"}
WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND"}
WRITE_MODE = re.compile(r"[rbtU]*[wax+][rwxabtU+]*(:\w*)?")

# why a write or a read may sit beside the writer or the reader
LOG = "a log, written as the run goes (a reader follows it while it grows): logs are not written whole"
FILL = "fills the temporary folder of atomic_files.write_folder, which then replaces the output whole"
STREAM = "writes into the temporary file atomic_files gives it (cli/output.AtomicOutput): written whole"
DEVNULL = "points a closed standard output at /dev/null: no file is written"
SAVE_DIR = (
    "fairseq-train's --save-dir beside fairseq's own checkpoint writes: its lock, stale temporaries, the last one"
)
PROBE = "proves the output folder writable with a file removed at once"
WORK = "a file in the bench's own --work folder, read back by the same run (never a result a user reads)"
CHILD = "the job handed to a child process and its answer, in a temporary or log folder of the run"
BUNDLE = "builds the slimmed wheel in memory (io.BytesIO), which atomic_files.write_bytes then writes whole"

# (file, function) -> why it may write or read there
EXCEPTIONS = {
    ("hltmt_plugin/errors.py", "_silence_stdout"): DEVNULL,
    ("hltmt_plugin/experiments/steps.py", "reader_gone"): DEVNULL,
    ("hltmt_plugin/experiments/steps.py", "run_logged"): LOG,
    ("hltmt_plugin/experiments/steps.py", "run_quiet"): LOG,
    ("hltmt_plugin/experiments/runs.py", "save_figure"): STREAM,
    ("hltmt_plugin/cli/output.py", "AtomicOutput.__init__"): STREAM,
    (
        "hltmt_plugin/cli/decode.py",
        "run_jobs",
    ): "a temporary folder of fairseq-generate's output, moved by replace_file",
    ("hltmt_plugin/cli/decode.py", "decode_all"): CHILD + "; its workers' logs",
    ("hltmt_plugin/cli/launch.py", "launch"): LOG,
    ("hltmt_plugin/cli/prepare_data.py", "check_writable"): PROBE,
    ("hltmt_plugin/cli/prepare_data.py", "remove_empty"): "removes the empty folders that a refused run made for --out",
    **{("hltmt_plugin/cli/prepare_data.py", f): FILL for f in ("train_spm", "write_dict", "build")},
    **{("hltmt_plugin/cli/prepare_data.py", f): FILL for f in ("sentencepiece_model", "write_dictionary")},
    ("hltmt_plugin/cli/prepare_data.py", "encode_splits"): FILL,
    ("hltmt_plugin/export/ctranslate2.py", "export.fill"): FILL,
    ("hltmt_plugin/export/ctranslate2.py", "store_once"): FILL,
    ("hltmt_plugin/export/model_card.py", "write"): FILL,
    ("hltmt_plugin/export/transformers.py", "write_tokenizer"): FILL,
    ("hltmt_plugin/export/tokenizers.py", "_write_json"): FILL,
    ("hltmt_plugin/export/tokenizers.py", "_write_m2m100"): FILL,
    ("hltmt_plugin/export/importing.py", "build_checkpoint"): FILL,
    ("hltmt_plugin/export/importing.py", "write_data"): FILL,
    ("hltmt_plugin/hub/manifest.py", "write"): FILL,
    **{("hltmt_plugin/tasks/save_dir.py", f): SAVE_DIR for f in ("take_lock", "_release", "remove_stale_temps")},
    ("hltmt_plugin/tasks/save_dir.py", "restore_last"): SAVE_DIR,
    ("scripts/bench_export.py", "measure_command"): WORK,
    ("scripts/gpu_bundle.py", "slim_wheel"): BUNDLE,
    ("scripts/gpu_run.py", "Tee.__init__"): LOG,
    ("scripts/gpu_run.py", "Runner.launch"): LOG + " (a training run's, watched while it runs)",
    ("examples/wmt10/xlmr_recipe.py", "Recipe.train"): LOG + " (the epochs' logs joined into one)",
}


def sources():
    """The path (relative to the checkout) of every .py file of the package, the scripts and the examples."""
    for top in FOLDERS:
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    yield os.path.relpath(os.path.join(folder, name), ROOT).replace(os.sep, "/")


def _aliases(tree) -> dict:
    """{local name: the dotted name it stands for} of every import of ``tree`` (``np`` -> ``numpy``,
    ``rmtree`` -> ``shutil.rmtree``)."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(func, names: dict):
    """The dotted name a call's function stands for (``os.replace``), or None when its base is
    not a name (``Path(x).write_text``)."""
    attrs = []
    while isinstance(func, ast.Attribute):
        attrs.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return None
    return ".".join([names.get(func.id, func.id), *reversed(attrs)])


def _mode(call, place: int):
    """The mode argument of an ``open``-like call: its text, None when not given, ... when not a literal."""
    given = next((k.value for k in call.keywords if k.arg == "mode"), None)
    if given is None and len(call.args) > place:
        given = call.args[place]
    if given is None:
        return None
    return given.value if isinstance(given, ast.Constant) and isinstance(given.value, str) else ...


def _flags(node) -> set:
    return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)} | {
        n.id for n in ast.walk(node) if isinstance(n, ast.Name)
    }


def _what(call, names: dict):
    """What ``call`` does to files: ('write', name) or ('read', name), else None."""
    dotted = _dotted(call.func, names)
    method = call.func.attr if isinstance(call.func, ast.Attribute) else None
    if dotted in WRITING:
        return "write", dotted
    if dotted in READING:
        return "read", dotted
    if dotted == "os.open":
        return ("write", "os.open") if len(call.args) > 1 and _flags(call.args[1]) & WRITE_FLAGS else None
    if dotted is not None and dotted.startswith("hltmt_plugin.atomic_files."):
        return None  # the writer's own functions
    if any(k.arg == "fileobj" for k in call.keywords):
        return None  # writes into a stream it is given (atomic_files.AtomicFile's), not to a path
    if dotted in OPENING or (method in OPENING_METHODS and dotted not in OPENING):
        place = OPENING.get(dotted, OPENING_METHODS.get(method))
        mode = _mode(call, place)
        if mode is ...:
            return "write", f"{dotted or method}(mode not a literal)"
        if mode is not None and WRITE_MODE.fullmatch(mode):
            return "write", f"{dotted or method}({mode!r})"
        return None
    if method in WRITING_METHODS:
        return "write", f".{method}"
    return None


def _walk(node, where: str):
    """(node, the qualified name of the function or class around it) of every node under ``node``."""
    for child in ast.iter_child_nodes(node):
        inner = where
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            inner = f"{where}.{child.name}" if where else child.name
        yield child, where
        yield from _walk(child, inner)


def calls(path: str, text=None):
    """(line, function, 'write' or 'read', call) of every call of ``path`` (or of ``text``, as if it
    were that file's) that writes or reads a file as :data:`WRITING`, :data:`OPENING` and
    :data:`READING` say; ``function`` is the qualified name of the function it is in ('' at the top)."""
    tree = ast.parse(text if text is not None else open(os.path.join(ROOT, path), encoding="utf-8").read(), path)
    names = _aliases(tree)
    for node, where in _walk(tree, ""):
        if isinstance(node, ast.Call):
            what = _what(node, names)
            if what:
                yield node.lineno, where, *what


@functools.lru_cache(maxsize=None)
def calls_of(path: str):
    """:func:`calls` of the file ``path`` as it is now (read once)."""
    return list(calls(path))


def violations(read=calls_of):
    found = []
    for path in sources():
        for line, where, kind, call in sorted(read(path)):
            owner = WRITER if kind == "write" else READER
            if path != owner and (path, where) not in EXCEPTIONS:
                found.append(f"{path}:{line} {where or '(top)'}: {call} ({kind}s a file beside {owner})")
    return found


def test_every_file_is_written_by_the_writer_and_every_record_read_by_the_reader():
    assert violations() == []


def test_every_exception_is_still_needed():
    """An exception whose function no longer writes or reads is removed from the list."""
    used = {(path, where) for path in sources() for _, where, _, _ in calls_of(path)}
    assert sorted(set(EXCEPTIONS) - used) == []


PLANTED = [
    'open(p, "w")',
    'open(p, mode="a", encoding="utf-8")',
    'open(p, "wb")',
    'open(p, "r+")',
    "open(p, mode)",
    'io.open(p, "x")',
    'Path(p).open("w")',
    'Path(p).write_text("x")',
    "p.write_bytes(b'x')",
    "shutil.copyfile(a, b)",
    "shutil.copy2(a, b)",
    "copytree(a, b)",
    "shutil.move(a, b)",
    "shutil.rmtree(a)",
    "os.replace(a, b)",
    "os.rename(a, b)",
    "os.remove(a)",
    "os.open(p, os.O_WRONLY | os.O_CREAT)",
    "T.save(obj, p)",
    "json.dump(obj, f)",
    'tarfile.open(p, "w:gz")',
    "fig.savefig(p)",
    "json.load(f)",
    "json.loads(text)",
]
IMPORTS = (
    "import io, json, os, shutil, tarfile\nimport torch as T\nfrom pathlib import Path\nfrom shutil import copytree\n"
)


@pytest.mark.parametrize("planted", PLANTED)
def test_a_planted_write_or_read_is_caught(planted):
    path = "scripts/gpu_run.py"
    text = IMPORTS + f"def planted(p, a, b, f, obj, text, mode, fig):\n    {planted}\n"
    found = violations(lambda p: [*calls_of(p), *(calls(p, text) if p == path else [])])
    assert [v for v in found if v.startswith(f"{path}:6 planted:")], planted


@pytest.mark.parametrize(
    "harmless",
    [
        "open(p)",
        'open(p, "rb")',
        'open(p, encoding="utf-8")',
        'Path(p).open("r")',
        "json.dumps(obj)",
        'tarfile.open(fileobj=f, mode="w:gz")',
        'atomic_files.write_text(p, "x")',
        "os.open(p, os.O_RDONLY)",
        'text.replace("a", "b")',
    ],
)
def test_a_read_of_text_or_a_write_through_the_writer_is_not_caught(harmless):
    text = "import json, os, tarfile\nfrom pathlib import Path\nfrom hltmt_plugin import atomic_files\n"
    text += f"def f(p, f, obj, text):\n    {harmless}\n"
    assert list(calls("scripts/x.py", text)) == [], harmless


def test_an_exception_covers_its_function_only(tmp_path):
    """A write planted in a new function of a file whose other function is excepted is caught,
    and so is a module written anew (a temporary file of its own under scripts/)."""
    path = "scripts/gpu_run.py"
    text = "def other(p):\n    open(p, 'w')\n"
    found = violations(lambda p: [*calls_of(p), *(calls(p, text) if p == path else [])])
    assert found == [f"{path}:2 other: open('w') (writes a file beside {WRITER})"]
    module = tmp_path / "planted.py"
    module.write_text("def main(p):\n    with open(p, 'w') as f:\n        f.write('x')\n")
    assert [(line, where, kind) for line, where, kind, _ in calls(str(module))] == [(2, "main", "write")]


if __name__ == "__main__":
    print("\n".join(violations()))
