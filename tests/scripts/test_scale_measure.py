"""scripts/scale_measure.py: hltmt-prepare-data itself against the preparation phase by phase
(the same data, byte for byte), and a real fairseq-train run's time line; the fastest round
kept."""

import json
import os
import subprocess
import sys

from conftest import ROOT

SCRIPTS = os.path.join(ROOT, "scripts")
sys.path.insert(0, SCRIPTS)

import scale_measure as sm  # noqa: E402
from scale_children import training_args  # noqa: E402
from scale_corpus import write_corpus  # noqa: E402
from timing import span, stamp  # noqa: E402


def measured(kind, spec, work):
    """``run_measure`` as the scale bench calls it: from a process that imported torch but ran
    nothing in it (a fork of a pytest worker whose earlier tests ran torch's thread pools can
    hang in its first parallel operation)."""
    code = (
        f"import json, sys; sys.path.insert(0, {SCRIPTS!r}); from scale_children import run_measure; "
        f"print(json.dumps(run_measure({kind!r}, json.loads(sys.argv[1]), {work!r}, 300)))"
    )
    done = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_script_and_the_phase_by_phase_preparation_write_the_same_data(tmp_path):
    raw = str(tmp_path / "raw")
    langs = write_corpus(2, 8, 2, raw)
    prep = measured("prepare", {"langs": langs, "raw": raw, "out": str(tmp_path / "a"), "vocab": 300}, str(tmp_path))
    assert set(prep["spans"]) == {"imports", "read", "spm", "encode", "binarize"}
    script = sm.time_prepare_script(raw, str(tmp_path / "b"), langs, 300, 300)
    assert script["total"]["wall"] > script["binarize_wall_s"] > 0 and script["spm_wall_s"] > 0
    assert sm.digest(str(tmp_path / "a" / "bin")) == sm.digest(str(tmp_path / "b" / "bin"))
    (tmp_path / "b" / "bin" / "train.en-fr.fr.bin").write_bytes(b"changed")
    assert sm.digest(str(tmp_path / "a" / "bin")) != sm.digest(str(tmp_path / "b" / "bin"))


def test_a_fairseq_train_run_gives_its_time_line(data_bin, tmp_path):
    spec = {"data": data_bin, "langs": ["de", "fr", "gu", "hi"], "max_tokens": 1024, "updates": 2}
    save = str(tmp_path / "ckpt")
    argv = training_args(spec, "hltmt", save)
    rec = measured("fairseq", {"kind": "fairseq-train", "argv": argv}, str(tmp_path))
    t = stamp()
    imports = span(t, t)
    line = sm.summarize_train(rec, imports)
    assert line["first_update"]["cpu"] > line["first_step"]["cpu"] > 0 and line["build_model"]["cpu"] > 0
    assert line["step_words_per_cpu_s"] > 0 and line["save"]["cpu"] > 0 and line["peak_rss_mib"] > 50
    assert os.path.isfile(os.path.join(save, "checkpoint_last.pt"))
    table = {}
    sm.keep_fastest(table, "hltmt", line, "first_update")
    slower = {**line, "first_update": {"cpu": line["first_update"]["cpu"] + 1, "wall": 0.0}}
    sm.keep_fastest(table, "hltmt", slower, "first_update")
    assert table["hltmt"] is line
