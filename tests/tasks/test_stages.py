"""HLT-MT's two stages (hltmt_plugin/tasks/stages.py) through the real fairseq-train: two runs,
and one run with --high-stage-updates N, including resumes on either side of N, with another
--high-stage-updates, after --reset-optimizer, and after the run was killed with SIGKILL (its
stage, map, routing draws, sampler and LR schedule intact); a --train-only that the run's stages
would not train is one line before the first update."""

import os
import re
import shutil
import signal
import subprocess
import time

import pytest
import torch

import hltmt_plugin  # noqa: F401  (registers the task, model and criterion with fairseq)
from conftest import (
    LIKE_TRAINED,
    RESET,
    SHORT_RUN,
    assert_clear,
    cli,
    error_lines,
    losses,
    run,
    train_args,
    train_run,
    updates,
)
from hltmt_plugin.compat.safe_loading import load_state
from hltmt_plugin.pool.router import decode_map

COMMON = [
    "--criterion",
    "hltmt_cross_entropy",
    "--label-smoothing",
    "0.1",
    "--optimizer",
    "adam",
    "--lr",
    "2e-3",
    "--lr-scheduler",
    "inverse_sqrt",
    "--warmup-updates",
    "5",
    "--max-tokens",
    "1500",
    "--log-interval",
    "1",
    "--no-epoch-checkpoints",
    "--sampling-method",
    "temperature",
    "--sampling-temperature",
    "5",
    "--seed",
    "2",
    "--num-workers",
    "0",
]


def train(data_bin, save, *extra):
    done = run([cli("fairseq-train"), *train_args(data_bin, *COMMON, "--save-dir", str(save), *extra)])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def state(path):
    model = load_state(path)["model"]
    onehot = model["decoder.slp_router.routing_map"]  # the stored map, as module indices (-1: open)
    model["fixed_map"] = decode_map(onehot, onehot.shape[1] - 1)
    return model


def progress(log):
    """{update: progress line} for the per-update train_inner lines."""
    return {
        int(m.group(1)): line
        for line in log.splitlines()
        if "train_inner" in line
        for m in [re.search(r"num_updates=(\d+)", line)]
        if m
    }


def numeric(line, key):
    return re.search(rf"\b{key}=\d", line) is not None


def test_two_runs_high_then_all(data_bin, tmp_path):
    s1, s2 = tmp_path / "stage1", tmp_path / "stage2"
    log1 = train(data_bin, s1, "--hlt-stage", "high", "--max-update", "12")
    # the pairs stage high leaves out are named once, when the training data is loaded
    assert (
        log1.count(
            "HLT-MT stage high trains en-de,en-fr,de-en only; en-gu,en-hi,gu-en of "
            "--lang-pairs are NOT trained in this run"
        )
        == 1
    ), log1[-3000:]
    lines = progress(log1)
    assert len(lines) == 12
    assert all(not numeric(line, "loss_gu") and not numeric(line, "loss_hi") for line in lines.values())
    assert any(numeric(line, "disparity") for line in lines.values())
    assert all(numeric(line, "route_universal") for line in lines.values())
    first = state(s1 / "checkpoint_last.pt")
    assert first["fixed_map"].tolist() == [-1, -1]  # stage high leaves the map open
    from hltmt_plugin.pool.modules import SelectiveLanguagePool  # noqa: F401

    emb = first["decoder.embed_tokens.weight"]
    from fairseq.data import Dictionary

    d = Dictionary.load(f"{data_bin}/dict.en.txt")
    for lang in "en,de,fr,gu,hi".split(","):
        d.add_symbol(f"__{lang}__")
    high_rows = emb[[d.index("__de__"), d.index("__fr__")]]
    gate = high_rows @ first["decoder.slp_router.gate.weight"].T + first["decoder.slp_router.gate.bias"]
    learned_map = gate.argmax(-1).tolist()

    log2 = train(
        data_bin,
        s2,
        "--hlt-stage",
        "all",
        "--max-update",
        "12",
        "--restore-file",
        str(s1 / "checkpoint_last.pt"),
        "--reset-optimizer",
        "--reset-dataloader",
        "--reset-meters",
    )
    printed = f"routing map fixed from the final stage-high gate: de->m{learned_map[0]}, fr->m{learned_map[1]}"
    assert printed in log2
    assert "NOT trained in this run" not in log2
    lines2 = progress(log2)
    assert any(numeric(line, "loss_gu") or numeric(line, "loss_hi") for line in lines2.values())
    assert not any(numeric(line, "disparity") for line in lines2.values())
    second = state(s2 / "checkpoint_last.pt")
    assert second["fixed_map"].tolist() == learned_map
    for key in ("decoder.slp_router.gate.weight", "decoder.slp_router.gate.bias"):
        assert torch.equal(first[key], second[key]), key  # the gate no longer trains
    assert not torch.equal(first["decoder.slp.universal.fc1.weight"], second["decoder.slp.universal.fc1.weight"])
    used = learned_map[0]
    assert not torch.equal(first[f"decoder.slp.pool.{used}.fc1.weight"], second[f"decoder.slp.pool.{used}.fc1.weight"])

    # a third run resumes stage all: the map stays as it was
    log3 = train(data_bin, s2, "--hlt-stage", "all", "--max-update", "14")
    assert "routing map (fixed)" in log3
    assert state(s2 / "checkpoint_last.pt")["fixed_map"].tolist() == learned_map


def switch_checks(log, n):
    lines = progress(log)
    high = [line for u, line in lines.items() if u <= n]
    after = [line for u, line in lines.items() if u > n]
    assert all(not numeric(line, "loss_gu") and not numeric(line, "loss_hi") for line in high)
    assert any(numeric(line, "loss_gu") or numeric(line, "loss_hi") for line in after)
    assert not any(numeric(line, "disparity") for line in after)
    assert all("epoch 001" in line for line in high) and all("epoch 002" in line for line in after)
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
    # a run that ends before stage all says so at its start, and the run that reaches it says when
    assert f"are NOT trained in this run: --max-update 5 ends it in stage high, which runs to update {n}" in before
    across = train(data_bin, resumed, "--high-stage-updates", str(n), "--max-update", "14")
    assert "Loaded checkpoint" in across and min(progress(across)) == 6
    assert f"wait for stage all (after update {n})" in across
    switch_checks(before + across, n)
    # the same losses as the run that was never stopped
    for u in range(6, 15):
        loss = lambda text: re.search(r" loss=([\d.]+)", progress(text)[u]).group(1)  # noqa: E731
        assert loss(across) == loss(straight), u

    # resume after N: stage all goes on with the same map
    mapped = state(resumed / "checkpoint_last.pt")["fixed_map"].tolist()
    after = train(data_bin, resumed, "--high-stage-updates", str(n), "--max-update", "16")
    assert re.search(r"HLT-MT stage all \(epoch \d+, update 14\): routing map \(fixed\)", after)
    assert state(resumed / "checkpoint_last.pt")["fixed_map"].tolist() == mapped


def test_stage_all_without_a_learned_map_is_refused(data_bin, tmp_path):
    done = run(
        [
            cli("fairseq-train"),
            *train_args(
                data_bin, *COMMON, "--save-dir", str(tmp_path / "x"), "--hlt-stage", "all", "--max-update", "3"
            ),
        ]
    )
    assert done.returncode != 0
    assert "hltmt_plugin: error: stage all needs the routing map learned in stage high" in done.stderr
    assert "Traceback" not in done.stderr


# ---- after --restore-file with --reset-optimizer: the stage line counts as fairseq counts
def test_stage_line_counts_updates_as_fairseq_after_a_reset(data_bin, trained, tmp_path):
    ckpt, _ = trained  # saved after 30 updates of stage high
    done = run(
        [
            cli("fairseq-train"),
            *train_args(
                data_bin,
                *LIKE_TRAINED,
                "--save-dir",
                str(tmp_path / "s"),
                "--restore-file",
                ckpt,
                *RESET,
                "--high-stage-updates",
                "2",
                "--max-update",
                "3",
            ),
        ]
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    assert "(epoch 1 @ 0 updates)" in log  # fairseq's own count restarts
    assert "HLT-MT stage high (epoch 1, update 0)" in log, log[-3000:]
    assert "fairseq's update count restarts at 0 (--reset-optimizer)" in log
    # --high-stage-updates counts fairseq's updates: stage all begins after update 2 of this run
    assert "HLT-MT stage all (epoch 2, update 2)" in log, log[-3000:]
    assert updates(log) == [1, 2, 3]


# ---- resuming with another --high-stage-updates
def test_resuming_after_the_switch_with_another_high_stage_updates_goes_on_as_the_run_that_switched(data_bin, tmp_path):
    straight = train_run(data_bin, tmp_path / "straight", "--high-stage-updates", "6", "--max-update", "12")
    assert straight.returncode == 0, straight.stderr[-2000:]
    reference = losses(straight.stdout + straight.stderr)

    save = tmp_path / "s"
    stopped = train_run(data_bin, save, "--high-stage-updates", "6", "--max-update", "8")  # two batches into epoch 2
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    kept = tmp_path / "at8"
    shutil.copytree(save, kept)

    # 7 falls after the epoch the switch began (at 6): fairseq's "dataloader mismatch" before
    resumed = train_run(data_bin, save, "--high-stage-updates", "7", "--max-update", "12")
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, out[-3000:]
    assert re.search(r"HLT-MT stage all \(epoch 2, update 8\): routing map \(fixed\)", out), out[-3000:]
    after = losses(out)
    assert sorted(after) == list(range(9, 13))
    assert all(after[u] == reference[u] for u in after), (after, reference)

    # a switch later than the checkpoint: stage high cannot come back
    later = train_run(data_bin, kept, "--high-stage-updates", "20", "--max-update", "24")
    assert later.returncode != 0 and "Traceback" not in later.stderr, later.stderr[-3000:]
    assert error_lines(later) == [
        "hltmt_plugin: error: the checkpoint is past the stage switch (its routing map is "
        "fixed; this run goes on from update 8), and --high-stage-updates 20 asks for stage "
        "high until update 20: resume with the --high-stage-updates of the run that wrote it "
        "(or any value up to 8: the switch is behind)"
    ], later.stderr[-2000:]


def test_resuming_in_stage_high_with_another_high_stage_updates(data_bin, tmp_path):
    save = tmp_path / "s"
    stopped = train_run(data_bin, save, "--high-stage-updates", "6", "--max-update", "4")  # stage high, mid-epoch
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    kept = tmp_path / "at4"
    shutil.copytree(save, kept)

    earlier = train_run(data_bin, save, "--high-stage-updates", "3", "--max-update", "10")
    assert earlier.returncode != 0 and "Traceback" not in earlier.stderr, earlier.stderr[-3000:]
    assert error_lines(earlier) == [
        "hltmt_plugin: error: the checkpoint was saved at update 4, in stage high (its "
        "routing map is not fixed yet), and --high-stage-updates 3 would have ended stage "
        "high before that: resume with the --high-stage-updates of the run that wrote it, "
        "or a larger one"
    ], earlier.stderr[-2000:]

    longer = train_run(data_bin, kept, "--high-stage-updates", "8", "--max-update", "10")
    out = longer.stdout + longer.stderr
    assert longer.returncode == 0, out[-3000:]
    assert "epoch 1 ends at update 8 (end of stage high)" in out
    assert re.search(r"HLT-MT stage all \(epoch 2, update 8\): routing map fixed from the final stage-high gate", out)
    assert sorted(losses(out)) == list(range(5, 11))


# ---- a run killed with SIGKILL resumes from checkpoint_last.pt as if never stopped
KILLED = [
    *SHORT_RUN,
    "--high-stage-updates",
    "6",
    "--save-interval-updates",
    "4",
    "--keep-interval-updates",
    "1",
    "--slp-hard-prob",
    "0.5",
]
ENV = {"OMP_NUM_THREADS": "1"}


def test_sigkill_then_resume_matches_an_uninterrupted_run(data_bin, tmp_path):
    straight = run(
        [cli("fairseq-train"), *train_args(data_bin, *KILLED, "--save-dir", str(tmp_path / "a"), "--max-update", "14")],
        env_extra=ENV,
    )
    assert straight.returncode == 0, straight.stderr[-2000:]
    reference = losses(straight.stdout + straight.stderr)
    assert sorted(reference) == list(range(1, 15))

    save = tmp_path / "b"
    cmd = [cli("fairseq-train"), *train_args(data_bin, *KILLED, "--save-dir", str(save), "--max-update", "14")]
    log_path = tmp_path / "killed.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, **ENV))
        deadline = time.time() + 240
        # kill once update 8's checkpoint is written (past the stage switch at 6), mid-run
        while time.time() < deadline and not re.search(r"Saved checkpoint .*@ 8 updates", open(log_path).read()):
            time.sleep(0.05)
        time.sleep(0.3)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    killed_log = open(log_path).read()
    assert proc.returncode == -signal.SIGKILL and "@ 8 updates" in killed_log
    done_before = max(losses(killed_log))
    assert done_before < 14

    resumed = run(cmd, env_extra=ENV)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    out = resumed.stdout + resumed.stderr
    assert "Loaded checkpoint" in out
    after = losses(out)
    first = min(after)
    assert first >= 9  # resumed from a checkpoint at update 8 or later, not from scratch
    for update in range(first, 15):
        assert after[update] == reference[update], update
    # the map fixed at update 6 in the killed run is the map the resumed run trains with
    assert re.search(r"HLT-MT stage all \(epoch \d+, update \d+\): routing map \(fixed\)", out)


# ---------------------------------------------------------------------------------------
# --train-only that trains nothing: one line before the first update


def test_train_only_gate_on_a_stage_all_model_is_one_line(data_bin, trained, tmp_path):
    ckpt, _ = trained
    done = run(
        [
            cli("fairseq-train"),
            *train_args(
                data_bin,
                *LIKE_TRAINED,
                "--save-dir",
                str(tmp_path / "s"),
                "--restore-file",
                ckpt,
                *RESET,
                "--hlt-stage",
                "all",
                "--train-only",
                "gate",
                "--max-update",
                "3",
            ),
        ]
    )
    assert_clear(
        done,
        "--train-only gate trains nothing in this run: the gate learns only in stage high; in stage "
        "all the routing map is fixed and the gate frozen",
    )
    assert updates(done.stdout) == []


def test_train_only_gate_across_the_stage_switch_is_one_line(data_bin, tmp_path):
    done = run(
        [
            cli("fairseq-train"),
            *train_args(
                data_bin,
                *LIKE_TRAINED,
                "--save-dir",
                str(tmp_path / "s"),
                "--high-stage-updates",
                "2",
                "--train-only",
                "gate",
                "--max-update",
                "4",
            ),
        ]
    )
    assert_clear(
        done, "--train-only gate trains nothing in stage all, which this run enters at update 2 (--high-stage-updates)"
    )
    assert updates(done.stdout) == []


def test_train_only_adapters_of_a_language_stage_high_never_trains_is_one_line(data_bin, tmp_path):
    done = run(
        [
            cli("fairseq-train"),
            *train_args(
                data_bin,
                *LIKE_TRAINED,
                "--save-dir",
                str(tmp_path / "s"),
                "--language-adapters",
                "--enable-lang-ids",
                "--adapter-langs",
                "en,de,fr,gu,hi",
                "--train-only",
                "adapters:hi",
                "--max-update",
                "2",
            ),
        ]
    )
    assert_clear(
        done,
        "--train-only adapters:hi trains nothing in this run: none of the directions of stage high "
        "(en-de,en-fr,de-en) goes through the adapters of hi (the encoder's are chosen by the source language)",
    )


@pytest.mark.parametrize("decoder_adapters", [False, True])
def test_train_only_adapters_of_a_target_that_only_encoder_adapters_serve_is_one_line(
    data_bin, tmp_path, decoder_adapters
):
    """En->X directions with encoder adapters alone: the adapters of a target language are never
    on a sentence's path (the encoder's are chosen by the source), so --train-only adapters:de
    would train nothing; with decoder adapters it trains them."""
    extra = ["--decoder-adapters"] if decoder_adapters else []
    done = run(
        [
            cli("fairseq-train"),
            *train_args(data_bin, *LIKE_TRAINED, "--save-dir", str(tmp_path / "s"), "--language-adapters", *extra),
            *["--enable-lang-ids", "--adapter-langs", "en,de,fr,gu,hi", "--train-only", "adapters:de"],
            *["--lang-pairs", "en-de,en-fr", "--max-update", "2"],
        ]
    )
    if decoder_adapters:
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        assert updates(done.stdout + done.stderr) == [1, 2]
        return
    assert_clear(
        done,
        "--train-only adapters:de trains nothing in this run: none of the directions of stage high (en-de,en-fr) "
        "goes through the adapters of de (the encoder's are chosen by the source language)",
    )


def test_a_high_resource_language_no_direction_translates_into_is_refused():
    """--high-resource-langs ja,de on directions that never reach ja: refused in one line naming
    ja and the targets there are (the rule --train-only follows)."""
    from hltmt_plugin.errors import HltmtConfigError
    from hltmt_plugin.tasks.stages import check_capacity_used

    check_capacity_used(["de", "cs"], ["en-de", "de-en", "en-cs"])
    with pytest.raises(
        HltmtConfigError, match=r"names ja, which no direction of --lang-pairs translates into.*\(cs,de,en\)"
    ):
        check_capacity_used(["ja", "de"], ["en-de", "de-en", "en-cs"])


def test_a_max_epoch_that_ends_the_run_at_the_stage_switch_says_so(data_bin, tmp_path):
    """--max-epoch 1 with --high-stage-updates 2 and --max-update 6: the first epoch is cut at
    update 2 and fairseq stops there; one warning line says that stage all does not run in this
    run and begins when a run resumes from its checkpoint (which it does). With --max-epoch 2
    the run goes on into stage all, and nothing is said."""
    line = [
        cli("fairseq-train"),
        *train_args(data_bin, *COMMON, "--high-stage-updates", "2", "--max-update", "6", "--max-epoch", "1"),
    ]
    save = ["--save-dir", str(tmp_path / "one")]
    done = run([*line, *save])
    assert done.returncode == 0, done.stderr[-2000:]
    said = [x for x in done.stderr.splitlines() if x.startswith("hltmt_plugin: warning: --max-epoch 1 ends this run")]
    assert len(said) == 1 and "stage all does not run in this run" in said[0], done.stderr[-2000:]
    assert max(updates(done.stdout)) == 2
    line[line.index("--max-epoch") + 1] = "2"
    resumed = run([*line, *save])  # the next run of a schedule: stage all from the checkpoint
    assert resumed.returncode == 0 and "stage all" in resumed.stdout + resumed.stderr, resumed.stderr[-2000:]
    done = run([*line, "--save-dir", str(tmp_path / "two")])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "stage all" in done.stdout + done.stderr and "ends this run" not in done.stderr
