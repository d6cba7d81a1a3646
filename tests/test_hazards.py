"""Every route that loads a checkpoint or writes a file, crossed with every kind of bad input,
through the real commands.

Two tables: :data:`LOAD_ROUTES` (fairseq's commands under the plugin's task, fairseq-train's
three ways of starting from a checkpoint, fairseq's hub, the plugin's commands and Python API)
against :data:`LOAD_HAZARDS` (a data folder of other dictionaries, other language-token
options, other languages, edited stored options, code in a stored option, a truncated file),
and :data:`WRITE_ROUTES` (every command option that names a file to write, found from the
installed commands' parsers: a new one joins by itself, and fails until :data:`WRITE_ARGS` gives
its command's other arguments) against
:data:`WRITE_HAZARDS` (a FIFO, a device, a ``/dev/std*`` path, a file-size limit, a file whose
mode and owner must stay). A route answers each hazard with the phrase of its one-line refusal
or with the reason it cannot meet that hazard (:data:`NOT_MET`): a new route joins a table and
meets every hazard at once. docs/bad-input.md holds :func:`doc_table`'s rendering of both
tables (``test_the_bad_input_page_shows_the_tables``).
"""

import functools
import os
import re
import shutil
import stat
import subprocess
from typing import Optional

import pytest
import torch

from checkpoint_common import craft
from conftest import (
    DECODE_EN_DE,
    LANGS,
    LIKE_TRAINED,
    PAIRS,
    PLUGIN,
    RESET,
    ROOT,
    cli,
    file_size_limit,
    run,
    spm_of,
    train_args,
)
from hltmt_plugin.compat.safe_loading import load_state

DOC = os.path.join(ROOT, "docs", "bad-input.md")


# ---- the hazards of loading: each makes (data folder, checkpoint, extra options) from the good ones
def other_dictionaries(data_bin, ckpt, tmp):
    """The data folder with two pieces swapped in every dictionary (its fingerprint made anew)."""
    from hltmt_plugin.data_fingerprint import write_fingerprint

    folder = tmp / "other" / "bin"
    shutil.copytree(data_bin, folder)
    (tmp / "other" / "spm").mkdir()
    shutil.copyfile(spm_of(data_bin), tmp / "other" / "spm" / "spm.model")  # where hltmt-prepare-data puts it
    for name in os.listdir(folder):
        if name.startswith("dict.") and name.endswith(".txt"):
            lines = (folder / name).read_text(encoding="utf-8").splitlines(keepends=True)
            lines[10], lines[11] = lines[11], lines[10]
            (folder / name).write_text("".join(lines), encoding="utf-8")
    write_fingerprint(str(folder))
    return str(folder), ckpt, []


def other_marking(data_bin, ckpt, tmp):
    return data_bin, ckpt, ["--decoder-langtok"]


def other_languages(data_bin, ckpt, tmp):
    return data_bin, ckpt, ["--langs", "en,fr,de,gu,hi"]


def edited_options(data_bin, ckpt, tmp):
    """The checkpoint with a stored model option changed after training (its record unchanged)."""
    state = load_state(ckpt)
    state["cfg"]["model"].encoder_ffn_embed_dim += 1
    path = tmp / "edited.pt"
    torch.save(state, path)
    return data_bin, str(path), []


def code_in_options(data_bin, ckpt, tmp):
    path, _, _ = craft(ckpt, tmp, "eval_str_list")
    return data_bin, path, []


def truncated(data_bin, ckpt, tmp):
    path = tmp / "truncated.pt"
    with open(ckpt, "rb") as f:
        path.write_bytes(f.read()[:5000])
    return data_bin, str(path), []


# hazard -> (what it is, how it is made, a phrase of the refusal)
LOAD_HAZARDS = {
    "other-dictionaries": (
        "a data folder whose dictionaries hold the same pieces in another order",
        other_dictionaries,
        "dictionaries: dict.de.txt",
    ),
    "other-marking": (
        "language-token options other than training's (--decoder-langtok added)",
        other_marking,
        (
            "--decoder-langtok: checkpoint off, given on",  # fairseq-validate writes the options given
            "--decoder-langtok: written off, now on",
        ),
    ),  # over the checkpoint's: they are 'edited'
    "other-languages": (
        "--langs in another order",
        other_languages,
        "languages: checkpoint en,de,fr,gu,hi, given en,fr,de,gu,hi",
    ),
    "edited-options": (
        "a stored shape option edited after training (--encoder-ffn-embed-dim)",
        edited_options,
        (
            "stored options were changed after it was written (--encoder-ffn-embed-dim: written 256, now 257)",
            # --finetune-from-model reads the architecture from the checkpoint: the edited option
            # contradicts the command line's before the record is compared
            "--encoder-ffn-embed-dim 256 (the checkpoint's: 257)",
        ),
    ),
    "code": ("a stored option that would run code", code_in_options, "refused to load checkpoint"),
    "truncated": ("a truncated checkpoint", truncated, "is truncated or not a checkpoint"),
}


# ---- the routes that load a checkpoint: each runs (data folder, checkpoint, extra options, tmp)
def fairseq_tool(tool, *more):
    def route(data, ckpt, extra, tmp):
        options = DECODE_EN_DE if tool != "fairseq-validate" else VALIDATE
        if "--langs" in extra:  # the one --langs given here
            options = [o for o in options if o not in ("--langs", LANGS)]
        return run(
            [cli(tool), data, *options, "--path", ckpt, *more, *extra],
            input="The file is open.\n" if tool == "fairseq-interactive" else None,
        )

    return route


VALIDATE = [
    "--user-dir",
    PLUGIN,
    "--task",
    "hltmt_translation",
    "--langs",
    LANGS,
    "--lang-pairs",
    PAIRS,
    "--encoder-langtok",
    "tgt",
    "--cpu",
]


def train_from(how):
    """fairseq-train starting from ``ckpt``: resumed from its --save-dir, --restore-file or
    --finetune-from-model."""

    def route(data, ckpt, extra, tmp):
        save = tmp / "save"
        save.mkdir(exist_ok=True)
        start = []
        if how == "resume":
            shutil.copyfile(ckpt, save / "checkpoint_last.pt")
        elif how == "restore":
            start = ["--restore-file", ckpt, *RESET]
        else:
            start = ["--finetune-from-model", ckpt]
        args = train_args(data, *LIKE_TRAINED, "--save-dir", str(save), "--max-update", "31", *start, *extra)
        if "--langs" in extra:  # the one --langs given here
            i = args.index("--langs")
            del args[i : i + 2]
        return run([cli("fairseq-train"), *args])

    return route


def translate_command(data, ckpt, extra, tmp):
    return run(
        [cli("hltmt-translate"), "--checkpoint", ckpt, "--data", data, "--src", "en", "--tgt", "de"],
        input="The file is open.\n",
    )


PY_API = (
    "import sys, hltmt_plugin.hub as hub; "
    "hub.HltmtTranslator.load(sys.argv[1], data=sys.argv[2], device='cpu').translate('The file is open.', "
    "'en', 'de')"
)
PY_FAIRSEQ_HUB = (
    "import sys, os; from hltmt_plugin.models.hltmt_transformer import HltmtTransformerModel as M; "
    "M.from_pretrained(os.path.dirname(sys.argv[1]), os.path.basename(sys.argv[1]), sys.argv[2])"
)


def python(code):
    # a plain program: the plugin changes nothing in it, so the program catches the plugin's one
    # error family itself (an uncaught one is Python's usual traceback)
    caught = (
        "import sys\nfrom hltmt_plugin.errors import HltmtError\ntry:\n    "
        + code.replace("; ", "\n    ")
        + "\nexcept HltmtError as error:\n    sys.exit(f'hltmt_plugin: error: {error}')"
    )

    def route(data, ckpt, extra, tmp):
        return run([cli("python"), "-c", caught, ckpt, data])

    return route


def average(data, ckpt, extra, tmp):
    return run(
        [cli("hltmt-average-checkpoints"), "--inputs", ckpt, ckpt + ".copy.pt", "--output", str(tmp / "averaged.pt")]
    )


def export(data, ckpt, extra, tmp):
    return run([cli("hltmt-export"), "--checkpoint", ckpt, "--data", data, "--out", str(tmp / "exported")])


LOAD_ROUTES = {
    "fairseq-generate": fairseq_tool("fairseq-generate", "--gen-subset", "test", "--max-len-b", "3"),
    "fairseq-interactive": fairseq_tool("fairseq-interactive", "--max-len-b", "3"),
    "fairseq-validate": fairseq_tool("fairseq-validate", "--valid-subset", "test", "--max-tokens", "1000"),
    "fairseq-train (resume)": train_from("resume"),
    "fairseq-train --restore-file": train_from("restore"),
    "fairseq-train --finetune-from-model": train_from("finetune"),
    "fairseq hub (from_pretrained)": python(PY_FAIRSEQ_HUB),
    "hltmt-translate": translate_command,
    "Python API (HltmtTranslator.load)": python(PY_API),
    "hltmt-average-checkpoints": average,
    "hltmt-export": export,
}

FROM_CHECKPOINT = "the model's languages and language-token options are read from the checkpoint itself"
NO_DATA = "reads no data folder: its checkpoints are compared with each other"
# (route, hazard) -> why the route cannot meet it
NOT_MET = {
    **{
        (r, h): FROM_CHECKPOINT
        for r in (
            "hltmt-translate",
            "Python API (HltmtTranslator.load)",
            "fairseq hub (from_pretrained)",
            "hltmt-export",
        )
        for h in ("other-marking", "other-languages")
    },
    **{("hltmt-average-checkpoints", h): NO_DATA for h in ("other-dictionaries", "other-marking", "other-languages")},
}
SLOW_ROUTES_NEED = {"hltmt-export": "ctranslate2"}


def load_cases():
    return [(r, h) for r in LOAD_ROUTES for h in LOAD_HAZARDS if (r, h) not in NOT_MET]


@pytest.mark.parametrize("route, hazard", load_cases(), ids=[f"{r}-{h}" for r, h in load_cases()])
def test_every_loading_route_refuses_every_hazard_in_one_line(data_bin, trained, tmp_path, route, hazard):
    if route in SLOW_ROUTES_NEED:
        pytest.importorskip(SLOW_ROUTES_NEED[route])
    _, make, phrase = LOAD_HAZARDS[hazard]
    data, ckpt, extra = make(data_bin, trained[0], tmp_path)
    if route == "hltmt-average-checkpoints":
        shutil.copyfile(trained[0], ckpt + ".copy.pt")
    before = set(os.listdir(tmp_path))
    done = LOAD_ROUTES[route](data, ckpt, extra, tmp_path)
    assert done.returncode != 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert any(p in done.stderr for p in ((phrase,) if isinstance(phrase, str) else phrase)), done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert not any(line.startswith(("H-", "D-")) for line in done.stdout.splitlines())
    left = set(os.listdir(tmp_path)) - before - {"save"}
    assert not left, left  # no output that looks done
    save = tmp_path / "save"
    if save.exists():  # a refused training run saved nothing
        assert not [n for n in os.listdir(save) if n.endswith(".pt") and n != "checkpoint_last.pt"]


def test_every_loading_route_meets_every_hazard_or_says_why():
    for route in LOAD_ROUTES:
        for hazard in LOAD_HAZARDS:
            assert (route, hazard) in load_cases() or NOT_MET.get((route, hazard)), (route, hazard)


# ---- the hazards of writing: each makes the destination and says what must hold afterwards
def fifo(tmp):
    path = tmp / "fifo"
    os.mkfifo(path)
    return str(path), lambda: stat.S_ISFIFO(os.stat(path).st_mode)


def device(tmp):
    path = tmp / "null-device"
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs root")
    return str(path), lambda: stat.S_ISCHR(os.stat(path).st_mode)


def stdout_path(tmp):
    return "/dev/stdout", lambda: True


WRITE_HAZARDS = {
    "fifo": ("a FIFO (a reader waiting on it)", fifo, "it is a FIFO"),
    "device": ("a device node", device, "it is a device"),
    "stdout": ("/dev/stdout (the shell's >> file behind it)", stdout_path, "it names a device or a stream"),
}


def installed_commands():
    """``{command: module}`` of every console script the installed package declares."""
    from importlib.metadata import entry_points

    found = {ep.name: ep.value.split(":")[0] for ep in entry_points(group="console_scripts")}
    return {name: module for name, module in sorted(found.items()) if module.startswith("hltmt_plugin.")}


def command_parser(module):
    import importlib

    return importlib.import_module(module).build_parser()


@functools.lru_cache(maxsize=None)
def path_options():
    """``(command, subcommand, option, kind)`` of every declared path option, from the parsers."""
    from hltmt_plugin import paths

    found = []
    for command, module in installed_commands().items():
        for sub, action in paths.declared(command_parser(module)):
            if paths.path_kind(action):
                found.append((command, sub, paths.option_name(action), paths.path_kind(action)))
    return tuple(found)


# the other arguments of each command that writes a file ({ckpt}: a trained checkpoint, which also stands
# for any file the command reads); the routes themselves are found from the parsers (write_routes)
WRITE_ARGS = {
    ("hltmt-translate", ""): ["--checkpoint", "{ckpt}", "--src", "en", "--tgt", "de"],
    ("hltmt-average-checkpoints", ""): ["--inputs", "{ckpt}"],
    ("hltmt-adapters", "export"): ["--path", "{ckpt}", "--lang", "de"],
    ("hltmt-adapters", "import"): ["--path", "{ckpt}", "--adapters", "{ckpt}"],
    ("hltmt-adapters", "add-language"): ["--path", "{ckpt}", "--lang", "gu"],
    ("hltmt-train-language-adapter", ""): ["--path", "{ckpt}", "--lang", "de", "--text", "{ckpt}", "--spm", "{ckpt}"],
}


def write_routes(options=None):
    """``{"command [subcommand] option": (command, subcommand, option)}`` of every declared option
    that names a file to write, found from every installed command's parser (``options``: the
    declared path options, :func:`path_options` by default): a new one joins the table by itself."""
    from hltmt_plugin import paths

    found = [
        o for o in (path_options() if options is None else options) if o[3] in (paths.WRITE_FILE, paths.WRITE_STREAM)
    ]
    return {" ".join(filter(None, (c, s, o))): (c, s, o) for c, s, o, _ in found}


WRITE_ROUTES = write_routes()


def write_to(route, out, ckpt):
    """The command of ``route`` run with its other arguments and ``out`` as its output."""
    command, sub, option = WRITE_ROUTES[route]
    argv = [*([sub] if sub else []), *(a.format(ckpt=ckpt) for a in WRITE_ARGS[(command, sub)]), option, out]
    return run([cli(command), *argv], input="The file is open.\n")


def test_every_writing_route_has_its_arguments():
    assert sorted(routes_without_arguments(WRITE_ROUTES)) == [] and len(WRITE_ROUTES) >= 5
    assert sorted(set(WRITE_ARGS) - {(c, s) for c, s, _ in WRITE_ROUTES.values()}) == []  # none stale


def routes_without_arguments(routes):
    return [route for route, (command, sub, _) in routes.items() if (command, sub) not in WRITE_ARGS]


def test_a_planted_command_that_writes_a_file_is_found():
    planted = [
        *path_options(),
        ("hltmt-new", "", "--destination", "write-file"),
        ("hltmt-new", "", "--in", "read-file"),
    ]
    routes = write_routes(planted)
    assert routes["hltmt-new --destination"] == ("hltmt-new", "", "--destination") and "hltmt-new --in" not in routes
    assert routes_without_arguments(routes) == ["hltmt-new --destination"]


def write_cases():
    return [(r, h) for r in WRITE_ROUTES for h in WRITE_HAZARDS]


@pytest.mark.parametrize("route, hazard", write_cases(), ids=[f"{r}-{h}" for r, h in write_cases()])
def test_every_writing_route_refuses_a_destination_that_is_not_a_file(data_bin, trained, tmp_path, route, hazard):
    _, make, phrase = WRITE_HAZARDS[hazard]
    out, still = make(tmp_path)
    before = set(os.listdir(tmp_path))
    done = write_to(route, out, trained[0])
    assert done.returncode != 0 and phrase in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert still() and set(os.listdir(tmp_path)) == before


def test_a_replaced_output_keeps_its_mode_and_owner_and_a_size_limit_is_one_line(trained, tmp_path):
    out = tmp_path / "averaged.pt"
    out.write_bytes(b"old")
    os.chmod(out, 0o640)
    try:
        os.chown(out, 65534, 65534)
        owner = (65534, 65534)
    except PermissionError:
        owner = (os.getuid(), os.getgid())
    done = write_to("hltmt-average-checkpoints --output", str(out), trained[0])
    assert done.returncode == 0, done.stderr[-2000:]
    st = os.stat(out)
    assert stat.S_IMODE(st.st_mode) == 0o640 and (st.st_uid, st.st_gid) == owner
    kept = out.read_bytes()
    limited = subprocess.run(
        [cli("hltmt-average-checkpoints"), "--inputs", trained[0], "--output", str(out)],
        capture_output=True,
        text=True,
        preexec_fn=file_size_limit(100_000),
    )
    assert limited.returncode != 0 and "error:" in limited.stderr and "Traceback" not in limited.stderr, limited.stderr[
        -2000:
    ]
    assert out.read_bytes() == kept and sorted(os.listdir(tmp_path)) == ["averaged.pt"]


# ---- the generated table: every declared path option of every installed command, by itself
# what an undeclared path option looks like, read from its action (its name is one sign of four):
# a name, a metavar, a help text or a type that says the value names a file or folder
PATH_NAMES = re.compile(
    r"(path|file|dir|folder|out|input|data|spm|checkpoint|model|raw|dict|jobs|text|results|matrix|adapters|log|json|"
    r"work|save|bundle|manifest|pretrained|dest|archive)",
)
PATH_METAVARS = re.compile(r"(FILE|DIR|PATH|FOLDER|OUT|CKPT|CHECKPOINT|MODEL|SPM|JSON|LOG|TSV|TXT)")
# the metavars that say an option's value is not a path, whatever its name or help mention
NOT_PATH_METAVARS = {"LANG", "LANGS", "NAME", "TEXT", "URL"}
PATH_HELP = re.compile(
    r"\b(files?|folders?|director(y|ies)|paths?|checkpoints?|written|writes?|saved?|read from|[\w-]+\.(pt|txt|json|tsv|log))\b",
    re.I,
)


def _path_type(kind) -> bool:
    """A type that makes a path of the value (os.path.abspath, pathlib.Path, argparse.FileType)."""
    import argparse
    import pathlib

    return (
        isinstance(kind, argparse.FileType)
        or (isinstance(kind, type) and issubclass(kind, pathlib.PurePath))
        or getattr(kind, "__module__", "") in ("posixpath", "ntpath", "os.path")
    )


def path_signs(name: str, metavar, help_text, kind) -> list:
    """Which of the four signs say that an option's value names a file or folder."""
    metavars = metavar if isinstance(metavar, tuple) else (metavar,)
    signs = [
        ("name", bool(PATH_NAMES.search(name))),
        ("metavar", any(isinstance(m, str) and PATH_METAVARS.search(m) for m in metavars)),
        ("help", bool(isinstance(help_text, str) and PATH_HELP.search(help_text.replace("%(default)s", "")))),
        ("type", _path_type(kind)),
    ]
    return [sign for sign, seen in signs if seen]


def numeric_type(kind) -> bool:
    """A type that makes a number of the value (int, float, the commands' bounded counts and sizes)."""
    if kind in (int, float):
        return True
    try:
        value = kind("1") if callable(kind) else None
    except Exception:  # (a type that refuses "1" is not a count)
        return False
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def looks_like_a_path(action) -> bool:
    """Whether an argparse action takes a value that names a file or folder (by its action: its
    name, metavar, help and type), so that it must be declared with paths.path_option."""
    import argparse

    if isinstance(action, (argparse._StoreConstAction, argparse._HelpAction, argparse._VersionAction)):
        return False
    if action.choices is not None or numeric_type(action.type) or action.nargs == 0:
        return False
    if action.metavar in NOT_PATH_METAVARS:  # what --help shows the value to be: a name, not a path
        return False
    name = " ".join(action.option_strings) or action.dest
    return bool(path_signs(name, action.metavar, action.help, action.type))


def plugin_fairseq_fields():
    """``(group, field)`` of every dataclass option the plugin adds to fairseq's commands: every
    FairseqDataclass the plugin defines, found once the plugin is registered."""
    import dataclasses

    from fairseq.dataclass import FairseqDataclass

    import hltmt_plugin

    hltmt_plugin.register()
    found, todo = [], [FairseqDataclass]
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.startswith("hltmt_plugin."):
            found.append(cls)
    groups = sorted(set(found), key=lambda g: (g.__module__, g.__name__))
    return [(g.__name__, f) for g in groups for f in dataclasses.fields(g)]


def test_every_installed_command_builds_its_parser_and_declares_every_path_option():
    from hltmt_plugin import paths

    commands = installed_commands()
    assert "hltmt-translate" in commands and "hltmt-export" in commands, commands
    undeclared = []
    for command, module in commands.items():
        parser = command_parser(module)
        assert isinstance(parser, paths.ArgumentParser), f"{command}: build a paths.ArgumentParser"
        undeclared += [
            f"{command} {sub} {paths.option_name(a)}".replace("  ", " ")
            for sub, a in paths.declared(parser)
            if not paths.path_kind(a) and looks_like_a_path(a)
        ]
    undeclared += undeclared_fields(plugin_fairseq_fields())
    assert not undeclared, f"path options not declared (hltmt_plugin/paths.py): {undeclared}"


def undeclared_fields(fields):
    """``group.field`` of each of ``fields`` (``(group, field)``) that takes a path (by its name or
    help) without declaring it (``metadata={"path": KIND}``)."""
    from hltmt_plugin import paths

    return [
        f"{group}.{field.name}"
        for group, field in fields
        if paths.field_kind(field) is None
        and field.type in (str, Optional[str])
        and path_signs(field.name, None, field.metadata.get("help"), None)
        and not field.name.endswith(("_langs", "_layers", "_type", "_dim", "_only"))
    ]


def test_a_planted_option_group_of_the_plugin_is_found_and_its_path_field_checked():
    """A new FairseqDataclass of the plugin joins the check by itself: found among fairseq's
    dataclasses, its undeclared path field named."""
    import gc
    from dataclasses import dataclass, field

    from fairseq.dataclass import FairseqDataclass

    @dataclass
    class PlantedConfig(FairseqDataclass):
        planted_output: Optional[str] = field(default=None, metadata={"help": "where the planted file is written"})
        planted_count: int = field(default=1, metadata={"help": "how many"})

    PlantedConfig.__module__ = "hltmt_plugin.planted"
    try:
        fields = [f for f in plugin_fairseq_fields() if f[0] == "PlantedConfig"]
        assert {"planted_output", "planted_count"} <= {f.name for _, f in fields}
        assert undeclared_fields(fields) == ["PlantedConfig.planted_output"]
    finally:
        del PlantedConfig, fields
        gc.collect()  # fairseq's dataclasses are found through __subclasses__: the planted one goes


def test_an_option_that_names_a_file_is_found_undeclared_by_the_check():
    import argparse

    p = argparse.ArgumentParser()
    for flags in (["--out"], ["--spm-model"], ["--data"], ["-o", "--output"]):
        assert looks_like_a_path(p.add_argument(*flags))
    for flags, kw in ((["--langs"], {}), (["--beam"], {"type": int}), (["--json"], {"action": "store_true"})):
        assert not looks_like_a_path(p.add_argument(*flags, **kw))


@pytest.mark.parametrize(
    "kw",
    [
        {"metavar": "FILE"},
        {"help": "where the translations go (a file)"},
        {"help": "the averaged model is written here"},
        {"type": os.path.abspath},
        {},  # its name
    ],
)
def test_an_option_named_otherwise_that_takes_a_file_is_found_by_its_action(kw):
    """``--destination`` taking a file, shown by its metavar, its help, its type or its name."""
    import argparse

    from hltmt_plugin import paths

    parser = paths.ArgumentParser(prog="planted")
    parser.add_argument("--src", help="source language")
    parser.add_argument("--to" if kw else "--destination", **kw)
    undeclared = [
        paths.option_name(a) for _, a in paths.declared(parser) if not paths.path_kind(a) and looks_like_a_path(a)
    ]
    assert undeclared == ["--to" if kw else "--destination"], kw
    assert not looks_like_a_path(argparse.ArgumentParser().add_argument("--to", help="target language"))
    # a value shown as a name is not a path, whatever its help mentions
    assert not looks_like_a_path(argparse.ArgumentParser().add_argument("--name", metavar="NAME", help="file name"))


def _special(kind_of, tmp):
    """A path of ``kind_of`` (fifo, socket, device, link-to-fifo) under ``tmp``."""
    import socket

    if kind_of == "device":
        return "/dev/null"
    path = str(tmp / kind_of)
    if kind_of in ("fifo", "link-to-fifo"):
        os.mkfifo(str(tmp / "fifo")) if not os.path.exists(tmp / "fifo") else None
        if kind_of == "link-to-fifo":
            os.symlink(tmp / "fifo", path)
        return str(tmp / "fifo") if kind_of == "fifo" else path
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.close()
    return path


# hazard -> (what it is, the kinds it meets, what the one line says)
PATH_HAZARDS = {
    "fifo": ("a FIFO (opening it would hang)", "all but read-stream", "it is a FIFO"),
    "link-to-fifo": ("a symbolic link to a FIFO", "all but read-stream", "it is a FIFO"),
    "socket": ("a socket", "all", "it is a socket"),
    "device": ("a device node (/dev/null)", "all", "it is a device"),
    "wrong-type": ("a folder where a file is named, a file where a folder is", "all but read-path", "it is a "),
    "missing": ("an input that does not exist (also in a dry run)", "reads", "no such "),
    "an-input": (
        "an input of the same command line (the output is it, holds it or lies inside it)",
        "writes",
        "an input of this command",
    ),
}


def meets(hazard, kind) -> bool:
    from hltmt_plugin import paths

    if kind == paths.READ_PATTERN:
        return False
    where = PATH_HAZARDS[hazard][1]
    if where == "writes":
        return kind in paths.WRITES
    if where == "reads":
        return kind in paths.READS
    if where == "all but read-stream":
        return kind != paths.READ_STREAM
    if where == "all but read-path":
        return kind != paths.READ_PATH
    return True


def filled(parser, sub, tmp, skip):
    """Values for the required options of ``parser`` (subcommand ``sub``) other than ``skip``."""
    from hltmt_plugin import paths

    argv = [sub] if sub else []
    for s, action in paths.declared(parser):
        if s != sub or not action.required or not action.option_strings or paths.option_name(action) in skip:
            continue
        if paths.path_kind(action):
            value = str(tmp / f"given{len(argv)}")
            if paths.path_kind(action) == paths.READ_FOLDER:
                os.makedirs(value, exist_ok=True)
            elif paths.path_kind(action) in paths.READS:
                open(value, "a").close()  # an input that exists
        else:
            value = str(action.choices[0]) if action.choices else "1" if action.type in (int, float) else "de"
        argv += [paths.option_name(action), value]
    return argv


def in_place_of(command, sub, option):
    """The inputs that the output ``option`` may update in place (declared with it)."""
    from hltmt_plugin import paths

    parser = command_parser(installed_commands()[command])
    return next(
        getattr(a, "in_place", ()) for s, a in paths.declared(parser) if (s, paths.option_name(a)) == (sub, option)
    )


def path_cases():
    from hltmt_plugin import paths

    cases = []
    for command, sub, option, kind in path_options():
        for hazard in PATH_HAZARDS:
            if hazard == "an-input" and kind in paths.WRITES:
                cases += [
                    (command, sub, option, kind, hazard, other)
                    for c, s, other, k in path_options()
                    if (c, s) == (command, sub)
                    and k in paths.READS
                    and k not in (paths.READ_STREAM, paths.READ_PATTERN)
                    # a working folder that is an input file is refused as a file (wrong-type)
                    and not (kind == paths.WORK_FOLDER and k != paths.READ_FOLDER)
                    and other not in in_place_of(command, sub, option)
                ]
            elif hazard != "an-input" and meets(hazard, kind):
                cases.append((command, sub, option, kind, hazard, None))
    return cases


def hazard_value(kind, hazard, tmp, other_kind=None):
    """(the option's value, the input's value) making ``hazard`` for an option of ``kind``."""
    from hltmt_plugin import paths

    if hazard == "wrong-type":
        if "folder" in kind:
            (tmp / "a-file").write_text("x")
            return str(tmp / "a-file"), None
        return str(tmp), None
    if hazard == "missing":
        return str(tmp / "nowhere"), None
    if hazard == "an-input":
        folder = tmp / "in"
        folder.mkdir(exist_ok=True)
        (folder / "input.pt").touch()
        if other_kind == paths.READ_FOLDER:
            return str(folder / "out"), str(folder)  # lies inside
        if kind == paths.WRITE_FOLDER:
            return str(folder), str(folder / "input.pt")  # holds
        return str(folder / "input.pt"), str(folder / "input.pt")  # is
    return _special(hazard, tmp), None


@pytest.mark.parametrize(
    "command, sub, option, kind, hazard, other", path_cases(), ids=["-".join(filter(None, c)) for c in path_cases()]
)
def test_every_declared_path_option_refuses_every_hazard_of_its_kind_at_parsing(
    tmp_path, capsys, command, sub, option, kind, hazard, other
):
    from hltmt_plugin import paths

    parser = command_parser(installed_commands()[command])
    other_kind = next((k for c, s, o, k in path_options() if (c, s, o) == (command, sub, other)), None)
    value, source = hazard_value(kind, hazard, tmp_path, other_kind)
    argv = filled(parser, sub, tmp_path, {option, other}) + [option, value] + ([other, source] if other else [])
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and PATH_HAZARDS[hazard][2] in err and len(err.strip().splitlines()) == 1, (argv, err)
    assert paths.path_kind is not None


@pytest.mark.parametrize("command", sorted(installed_commands()))
def test_every_installed_command_parses_through_its_declared_parser(tmp_path, command):
    """The real command (a subprocess) refuses a FIFO on its first declared path option, in one line,
    at once: its main parses with the parser the table is generated from."""
    sub, option, kind = next((s, o, k) for c, s, o, k in path_options() if c == command and k != "read-stream")
    fifo = _special("fifo", tmp_path)
    argv = [*([sub] if sub else []), option, fifo]
    if command == "hltmt-launch":
        argv.append("--")
    done = subprocess.run([cli(command), *argv], capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert done.returncode == 2 and "it is a FIFO" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr[-2000:]
    assert sorted(os.listdir(tmp_path)) == ["fifo"]


# what meets the hazards a parser cannot see, for each kind
AT_RUN = {
    "read-file": "the command: unreadable, one line; checkpoints read weights-only (compat/safe_loading)",
    "read-folder": "the command: unreadable, one line",
    "read-path": "the command: unreadable, one line",
    "read-stream": "a pipe is read; undecodable or binary lines refused in one line",
    "read-pattern": "each file the pattern matches is read by the command, one line when it cannot be",
    "write-file": "atomic_files.AtomicFile: file-size limit, read-only folder, full disk, SIGTERM: the old file kept",
    "write-stream": "atomic_files.AtomicFile (a file), or standard output (errors.py: one line)",
    "write-folder": (
        "atomic_files.write_folder: replaces only what the same command wrote (--force), a lock, "
        "SIGTERM and a SIGKILL's leftovers, the inputs a checkpoint names"
    ),
    "work-folder": "written file by file through atomic_files; a rerun resumes",
}


def generated_table() -> str:
    """The table of every declared path option and the hazards it meets (docs/bad-input.md)."""
    lines = ["| command | option | kind | " + " | ".join(PATH_HAZARDS) + " | at run time |"]
    lines.append("|---|---|---|" + "---|" * len(PATH_HAZARDS) + "---|")
    cases = path_cases()
    for command, sub, option, kind in path_options():
        cells = []
        for hazard in PATH_HAZARDS:
            hit = [c for c in cases if c[:5] == (command, sub, option, kind, hazard)]
            cells.append("refused" if hit else "read (a pipe)" if kind == "read-stream" and "fifo" in hazard else "n/a")
        lines.append(
            f"| {' '.join(filter(None, (command, sub)))} | `{option}` | {kind} | "
            + " | ".join(cells)
            + f" | {AT_RUN[kind]} |"
        )
    lines += ["", "| hazard | what it is | the one line says |", "|---|---|---|"]
    lines += [f"| {h} | {what} | `{phrase}` |" for h, (what, _, phrase) in PATH_HAZARDS.items()]
    return "\n".join(lines) + "\n"


# ---- docs/bad-input.md shows both tables
def doc_table() -> str:
    """The two tables as docs/bad-input.md shows them."""
    lines = ["| route | " + " | ".join(LOAD_HAZARDS) + " |", "|---|" + "---|" * len(LOAD_HAZARDS)]
    for route in LOAD_ROUTES:
        cells = ["refused" if (route, h) not in NOT_MET else f"n/a ({NOT_MET[(route, h)]})" for h in LOAD_HAZARDS]
        lines.append(f"| {route} | " + " | ".join(cells) + " |")
    lines += ["", "| hazard | what it is | the one line says |", "|---|---|---|"]
    lines += [
        f"| {h} | {what} | " + " or ".join(f"`{p}`" for p in ((phrase,) if isinstance(phrase, str) else phrase)) + " |"
        for h, (what, _, phrase) in LOAD_HAZARDS.items()
    ]
    lines += ["", "| route | " + " | ".join(WRITE_HAZARDS) + " |", "|---|" + "---|" * len(WRITE_HAZARDS)]
    lines += [f"| {route} | " + " | ".join("refused" for _ in WRITE_HAZARDS) + " |" for route in WRITE_ROUTES]
    lines += ["", "| hazard | what it is | the one line says |", "|---|---|---|"]
    lines += [f"| {h} | {what} | `{phrase}` |" for h, (what, _, phrase) in WRITE_HAZARDS.items()]
    return "\n".join(lines) + "\n"


def test_the_bad_input_page_shows_the_tables():
    text = open(DOC, encoding="utf-8").read()
    for table in (doc_table(), generated_table()):
        assert table in text, "docs/bad-input.md: paste the output of `python tests/test_hazards.py`"


if __name__ == "__main__":
    print(doc_table() + "\n" + generated_table(), end="")
