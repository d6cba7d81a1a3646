"""scripts/gpu_bundle.py without the network: a wheel's RECORD lines (sha256 and size), the
check that a wheel holds exactly what its RECORD lists, and ``--check`` listing a bundle.
(Slimming the fairseq wheel: tests/scripts/test_gpu_run.py.)"""

import base64
import csv
import hashlib
import io
import os
import sys
import zipfile

import pytest

from conftest import ROOT, run

sys.path.insert(0, os.path.join(ROOT, "scripts"))

import gpu_bundle  # noqa: E402

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

FILES = {"tool/__init__.py": b"VERSION = 1\n", "tool-1.0.dist-info/METADATA": b"Name: tool\nVersion: 1.0\n"}
RECORD = "tool-1.0.dist-info/RECORD"


def wheel(path, files=FILES, rows=None):
    """A wheel of ``files`` whose RECORD lists ``rows`` (default: each file's own hash and size)."""
    if rows is None:
        rows = [
            [
                name,
                "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode(),
                str(len(data)),
            ]
            for name, data in files.items()
        ]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([*rows, [RECORD, "", ""]])
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(RECORD, buf.getvalue())
    return str(path)


def test_a_record_line_is_the_files_urlsafe_sha256_and_size():
    data = FILES["tool/__init__.py"]
    name, digest, size = gpu_bundle.record_line("tool/__init__.py", data)
    assert (name, size) == ("tool/__init__.py", str(len(data)))
    assert base64.urlsafe_b64decode(digest[len("sha256=") :] + "=") == hashlib.sha256(data).digest()


def test_a_wheel_must_hold_exactly_what_its_record_lists(tmp_path):
    gpu_bundle.verify_wheel(wheel(tmp_path / "ok.whl"))
    changed = {**FILES, "tool/__init__.py": b"VERSION = 2\n"}
    good_rows = [gpu_bundle.record_line(name, data) for name, data in FILES.items()]
    with pytest.raises(gpu_bundle.BundleError, match="RECORD does not match tool/__init__.py"):
        gpu_bundle.verify_wheel(wheel(tmp_path / "changed.whl", changed, good_rows))
    with pytest.raises(gpu_bundle.BundleError, match="RECORD lists missing files, e.g. tool/gone.py"):
        gpu_bundle.verify_wheel(wheel(tmp_path / "extra.whl", rows=[*good_rows, ["tool/gone.py", "sha256=x", "1"]]))


def test_check_lists_the_bundle_and_refuses_a_bad_wheel_in_one_line(tmp_path):
    wheel(tmp_path / "tool-1.0-py3-none-any.whl")
    done = run([sys.executable, os.path.join(ROOT, "scripts", "gpu_bundle.py"), "--check", "--out", str(tmp_path)])
    assert done.returncode == 0, done.stderr
    assert "tool-1.0-py3-none-any.whl" in done.stdout and "in all (1 wheels, RECORDs checked)" in done.stdout
    wheel(tmp_path / "bad-1.0-py3-none-any.whl", {**FILES, "tool/__init__.py": b"x\n"}, [])
    done = run([sys.executable, os.path.join(ROOT, "scripts", "gpu_bundle.py"), "--check", "--out", str(tmp_path)])
    assert done.returncode == 1 and done.stderr.strip().splitlines()[-1].startswith("gpu_bundle: error:")
