"""Golden test: a checkpoint written by an earlier version of the code (tests/golden/, made by
tests/golden/make.py: SLP with a fixed map, language + shared + decoder + invertible adapters,
skill FFNs and skill attention) gives bit-identical hypotheses, positional scores and
full-forward log-probabilities with today's code."""
import os
import sys

import torch

from conftest import run
from golden_common import DIRECTIONS, ROOT, forward_scores, generate_cmd

GOLDEN = os.path.join(ROOT, "tests", "golden")
DATA, CHECKPOINT = os.path.join(GOLDEN, "bin"), os.path.join(GOLDEN, "checkpoint.pt")


def expected():
    return torch.load(os.path.join(GOLDEN, "expected.pt"), map_location="cpu", weights_only=True)


def test_fairseq_generate_gives_the_golden_hypotheses_and_scores():
    want = expected()["generate"]
    for direction in DIRECTIONS:
        done = run(generate_cmd(sys.executable, DATA, CHECKPOINT, direction))
        assert done.returncode == 0, done.stderr[-3000:]
        got = sorted(line for line in done.stdout.splitlines() if line[:2] in ("S-", "H-", "P-", "T-"))
        assert len(got) == 36
        assert got == want[direction], direction


def test_a_full_forward_gives_the_golden_log_probabilities_bit_for_bit():
    want = expected()["scores"]
    got = forward_scores(DATA, CHECKPOINT)
    for direction in DIRECTIONS:
        assert torch.equal(got[direction][0], want[direction][0]), direction
        assert torch.equal(got[direction][1], want[direction][1]), direction
