"""The test tiers, by discovery: `make test` runs the fast tier (pytest -m "not slow"): unit tests,
the golden test and one end-to-end path of each command; `make test-full` runs the fast tier,
then every other test (pytest -m slow).

A test is fast when it says so where it is written: ``pytestmark = pytest.mark.fast`` in its
module (every test of the file) or ``@pytest.mark.fast`` on its function. Every other test is
marked slow at collection, so that each test is in exactly one tier and a new test file runs in
the full suite until it marks itself fast; a test marked both is refused. tests/conftest.py
installs these hooks; tests/test_tiers.py runs them on planted test files."""

import pytest

FAST = "fast: a test of the fast tier (make test); every test not marked fast is marked slow (tests/tiers.py)"


def pytest_configure(config):
    config.addinivalue_line("markers", FAST)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("fast") is None:
            item.add_marker(pytest.mark.slow)
        elif item.get_closest_marker("slow") is not None:
            raise pytest.UsageError(f"{item.nodeid} is marked both fast and slow: a test is in one tier")
