"""The test tiers of tests/conftest.py: FAST names only files and tests that exist, and a test
is marked slow exactly when FAST leaves it out (so `make test` and the rest of `make test-full`
share no test and miss none)."""

import os

import pytest

from conftest import ALL, FAST, unknown_fast_entries


def test_the_fast_list_names_only_tests_that_exist():
    assert unknown_fast_entries() == []


def test_this_file_is_fast_and_every_listed_file_is_a_test_file():
    assert FAST["test_tiers.py"] == ALL
    assert all(os.path.basename(name).startswith("test_") and name.endswith(".py") for name in FAST)


@pytest.fixture()
def marked_slow(request):
    return request.node.get_closest_marker("slow") is not None


def test_a_listed_test_is_not_marked_slow(marked_slow):
    assert not marked_slow
