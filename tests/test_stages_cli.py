"""HLT-MT's two stages through the real fairseq-train: two runs, and one run with
--high-stage-updates N, including resumes on either side of N."""
import re

import pytest
import torch

import hltmt_plugin  # noqa: F401  (allowlists the types fairseq checkpoints hold)
from conftest import cli, run, train_args
from hltmt_plugin.modules.language_pool import decode_map

COMMON = ["--criterion", "hltmt_cross_entropy", "--label-smoothing", "0.1", "--optimizer", "adam",
          "--lr", "2e-3", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "5", "--max-tokens", "1500",
          "--log-interval", "1", "--no-epoch-checkpoints", "--sampling-method", "temperature",
          "--sampling-temperature", "5", "--seed", "2", "--num-workers", "0"]


def train(data_bin, save, *extra):
    done = run([cli("fairseq-train"), *train_args(data_bin, *COMMON, "--save-dir", str(save), *extra)])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def state(path):
    model = torch.load(path, map_location="cpu", weights_only=True)["model"]
    onehot = model["decoder.slp.fixed_map_onehot"]  # the stored map, as module indices (-1: open)
    model["decoder.slp.fixed_map"] = decode_map(onehot, onehot.shape[1] - 1)
    return model


def progress(log):
    """{update: progress line} for the per-update train_inner lines."""
    return {int(m.group(1)): line for line in log.splitlines() if "train_inner" in line
            for m in [re.search(r"num_updates=(\d+)", line)] if m}


def numeric(line, key):
    return re.search(rf"\b{key}=\d", line) is not None


def test_two_runs_high_then_all(data_bin, tmp_path):
    s1, s2 = tmp_path / "stage1", tmp_path / "stage2"
    log1 = train(data_bin, s1, "--hlt-stage", "high", "--max-update", "12")
    # the pairs stage high leaves out are named once, when the training data is loaded
    assert log1.count("HLT-MT stage high trains en-de,en-fr,de-en only; en-gu,en-hi,gu-en of "
                      "--lang-pairs are NOT trained in this run") == 1, log1[-3000:]
    lines = progress(log1)
    assert len(lines) == 12
    assert all(not numeric(line, "loss_gu") and not numeric(line, "loss_hi") for line in lines.values())
    assert any(numeric(line, "disparity") for line in lines.values())
    assert all(numeric(line, "route_univ") for line in lines.values())
    first = state(s1 / "checkpoint_last.pt")
    assert first["decoder.slp.fixed_map"].tolist() == [-1, -1]  # stage high leaves the map open
    from hltmt_plugin.modules.language_pool import SelectiveLanguagePool  # noqa: F401
    emb = first["decoder.embed_tokens.weight"]
    from fairseq.data import Dictionary
    d = Dictionary.load(f"{data_bin}/dict.en.txt")
    for lang in "en,de,fr,gu,hi".split(","):
        d.add_symbol(f"__{lang}__")
    high_rows = emb[[d.index("__de__"), d.index("__fr__")]]
    gate = high_rows @ first["decoder.slp.gate.weight"].T + first["decoder.slp.gate.bias"]
    learned_map = gate.argmax(-1).tolist()

    log2 = train(data_bin, s2, "--hlt-stage", "all", "--max-update", "12", "--restore-file",
                 str(s1 / "checkpoint_last.pt"), "--reset-optimizer", "--reset-dataloader", "--reset-meters")
    printed = f"routing map fixed from the final stage-high gate: de->m{learned_map[0]}, fr->m{learned_map[1]}"
    assert printed in log2
    assert "NOT trained in this run" not in log2
    lines2 = progress(log2)
    assert any(numeric(line, "loss_gu") or numeric(line, "loss_hi") for line in lines2.values())
    assert not any(numeric(line, "disparity") for line in lines2.values())
    second = state(s2 / "checkpoint_last.pt")
    assert second["decoder.slp.fixed_map"].tolist() == learned_map
    for key in ("decoder.slp.gate.weight", "decoder.slp.gate.bias"):
        assert torch.equal(first[key], second[key]), key  # the gate no longer trains
    assert not torch.equal(first["decoder.slp.universal.fc1.weight"], second["decoder.slp.universal.fc1.weight"])
    used = learned_map[0]
    assert not torch.equal(first[f"decoder.slp.pool.{used}.fc1.weight"], second[f"decoder.slp.pool.{used}.fc1.weight"])

    # a third run resumes stage all: the map stays as it was
    log3 = train(data_bin, s2, "--hlt-stage", "all", "--max-update", "14")
    assert "routing map (fixed)" in log3
    assert state(s2 / "checkpoint_last.pt")["decoder.slp.fixed_map"].tolist() == learned_map


def switch_checks(log, n):
    lines = progress(log)
    high = [line for u, line in lines.items() if u <= n]
    after = [line for u, line in lines.items() if u > n]
    assert all(not numeric(line, "loss_gu") and not numeric(line, "loss_hi") for line in high)
    assert any(numeric(line, "loss_gu") or numeric(line, "loss_hi") for line in after)
    assert not any(numeric(line, "disparity") for line in after)
    assert all(f"epoch 001" in line for line in high) and all("epoch 002" in line for line in after)
    assert re.search(rf"HLT-MT stage all \(epoch 2, update {n}\): routing map fixed", log)


def test_one_run_switches_at_exactly_n_also_across_resumes(data_bin, tmp_path):
    n = 9
    straight = train(data_bin, tmp_path / "straight", "--high-stage-updates", str(n), "--max-update", "14")
    assert f"epoch 1 ends at update {n} (end of stage high)" in straight
    switch_checks(straight, n)
    stage_all = [line for u, line in progress(straight).items() if u > n]
    assert stage_all and not any("disparity=None" in line for line in stage_all)  # no soft step, no figure

    # stop before N (the checkpoint is mid-epoch, in stage high), then resume across N
    resumed = tmp_path / "resumed"
    before = train(data_bin, resumed, "--high-stage-updates", str(n), "--max-update", "5")
    assert max(progress(before)) == 5
    across = train(data_bin, resumed, "--high-stage-updates", str(n), "--max-update", "14")
    assert "Loaded checkpoint" in across and min(progress(across)) == 6
    switch_checks(before + across, n)
    # the same losses as the run that was never stopped
    for u in range(6, 15):
        loss = lambda text: re.search(r" loss=([\d.]+)", progress(text)[u]).group(1)  # noqa: E731
        assert loss(across) == loss(straight), u

    # resume after N: stage all goes on with the same map
    mapped = state(resumed / "checkpoint_last.pt")["decoder.slp.fixed_map"].tolist()
    after = train(data_bin, resumed, "--high-stage-updates", str(n), "--max-update", "16")
    assert re.search(r"HLT-MT stage all \(epoch \d+, update 14\): routing map \(fixed\)", after)
    assert state(resumed / "checkpoint_last.pt")["decoder.slp.fixed_map"].tolist() == mapped


def test_stage_all_without_a_learned_map_is_refused(data_bin, tmp_path):
    done = run([cli("fairseq-train"), *train_args(data_bin, *COMMON, "--save-dir", str(tmp_path / "x"),
                                                  "--hlt-stage", "all", "--max-update", "3")])
    assert done.returncode != 0
    assert "hltmt_plugin: error: stage all needs the routing map learned in stage high" in done.stderr
    assert "Traceback" not in done.stderr
