"""Tests mirror the code (docs/architecture.md, "How the code is kept"): every module of the
package, ``hltmt_plugin/<path>/<module>.py`` (``__init__.py`` aside), has its unit tests in
``tests/<path>/test_<module>.py``, and every Python file of ``scripts/`` its tests in
``tests/scripts/test_<name>.py``; and test files of one name in several folders (mirrored
modules share names: config.py, layers.py, ...) can run in one pytest session."""

import os

import pytest

from conftest import PLUGIN, ROOT

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

SCRIPTS = os.path.join(ROOT, "scripts")

# Modules without a mirrored test file, each with the reason (none today: a new module brings its
# test file, or a line here saying why it cannot have one).
EXCEPTIONS = {}
# The same for the Python files of scripts/ (its shell scripts answer --help in tests/test_help.py).
SCRIPT_EXCEPTIONS = {}


def mirrored_test(module, tests="tests"):
    """The test file of ``module`` (a path relative to the package, ``/``-separated) under ``tests``."""
    folder, name = os.path.split(module)
    return "/".join(part for part in (tests, folder, f"test_{name}") if part)


def modules_of(package):
    """Every module of ``package`` but its ``__init__.py`` files, relative to it, sorted."""
    found = []
    for folder, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__")))
        for name in files:
            if name.endswith(".py") and name != "__init__.py":
                found.append(os.path.relpath(os.path.join(folder, name), package).replace(os.sep, "/"))
    return sorted(found)


def missing_tests(package, root, exceptions, tests="tests"):
    """``module -> test file`` for each module of ``package`` whose test file (in the folder
    ``tests`` of ``root``) is not there and which ``exceptions`` does not excuse."""
    return [
        f"{module} -> {mirrored_test(module, tests)}"
        for module in modules_of(package)
        if module not in exceptions and not os.path.isfile(os.path.join(root, mirrored_test(module, tests)))
    ]


def test_every_module_has_its_mirrored_test_file():
    assert missing_tests(PLUGIN, ROOT, EXCEPTIONS) == []


def test_every_script_has_its_mirrored_test_file():
    assert missing_tests(SCRIPTS, ROOT, SCRIPT_EXCEPTIONS, tests="tests/scripts") == []


def test_every_exception_is_a_module_of_the_package_with_a_reason():
    for package, exceptions in ((PLUGIN, EXCEPTIONS), (SCRIPTS, SCRIPT_EXCEPTIONS)):
        modules = modules_of(package)
        assert all(module in modules and reason.strip() for module, reason in exceptions.items()), exceptions


def test_the_check_names_a_module_without_a_test_file(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    for name in ("__init__.py", "top.py", "sub/__init__.py", "sub/inner.py"):
        (package / name).write_text("")
    (tmp_path / "tests" / "sub").mkdir(parents=True)
    (tmp_path / "tests" / "test_top.py").write_text("")
    (tmp_path / "tests" / "test_inner.py").write_text("")  # not mirrored: inner.py is in sub/
    assert missing_tests(str(package), str(tmp_path), {}) == ["sub/inner.py -> tests/sub/test_inner.py"]
    assert missing_tests(str(package), str(tmp_path), {"sub/inner.py": "a reason"}) == []
    (tmp_path / "tests" / "sub" / "test_inner.py").write_text("")
    assert missing_tests(str(package), str(tmp_path), {}) == []
    assert missing_tests(str(package), str(tmp_path), {}, tests="tests/scripts") == [
        "sub/inner.py -> tests/scripts/sub/test_inner.py",
        "top.py -> tests/scripts/test_top.py",
    ]


def same_named_outside_packages(tests):
    """Test-file names that more than one folder outside a package holds under ``tests``: pytest
    imports such a file by its name alone, so one session cannot import two of them (a folder
    with an ``__init__.py`` imports its files under its own name)."""
    plain = {}
    for folder, dirs, files in os.walk(tests):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        if os.path.isfile(os.path.join(folder, "__init__.py")):
            continue
        for name in files:
            if name.startswith("test_") and name.endswith(".py"):
                plain.setdefault(name, []).append(os.path.relpath(os.path.join(folder, name), tests))
    return {name: sorted(paths) for name, paths in plain.items() if len(paths) > 1}


def test_test_files_of_the_same_name_can_run_in_one_session():
    assert same_named_outside_packages(os.path.join(ROOT, "tests")) == {}


def test_the_name_check_names_two_plain_files_of_one_name(tmp_path):
    for folder in ("a", "b", "c"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "test_config.py").write_text("")
    (tmp_path / "c" / "__init__.py").write_text("")
    assert same_named_outside_packages(str(tmp_path)) == {"test_config.py": ["a/test_config.py", "b/test_config.py"]}
    (tmp_path / "b" / "__init__.py").write_text("")
    assert same_named_outside_packages(str(tmp_path)) == {}
