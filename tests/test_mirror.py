"""Tests mirror the code (docs/architecture.md, "How the code is kept"): every module of the
package, ``hltmt_plugin/<path>/<module>.py`` (``__init__.py`` aside), has its unit tests in
``tests/<path>/test_<module>.py``, and every Python file of ``scripts/`` its tests in
``tests/scripts/test_<name>.py``; and test files of one name in several folders (mirrored
modules share names: config.py, layers.py, ...) can run in one pytest session. A test file
covers its module by its checks, not by being there: at least one check (an ``assert``
statement, a ``pytest.raises`` or an ``assert_*`` call) per :data:`LINES_PER_CHECK` non-blank
lines of the module."""

import ast
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

LINES_PER_CHECK = 40  # a module of N non-blank lines needs N // 40 checks in its test file
# Modules whose test file holds fewer checks than their size asks, each with the reason.
FEW_CHECKS = {
    "experiments/study_report.py": "its report.md is read back whole from real hltmt-study runs "
    "(tests/experiments/test_study.py: test_significance_and_report, --report-only)",
}
SCRIPT_FEW_CHECKS = {}


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


def checks_in(path):
    """The checks of a test file: ``assert`` statements, ``pytest.raises`` and ``assert_*`` calls
    (``torch.testing.assert_close``, the suite's own ``assert_clear`` ...)."""
    with open(path) as f:
        tree = ast.parse(f.read())
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            count += name == "raises" or name.startswith("assert_")
        count += isinstance(node, ast.Assert)
    return count


def too_few_checks(package, root, exceptions, tests="tests"):
    """``module: checks / needed`` for each module of ``package`` whose mirrored test file holds
    fewer checks than one per :data:`LINES_PER_CHECK` non-blank lines of the module."""
    short = []
    for module in modules_of(package):
        test = os.path.join(root, mirrored_test(module, tests))
        if module in exceptions or not os.path.isfile(test):
            continue
        with open(os.path.join(package, module)) as f:
            needed = sum(1 for line in f if line.strip()) // LINES_PER_CHECK
        if checks_in(test) < needed:
            short.append(f"{module}: {checks_in(test)} checks in {mirrored_test(module, tests)}, {needed} needed")
    return short


def test_every_test_file_checks_its_module_in_proportion_to_its_size():
    assert too_few_checks(PLUGIN, ROOT, FEW_CHECKS) == []
    assert too_few_checks(SCRIPTS, ROOT, SCRIPT_FEW_CHECKS, tests="tests/scripts") == []


def test_the_check_count_names_a_large_module_with_a_small_test(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "big.py").write_text("x = 1\n\n" * 120)  # 120 non-blank lines: 3 checks needed
    (tmp_path / "tests").mkdir()
    test = tmp_path / "tests" / "test_big.py"
    test.write_text("def test_a():\n    assert True\n    torch.testing.assert_close(1, 1)\n")
    assert too_few_checks(str(package), str(tmp_path), {}) == ["big.py: 2 checks in tests/test_big.py, 3 needed"]
    assert too_few_checks(str(package), str(tmp_path), {"big.py": "a reason"}) == []
    test.write_text(test.read_text() + "    with pytest.raises(ValueError):\n        int('x')\n")
    assert checks_in(str(test)) == 3 and too_few_checks(str(package), str(tmp_path), {}) == []


def test_every_exception_is_a_module_of_the_package_with_a_reason():
    for package, exceptions in ((PLUGIN, EXCEPTIONS), (SCRIPTS, SCRIPT_EXCEPTIONS)):
        modules = modules_of(package)
        assert all(module in modules and reason.strip() for module, reason in exceptions.items()), exceptions
    for package, few in ((PLUGIN, FEW_CHECKS), (SCRIPTS, SCRIPT_FEW_CHECKS)):
        modules = modules_of(package)
        assert all(module in modules and reason.strip() for module, reason in few.items()), few


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
