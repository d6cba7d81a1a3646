"""scripts/scale_measure.py: hltmt-prepare-data itself against the preparation phase by phase
(the same data, byte for byte), and a real fairseq-train run's time line; the fastest round
kept."""

import os
import sys

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))

import scale_measure as sm  # noqa: E402
from scale_children import run_measure, training_args  # noqa: E402
from scale_corpus import write_corpus  # noqa: E402
from timing import span, stamp  # noqa: E402


def test_the_script_and_the_phase_by_phase_preparation_write_the_same_data(tmp_path):
    raw = str(tmp_path / "raw")
    langs = write_corpus(2, 8, 2, raw)
    prep = run_measure(
        "prepare", {"langs": langs, "raw": raw, "out": str(tmp_path / "a"), "vocab": 300}, str(tmp_path), 300
    )
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
    rec = run_measure("fairseq", {"kind": "fairseq-train", "argv": argv}, str(tmp_path), 300)
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
