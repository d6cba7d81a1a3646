"""scripts/scale_measure.py: hltmt-prepare-data itself timed phase by phase in a measuring
process, and a real fairseq-train run's time line; the fastest round kept."""

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
        f"print(json.dumps(run_measure({kind!r}, json.loads(sys.argv[1]), 300)))"
    )
    done = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_hltmt_prepare_data_itself_is_timed_phase_by_phase(tmp_path):
    raw = str(tmp_path / "raw")
    langs = write_corpus(2, 8, 2, raw)
    prep = measured("prepare", {"langs": langs, "raw": raw, "out": str(tmp_path / "a"), "vocab": 300}, str(tmp_path))
    assert {"total", "load_data", "sentencepiece_model", "encode_splits", "binarize"} <= set(prep)
    assert prep["total"]["cpu"] > prep["binarize"]["cpu"] > 0 and prep["sentencepiece_model"]["cpu"] > 0
    assert {"dict.en.txt", "dict.fr.txt", "langs.txt"} <= set(os.listdir(tmp_path / "a" / "bin"))
    assert (tmp_path / "a" / "bin" / "train.en-fr.fr.bin").stat().st_size > 0  # its output, as the command writes it


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
