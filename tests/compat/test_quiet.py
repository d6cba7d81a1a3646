"""fairseq's start-up noise (the tensorboardX notice, its Python warnings) stays out of the
plugin's commands (hltmt_plugin/compat/quiet.py) unless PYTHONWARNINGS is set: run here without
the suite's PYTHONWARNINGS=ignore."""

import os
import subprocess

from conftest import ROOT, cli

NOISE = ("tensorboardX", "UserWarning", "FutureWarning", "DeprecationWarning")


def without_pythonwarnings(cmd, **kwargs):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}  # not the suite's PYTHONWARNINGS=ignore
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=dict(env, OMP_NUM_THREADS="1"), **kwargs)


def test_prepare_data_keeps_fairseqs_noise_out(tmp_path):
    done = without_pythonwarnings(
        [
            cli("hltmt-prepare-data"),
            "--out",
            str(tmp_path / "out"),
            "--langs",
            "de",
            "--max-train",
            "200",
            "--max-valid",
            "20",
            "--max-test",
            "20",
            "--vocab-size",
            "500",
            "--workers",
            "1",
        ]
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for noise in NOISE:
        assert noise not in done.stdout + done.stderr, noise


def test_translate_keeps_fairseqs_noise_out_even_when_verbose(trained):
    done = without_pythonwarnings(
        [
            cli("hltmt-translate"),
            "--checkpoint",
            trained[0],
            "--src",
            "en",
            "--tgt",
            "de",
            "--beam",
            "1",
            "--no-progress",
            "--verbose",
        ],
        input="Good morning.\n",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for noise in NOISE:
        assert noise not in done.stdout + done.stderr, noise
    assert "NOT trained in this run" not in done.stdout + done.stderr  # a training warning, not for decoding


def test_train_language_adapter_keeps_fairseqs_noise_out(tmp_path):
    """The command imports fairseq's modules only once it has registered (the filters are set
    before fairseq's first import): a model without adapters ends in one line, nothing else."""
    models = os.path.join(ROOT, "docs", "results", "cpu-study", "models")
    text = tmp_path / "de.txt"
    text.write_text("Guten Morgen.\nDie Datei ist offen.\n", encoding="utf-8")
    done = without_pythonwarnings(
        [cli("hltmt-train-language-adapter"), "--path", os.path.join(models, "hltmt.pt"), "--data", models]
        + ["--spm", os.path.join(models, "spm.model"), "--lang", "de", "--text", str(text), "--steps", "1"]
        + ["--out", str(tmp_path / "out.pt"), "--cpu"]
    )
    assert done.returncode == 1 and "this model has no adapters" in done.stderr, done.stderr[-2000:]
    for noise in NOISE:
        assert noise not in done.stdout + done.stderr, noise
