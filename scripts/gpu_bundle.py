#!/usr/bin/env python3
"""Build the wheel bundle for a GPU machine without network access: the wheels it lacks, one
version of each.

    python scripts/gpu_bundle.py                 # -> gpu_bundle/ (ignored by git)
    python scripts/gpu_bundle.py --check         # also list what is in it, with sizes

The GPU machine (Python 3.12, torch 2.11 + CUDA, numpy 2.5, cython, sentencepiece, sacrebleu,
matplotlib, pyyaml, regex, tqdm, packaging, pytest) has no network and no fairseq. What a
real ``import fairseq`` and a fairseq-train / fairseq-generate run of this plugin need beyond
that, for CPython 3.12 on manylinux x86-64, downloaded with ``--no-deps``:

- ``fairseq-fixed`` 0.12.3.1, the cp312 wheel (20.5 MB), slimmed to what the run needs
  (about 2.3 MB): its compiled ``data_utils_fast``, ``token_block_utils_fast`` and
  ``libbleu`` stay; the torch C++ extensions (``libbase``, ``libnat``,
  ``alignment_train_cpu_binding``) and ``fairseq/examples`` go. The wheel is rebuilt with
  a RECORD that lists exactly its files with their sha256 and sizes;
- ``hydra-core`` 1.3.2 and ``omegaconf`` 2.3.0 (the versions fairseq-fixed pins);
- ``antlr4-python3-runtime`` 4.9.3 (hydra's pin; only an sdist exists, so a pure-Python
  wheel is built here);
- ``bitarray`` (cp312 manylinux wheel; fairseq.data imports it).

The plugin itself runs from the checkout (``PYTHONPATH=<repo>``), not as a wheel. On the
GPU machine: ``python3 -m pip install --no-index --no-deps --target DIR gpu_bundle/*.whl`` and
``PYTHONPATH=DIR:<repo>`` (scripts/gpu_run.sh does it). Run from a clean clone: needs pip
and the package index, nothing else.
"""

import argparse
import base64
import csv
import glob
import hashlib
import io
import os
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLATFORMS = [
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
]
BINARY = ["fairseq-fixed==0.12.3.1", "hydra-core==1.3.2", "omegaconf==2.3.0", "bitarray==3.12.3"]
SDIST = ["antlr4-python3-runtime==4.9.3"]
# what the slimmed fairseq wheel drops: torch C++ extensions (built against one torch ABI;
# only the NAT models, BASE layers and alignment training use them) and the examples
DROP_PREFIXES = ("fairseq/examples/", "alignment_train_cpu_binding.", "fairseq/libbase.", "fairseq/libnat.")
KEEP_REQUIRED = ("fairseq/data/data_utils_fast.", "fairseq/data/token_block_utils_fast.", "fairseq/libbleu.")


class BundleError(Exception):
    pass


def log(msg):
    print(f"[gpu_bundle] {msg}", flush=True)


def pip(*args):
    cmd = [sys.executable, "-m", "pip", *args]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise BundleError(f"{' '.join(cmd[2:5])} ... failed: " + (done.stderr.strip().splitlines() or ["?"])[-1])
    return done


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [name, f"sha256={digest}", str(len(data))]


def slim_wheel(src, dst):
    """Rewrite the fairseq wheel without DROP_PREFIXES; RECORD rebuilt from what is kept. The new
    wheel is built in memory and written whole. Returns (kept files, dropped files)."""
    from hltmt_plugin.atomic_files import write_bytes  # the plugin (and fairseq, where it is) only to write

    kept, dropped, buf = 0, 0, io.BytesIO()
    with zipfile.ZipFile(src) as zin:
        names = zin.namelist()
        record = next((n for n in names if n.endswith(".dist-info/RECORD")), None)
        if record is None:
            raise BundleError(f"{src} has no .dist-info/RECORD: not a wheel")
        for need in KEEP_REQUIRED:
            if not any(n.startswith(need) and n.endswith(".so") for n in names):
                raise BundleError(f"{src} has no compiled {need}*.so: not the cp312 manylinux build")
        dist_info, rows = record.rsplit("/", 1)[0], []
        with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
            for info in zin.infolist():
                name = info.filename
                if name == record or name.endswith("/"):
                    continue
                if name.startswith(DROP_PREFIXES):
                    dropped += 1
                    continue
                data = zin.read(info)
                if name == f"{dist_info}/top_level.txt":
                    lines = [
                        line for line in data.splitlines() if line.strip() and not line.startswith(b"alignment_train")
                    ]
                    data = b"".join(line + b"\n" for line in lines)
                out = zipfile.ZipInfo(name, date_time=info.date_time)
                out.external_attr, out.compress_type = info.external_attr, zipfile.ZIP_DEFLATED
                zout.writestr(out, data)
                rows.append(record_line(name, data))
                kept += 1
            text = io.StringIO()
            csv.writer(text, lineterminator="\n").writerows([*rows, [record, "", ""]])
            zout.writestr(zipfile.ZipInfo(record, date_time=(2024, 1, 1, 0, 0, 0)), text.getvalue())
    write_bytes(dst, buf.getvalue())
    return kept, dropped


def verify_wheel(path):
    """Every file of the wheel is in its RECORD with the right hash and size, and nothing else."""
    with zipfile.ZipFile(path) as z:
        if z.testzip() is not None:
            raise BundleError(f"{path}: a damaged member")
        names = [n for n in z.namelist() if not n.endswith("/")]
        record = next(n for n in names if n.endswith(".dist-info/RECORD"))
        rows = {r[0]: r for r in csv.reader(io.StringIO(z.read(record).decode())) if r}
        for name in names:
            if name == record:
                continue
            if name not in rows or rows[name] != record_line(name, z.read(name)):
                raise BundleError(f"{path}: RECORD does not match {name}")
        extra = set(rows) - set(names)
        if extra:
            raise BundleError(f"{path}: RECORD lists missing files, e.g. {sorted(extra)[0]}")


def download(raw):
    """The wheels of BINARY (cp312 manylinux x86-64) and SDIST (built here) into ``raw``."""
    plat = [a for p in PLATFORMS for a in ("--platform", p)]
    for spec in BINARY:
        log(f"download {spec} (cp312 manylinux x86-64, no deps)")
        pip(
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            "3.12",
            "--implementation",
            "cp",
            *plat,
            "-d",
            raw,
            spec,
        )
    for spec in SDIST:
        log(f"build a pure-Python wheel of {spec} from its sdist")
        pip("wheel", "--no-deps", "--no-binary", ":all:", "-w", raw, spec)
    wheels = sorted(glob.glob(os.path.join(raw, "*.whl")))
    if len(wheels) != len(BINARY) + len(SDIST):
        raise BundleError(f"expected {len(BINARY) + len(SDIST)} wheels, got {[os.path.basename(w) for w in wheels]}")
    return wheels


def fill(out, wheels):
    """The bundle folder's content: every wheel (fairseq's slimmed), each checked, and a README."""
    from hltmt_plugin.atomic_files import copy_file, write_text

    for wheel in wheels:
        name = os.path.basename(wheel)
        if name.startswith("antlr4") and not name.endswith("-py3-none-any.whl"):
            raise BundleError(f"{name} is not a pure-Python wheel")
        if name.startswith("fairseq_fixed") and "-cp312-cp312-" not in name:
            raise BundleError(f"{name} is not the cp312 wheel")
        if name.startswith("fairseq_fixed"):
            kept, dropped = slim_wheel(wheel, os.path.join(out, name))
            log(
                f"slimmed {name}: {os.path.getsize(wheel) / 2**20:.1f} MiB -> {os.path.getsize(os.path.join(out, name)) / 2**20:.1f} MiB ({kept} files kept, {dropped} dropped)"
            )
        else:
            copy_file(wheel, os.path.join(out, name))
        verify_wheel(os.path.join(out, name))
    readme = "Wheels for the GPU machine (CPython 3.12, manylinux x86-64), made by scripts/gpu_bundle.py.\n"
    write_text(
        os.path.join(out, "README.txt"),
        readme + "Install: python3 -m pip install --no-index --no-deps --target DIR *.whl\n",
    )


def build(out):
    """The bundle folder ``out`` written whole (atomic_files.write_folder): one made by this script is replaced."""
    from hltmt_plugin.atomic_files import write_folder
    from hltmt_plugin.errors import HltmtError

    try:
        with tempfile.TemporaryDirectory() as tmp:
            write_folder(out, lambda work: fill(work, download(tmp)), kind="gpu_bundle", force=True)
    except HltmtError as error:  # an --out it did not make; a file it could not write
        raise BundleError(str(error)) from None


def show(out):
    wheels = sorted(glob.glob(os.path.join(out, "*.whl")))
    if not wheels:
        raise BundleError(f"no wheels in {out}: run scripts/gpu_bundle.py first")
    total = 0
    for wheel in wheels:
        verify_wheel(wheel)
        size = os.path.getsize(wheel)
        total += size
        log(f"{size / 2**20:7.2f} MiB  {os.path.basename(wheel)}")
    log(f"{total / 2**20:7.2f} MiB  in all ({len(wheels)} wheels, RECORDs checked)")
    return total


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.path.join(ROOT, "gpu_bundle"), help="bundle folder (default: %(default)s)")
    p.add_argument("--check", action="store_true", help="only check the bundle that is there and list it")
    args = p.parse_args(argv)
    try:
        if not args.check:
            build(args.out)
        show(args.out)
    except BundleError as error:
        print(f"gpu_bundle: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
