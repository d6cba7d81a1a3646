"""The GPU run's smallest size on the CPU (scripts/gpu_run.sh --size tiny): every step of the
device script for real (prepare, the three systems calibrated and trained at once, parallel
decoding, sacreBLEU, report), at most 8 files out; its bad input; and the wheel bundle's
slimming (RECORD rebuilt and checked), without the network."""

import csv
import json
import os
import sys
import tarfile
import zipfile

import pytest

from conftest import ROOT, run

GPU_RUN = os.path.join(ROOT, "scripts", "gpu_run.sh")
GPU_RUN_PY = os.path.join(ROOT, "scripts", "gpu_run.py")
sys.path.insert(0, os.path.join(ROOT, "scripts"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    work, out = tmp_path_factory.mktemp("gpu_work"), tmp_path_factory.mktemp("gpu_out")
    done = run(
        ["bash", GPU_RUN, "--size", "tiny", "--work", str(work), "--out", str(out), "--status-every", "30"],
        env_extra={"PYTHON": sys.executable},
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    return work, out, done.stdout


def test_tiny_run_writes_at_most_eight_files_with_the_report(tiny):
    work, out, stdout = tiny
    names = sorted(os.listdir(out))
    assert names == sorted(
        [
            "results.md",
            "results.csv",
            "bleu.png",
            "valid_loss.png",
            "gate_heatmap.png",
            "run.json",
            "logs.tar.gz",
            "gpu_run.log",
        ]
    )
    for png in ("bleu.png", "valid_loss.png", "gate_heatmap.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert {(r["system"], r["direction"]) for r in rows} == {
        (s, d) for s in ("mnmt", "hltmt", "lsmnmt") for d in ("en-de", "en-gu", "de-en", "gu-en")
    }
    assert all(r["sentences"] == "8" for r in rows)
    md = (out / "results.md").read_text()
    for needle in (
        "- Machine: ",
        "no GPU",
        "## The run",
        "updates per system: 12 (",
        "calibration:",
        "tokens/s (training, 3 at once)",
        "**NOT CONVERGED**",
        "## Convergence",
        "| system | paper WMT-10 En->X | paper delta to MNMT | ours En->X | our delta to MNMT |",
        "| HLT-MT (hltmt) | no N-N row",  # the paper's rows of systems trained from scratch
        "| LS-MNMT (lsmnmt) | no row",
        "**avg En->X high**",
        "**avg X->En low**",
        "Routing map after stage 1: de->m0",
    ):
        assert needle in md, needle
    assert (out / "gpu_run.log").read_text().count("[gpu_run") >= 8 and "finished: 8 files" in stdout


def test_tiny_run_trains_three_systems_the_same_number_of_updates(tiny):
    work, out, _ = tiny
    info = json.loads((out / "run.json").read_text())
    assert set(info["systems"]) == {"mnmt", "hltmt", "lsmnmt"}
    for system, row in info["systems"].items():
        assert row["updates"] == 12, (system, row)
        assert row["calibration updates/s (3 at once)"] > 0 and row["tokens/s (training, 3 at once)"] > 0
        assert "note" not in row  # not cut short by the time guard
    assert set(info["phases_s"]) == {"prepare", "calibrate", "train", "decode", "report"}
    hltmt = open(work / "logs" / "train_hltmt.seed1.log").read()
    assert "--high-stage-updates 6" in hltmt and "routing map fixed from the final stage-high gate: de->m0" in hltmt
    assert "--slp-language-specific" in open(work / "logs" / "train_lsmnmt.seed1.log").read()
    for system in ("mnmt", "hltmt", "lsmnmt"):  # three validations: a curve, not a point
        assert open(work / "logs" / f"train_{system}.seed1.log").read().count("valid on 'valid' subset") == 3
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = tar.getnames()
    assert "logs/train_mnmt.seed1.log" in names and "logs/calibrate_hltmt.log" in names
    assert "decode/lsmnmt/seed1/gu-en.gen" in names


def test_bad_input_is_one_line_before_any_training(tmp_path):
    done = run(
        [
            sys.executable,
            GPU_RUN_PY,
            "--size",
            "tiny",
            "--langs",
            "de,xx",
            "--work",
            str(tmp_path / "w"),
            "--out",
            str(tmp_path / "o"),
        ]
    )
    assert done.returncode != 0
    errors = [line for line in done.stdout.splitlines() if "error:" in line]
    assert len(errors) == 1 and "no data for language(s) xx" in errors[0], done.stdout[-2000:]
    assert not (tmp_path / "w" / "models").exists()
    done = run([sys.executable, GPU_RUN_PY, "--size", "tiny", "--budget-s", "-5"])
    assert done.returncode == 2 and "--budget-s must be >= 0" in done.stderr


def test_a_python_without_fairseq_and_no_bundle_is_refused_in_one_line(tmp_path):
    fake = tmp_path / "python"  # this interpreter without its site-packages: no fairseq
    fake.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    fake.chmod(0o755)
    done = run(
        ["bash", GPU_RUN, "--size", "tiny"], env_extra={"PYTHON": str(fake), "GPU_BUNDLE": str(tmp_path / "empty")}
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("gpu_run.sh: error:") == 1 and "has no wheels" in done.stderr


def fake_wheel(path, extra=()):
    files = {
        "fairseq/__init__.py": b"x = 1\n",
        "fairseq/data/data_utils_fast.cpython-312-x86_64-linux-gnu.so": b"so1",
        "fairseq/data/token_block_utils_fast.cpython-312-x86_64-linux-gnu.so": b"so2",
        "fairseq/libbleu.cpython-312-x86_64-linux-gnu.so": b"so3",
        "fairseq/libnat.cpython-312-x86_64-linux-gnu.so": b"big" * 1000,
        "fairseq/libbase.cpython-312-x86_64-linux-gnu.so": b"big" * 1000,
        "alignment_train_cpu_binding.cpython-312-x86_64-linux-gnu.so": b"big" * 1000,
        "fairseq/examples/x/run.py": b"print(1)\n",
        "fairseq_cli/train.py": b"pass\n",
        "fairseq_fixed-0.12.3.1.dist-info/top_level.txt": b"alignment_train_cpu_binding\nfairseq\nfairseq_cli\n",
        "fairseq_fixed-0.12.3.1.dist-info/WHEEL": b"Wheel-Version: 1.0\n",
        **dict(extra),
    }
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("fairseq_fixed-0.12.3.1.dist-info/RECORD", "")


def test_bundle_slims_fairseq_and_rebuilds_a_valid_record(tmp_path):
    import gpu_bundle

    src, dst = tmp_path / "in.whl", tmp_path / "out.whl"
    fake_wheel(src)
    kept, dropped = gpu_bundle.slim_wheel(str(src), str(dst))
    assert dropped == 4 and kept == 7
    gpu_bundle.verify_wheel(str(dst))
    with zipfile.ZipFile(dst) as z:
        names = set(z.namelist())
        record = z.read("fairseq_fixed-0.12.3.1.dist-info/RECORD").decode()
        top = z.read("fairseq_fixed-0.12.3.1.dist-info/top_level.txt").decode()
    assert "fairseq/data/data_utils_fast.cpython-312-x86_64-linux-gnu.so" in names
    assert not any("libnat" in n or "examples" in n or "alignment" in n for n in names | set(record.split()))
    assert top == "fairseq\nfairseq_cli\n"
    # a file whose bytes no longer match its RECORD line is caught
    tampered = tmp_path / "tampered.whl"
    with zipfile.ZipFile(dst) as zin, zipfile.ZipFile(tampered, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, b"x = 2\n" if info.filename == "fairseq/__init__.py" else zin.read(info))
    with pytest.raises(gpu_bundle.BundleError, match="RECORD does not match fairseq/__init__.py"):
        gpu_bundle.verify_wheel(str(tampered))
    # a wheel without the compiled data utilities is not the cp312 build: refused
    no_so = tmp_path / "noso.whl"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(no_so, "w") as zout:
        for info in zin.infolist():
            if "data_utils_fast" not in info.filename:
                zout.writestr(info.filename, zin.read(info))
    with pytest.raises(gpu_bundle.BundleError, match="no compiled fairseq/data/data_utils_fast"):
        gpu_bundle.slim_wheel(str(no_so), str(tmp_path / "x.whl"))


def test_bundle_check_of_an_empty_folder_is_one_line(tmp_path):
    done = run([sys.executable, os.path.join(ROOT, "scripts", "gpu_bundle.py"), "--check", "--out", str(tmp_path)])
    assert done.returncode == 1 and done.stderr.strip().startswith("gpu_bundle: error: no wheels in")
    assert len(done.stderr.strip().splitlines()) == 1


def test_sizing_fits_the_budget():
    import gpu_run

    class Args:
        size, langs, high, work, out, budget_s, cpu, precision, seed = (
            "small",
            None,
            None,
            "/tmp/w",
            "/tmp/o",
            420,
            True,
            "auto",
            1,
        )
        gpu, ngpu, dry_run, bf16, updates = False, 1, False, False, 0

    plan = gpu_run.RunPlan(Args)  # the plan alone: nothing started or written
    n, why, sized = plan.size_updates(rate=10.0, startup=20.0, remaining=360.0)  # prepare took a minute of 420
    # 360 s left; decoding keeps max(90, 72); 20 for the report -> a 250 s window,
    # 20 s start-up and 8 validations of 3 s off: 0.85 * 10 * 206 = 1751 -> even
    assert abs(n - 1750) <= 4 and n % 2 == 0 and sized == 1751 and "slowest system" in why
    assert plan.train_window == pytest.approx(250, abs=1)
    n, why, sized = plan.size_updates(rate=0.01, startup=20.0, remaining=360.0)
    assert n == gpu_run.SIZES["small"].min_updates > sized and "clamped to" in why
    assert plan.fixed_updates(360.0) == (0, "given by --updates") and plan.train_window == pytest.approx(250)


def test_languages_that_cannot_work_are_one_line_before_any_work(tmp_path):
    for options, message in (
        (["--langs", "de,gu", "--high", "de,fr"], "--high fr not in --langs (de,gu)"),
        (["--langs", "gu,hi"], "no high-resource language among --langs (gu,hi)"),
    ):
        work = tmp_path / "w"
        done = run([sys.executable, GPU_RUN_PY, "--size", "tiny", "--cpu", "--dry-run", "--work", str(work), *options])
        errors = [line for line in done.stderr.splitlines() if "error:" in line]
        assert done.returncode == 2 and errors == [errors[0]] and message in errors[0], done.stderr[-2000:]
        assert errors[0].startswith("gpu_run: error:") and not work.exists()
