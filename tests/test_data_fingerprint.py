"""The fingerprint of a binarized folder's dictionaries (hltmt_plugin/data_fingerprint.py),
through the real fairseq-train: a dictionary edited after binarization is refused before the
first update (hltmt-prepare-data's tests check the record it writes)."""
import os
import shutil

from conftest import HIGH, LANGS, PAIRS, PLUGIN, cli, run


def test_a_dictionary_changed_after_binarization_is_refused(data_bin, tmp_path):
    copy = tmp_path / "bin"
    shutil.copytree(data_bin, copy)
    for name in os.listdir(copy):
        if name.startswith("dict.") and name.endswith(".txt"):
            lines = (copy / name).read_text(encoding="utf-8").splitlines(keepends=True)
            (copy / name).write_text("".join(lines[:5] + lines[6:]), encoding="utf-8")  # one line removed
    done = run([cli("fairseq-train"), str(copy), "--user-dir", PLUGIN, "--task", "hltmt_translation",
                "--arch", "hltmt_transformer_tiny", "--langs", LANGS, "--lang-pairs", PAIRS, "--encoder-langtok",
                "tgt", "--high-resource-langs", HIGH, "--slp-pool-size", "2", "--cpu", "--max-update", "1",
                "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000", "--save-dir", str(tmp_path / "s")])
    assert done.returncode != 0
    assert "dict.de.txt changed since the data was binarized" in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "s" / "checkpoint_last.pt").exists()
