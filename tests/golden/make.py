#!/usr/bin/env python3
"""Make the golden fixture of tests/test_golden.py (run once, before a refactor; commit the output).

    .venv/bin/python tests/golden/make.py              # a new checkpoint and its record (expected.pt)
    .venv/bin/python tests/golden/make.py --platform   # this platform's bit-exact record of the same checkpoint

A tiny HLT-MT model with every feature on (SLP with a fixed map after a one-run stage switch,
language + shared + decoder + invertible adapters, skill FFNs and skill attention), trained for
a few updates on a DebMT-10 slice, then: the checkpoint, the binarized test slice, and what the
code of the day computes from them: ``fairseq-generate`` output (beam 5) for four directions
and the full-forward log-probabilities of the references (``expected.pt``). The test checks that
later code computes the same. ``--platform`` keeps the checkpoint and records what the code of
the day computes from it on this torch build and kind of CPU (``platforms/<key>.pt``): run it
before a change, on the machine that tests the change, for the bit-for-bit check there.
"""

import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from golden_common import DIRECTIONS, forward_scores, generate_cmd, platform_record_path, record  # noqa: E402

BIN = os.path.dirname(sys.executable)


def sh(cmd):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if done.returncode != 0:
        sys.exit(done.stdout[-3000:] + done.stderr[-3000:])
    return done.stdout


def record_platform():
    import torch

    path = platform_record_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    torch.save(record(os.path.join(HERE, "bin"), os.path.join(HERE, "checkpoint.pt"), env), path)
    print("this platform's golden record written to", path)


def main():
    import torch

    if sys.argv[1:] == ["--platform"]:
        return record_platform()

    tmp = tempfile.mkdtemp()
    sh(
        [
            "hltmt-prepare-data",
            "--out",
            tmp,
            "--langs",
            "de,fr,gu,hi",
            "--max-train",
            "300",
            "--max-valid",
            "10",
            "--max-test",
            "9",
            "--vocab-size",
            "600",
        ]
    )
    data = os.path.join(HERE, "bin")
    shutil.rmtree(data, ignore_errors=True)
    os.makedirs(data)
    for name in os.listdir(os.path.join(tmp, "bin")):
        if name.startswith(("dict.", "test.", "valid.")):
            shutil.copy(os.path.join(tmp, "bin", name), data)
    # train on the full binarized slice, keep only valid/test in the fixture
    sh(
        [
            os.path.join(BIN, "fairseq-train"),
            os.path.join(tmp, "bin"),
            "--user-dir",
            "hltmt_plugin",
            "--task",
            "hltmt_translation",
            "--arch",
            "hltmt_transformer_tiny",
            "--encoder-embed-dim",
            "32",
            "--encoder-ffn-embed-dim",
            "64",
            "--encoder-attention-heads",
            "2",
            "--decoder-attention-heads",
            "2",
            "--langs",
            "en,de,fr,gu,hi",
            "--lang-pairs",
            "en-de,en-fr,en-gu,en-hi,de-en,gu-en",
            "--encoder-langtok",
            "tgt",
            "--enable-lang-ids",
            "--high-resource-langs",
            "de,fr",
            "--slp-pool-size",
            "2",
            "--language-adapters",
            "--shared-adapters",
            "--decoder-adapters",
            "--invertible-adapters",
            "--adapter-placement",
            "houlsby",
            "--skill-ffn",
            "--skill-attention",
            "--skill-layers",
            "1",
            "--criterion",
            "hltmt_cross_entropy",
            "--label-smoothing",
            "0.1",
            "--high-stage-updates",
            "6",
            "--max-update",
            "12",
            "--optimizer",
            "adam",
            "--lr",
            "3e-3",
            "--max-tokens",
            "800",
            "--cpu",
            "--save-dir",
            os.path.join(tmp, "ckpt"),
            "--no-epoch-checkpoints",
            "--seed",
            "5",
            "--num-workers",
            "0",
        ]
    )
    state = torch.load(os.path.join(tmp, "ckpt", "checkpoint_last.pt"), map_location="cpu", weights_only=False)
    state["last_optimizer_state"] = None  # keep the fixture small
    # a few updates leave a degenerate model (every hypothesis alike) and adapters near their
    # identity start: seeded noise on every weight makes each module and route change the output
    g = torch.Generator().manual_seed(0)
    for name, value in state["model"].items():
        if value.is_floating_point():
            value.add_(
                torch.randn(value.shape, generator=g) * (1.5 * float(value.std()) if value.numel() > 1 else 0.0)
                + torch.randn(value.shape, generator=g) * 0.2
            )
    torch.save(state, os.path.join(HERE, "checkpoint.pt"))
    expected = {}
    for direction in DIRECTIONS:
        out = sh(generate_cmd(sys.executable, data, os.path.join(HERE, "checkpoint.pt"), direction))
        expected[direction] = sorted(line for line in out.splitlines() if line[:2] in ("S-", "H-", "P-", "T-"))
    scores = forward_scores(data, os.path.join(HERE, "checkpoint.pt"))
    torch.save({"generate": expected, "scores": scores}, os.path.join(HERE, "expected.pt"))
    shutil.rmtree(tmp)
    print("golden fixture written to", HERE)


if __name__ == "__main__":
    main()
