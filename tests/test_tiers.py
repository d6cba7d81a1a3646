"""The test tiers (tests/tiers.py), run on planted test files in a pytest of their own: a test
is fast exactly when its module or its function is marked fast, every other test (a new file
too) is slow, and a test marked both is refused; so `make test` and the rest of
`make test-full` share no test and miss none."""

import os
import subprocess
import sys

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

PLANTED = {
    "test_marked_module.py": "import pytest\n\npytestmark = pytest.mark.fast\n\n\ndef test_a():\n    pass\n",
    "test_marked_function.py": (
        "import pytest\n\n\n@pytest.mark.fast\n@pytest.mark.parametrize('x', [1, 2])\ndef test_b(x):\n    pass\n\n\n"
        "def test_c():\n    pass\n"
    ),
    "test_new_file.py": "def test_d():\n    pass\n",
}


def collect(folder, tier):
    """The node ids pytest selects with ``-m tier`` in ``folder``, the tiers' hooks loaded as a
    plugin (the return code and the output, when it fails)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tiers", "-p", "no:cacheprovider", "--strict-markers"]
        + ["-o", "markers=slow: the full suite", "--collect-only", "-q", "-m", tier, str(folder)],
        capture_output=True,
        text=True,
        cwd=folder,
        env={**os.environ, "PYTHONPATH": TESTS},
    )
    ids = sorted(line.split("::", 1)[1] for line in done.stdout.splitlines() if "::" in line)
    return done.returncode, ids, done.stdout + done.stderr


def plant(folder, files):
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    (folder / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")


def test_a_test_is_fast_exactly_when_its_module_or_function_says_so(tmp_path):
    plant(tmp_path, PLANTED)
    code, fast, out = collect(tmp_path, "not slow")
    assert code == 0 and fast == ["test_a", "test_b[1]", "test_b[2]"], out
    code, slow, out = collect(tmp_path, "slow")
    assert code == 0 and slow == ["test_c", "test_d"], out


def test_a_test_marked_both_fast_and_slow_is_refused(tmp_path):
    plant(
        tmp_path, {"test_both.py": "import pytest\n\n\n@pytest.mark.fast\n@pytest.mark.slow\ndef test_e():\n    pass\n"}
    )
    code, _, out = collect(tmp_path, "not slow")
    assert code != 0 and "test_both.py::test_e is marked both fast and slow" in out, out


@pytest.fixture()
def marked_slow(request):
    return request.node.get_closest_marker("slow") is not None


def test_this_file_is_fast_and_so_not_marked_slow(marked_slow):
    assert not marked_slow
