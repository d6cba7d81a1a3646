"""Training runs that meet a full disk, or resume with another --high-stage-updates, through
the real fairseq-train.

A full disk is simulated with a file-size limit on the training process
(``RLIMIT_FSIZE``, with ``SIGXFSZ`` ignored): a write past the limit fails with ``EFBIG``
where a full disk fails with ``ENOSPC``; both are the ``OSError`` of ``write()`` inside
``torch.save``, and take the same way through the plugin's checkpoint writer (tested with
``ENOSPC`` itself in tests/compat/test_atomic_copy.py). No root, no special file system."""
import hashlib
import os
import re
import resource
import shutil
import signal

from conftest import cli, run, train_args

COMMON = ["--criterion", "hltmt_cross_entropy", "--label-smoothing", "0.1", "--optimizer", "adam", "--lr", "2e-3",
          "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "5", "--max-tokens", "1000", "--log-interval", "1",
          "--no-epoch-checkpoints", "--sampling-method", "temperature", "--sampling-temperature", "5", "--seed", "4",
          "--num-workers", "0"]


def train(data_bin, save, *extra, **kwargs):
    return run([cli("fairseq-train"), *train_args(data_bin, *COMMON, "--save-dir", str(save), *extra)], **kwargs)


def losses(text):
    return {int(m.group(2)): m.group(1) for m in re.finditer(r" loss=([\d.]+),.*?num_updates=(\d+)", text)}


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def file_size_limit(limit):
    def apply():  # in the child, before fairseq-train starts
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def error_lines(done):
    return [line for line in done.stderr.splitlines() if "error" in line.lower()]


# ---- a full disk during a save
def test_a_save_that_does_not_fit_is_one_line_leaves_nothing_partial_and_the_run_resumes(data_bin, tmp_path):
    save = tmp_path / "s"
    first = train(data_bin, save, "--max-update", "4", "--save-interval-updates", "4")
    assert first.returncode == 0, first.stderr[-2000:]
    before = sorted(os.listdir(save))
    last = digest(save / "checkpoint_last.pt")
    size = os.path.getsize(save / "checkpoint_last.pt")
    assert size > 4 << 20

    full = train(data_bin, save, "--max-update", "8", "--save-interval-updates", "4",
                 preexec_fn=file_size_limit(2 << 20))
    out = full.stdout + full.stderr
    assert full.returncode != 0 and "Traceback" not in out, out[-3000:]
    assert max(losses(out)) == 8  # it trained, then the save at update 8 did not fit
    said = re.fullmatch(
        rf"hltmt_plugin: error: could not write the checkpoint checkpoint_1_8\.pt \(([\d.]+) MB\) to the "
        rf"folder {re.escape(str(save))}: File too large; [\d.]+ MB free there; nothing partial was left and the "
        r"checkpoints already there are unchanged: make room there \(or give --save-dir on a disk with room\) and run "
        r"again: training resumes from the last checkpoint that was written", error_lines(full)[0])
    assert said and len(error_lines(full)) == 1, out[-2000:]
    assert abs(float(said.group(1)) - size / 2**20) < 0.02 * size / 2**20  # the size of the checkpoint
    assert sorted(os.listdir(save)) == before  # no temporary file, no partial checkpoint
    assert digest(save / "checkpoint_last.pt") == last

    again = train(data_bin, save, "--max-update", "8", "--save-interval-updates", "4")
    out = again.stdout + again.stderr
    assert again.returncode == 0, out[-2000:]
    assert "Loaded checkpoint" in out and min(losses(out)) == 5  # from update 4, the last checkpoint written
    assert (save / "checkpoint_1_8.pt").exists() and digest(save / "checkpoint_last.pt") != last


# ---- resuming with another --high-stage-updates
def test_resuming_after_the_switch_with_another_high_stage_updates_goes_on_as_the_run_that_switched(data_bin,
                                                                                                  tmp_path):
    straight = train(data_bin, tmp_path / "straight", "--high-stage-updates", "6", "--max-update", "12")
    assert straight.returncode == 0, straight.stderr[-2000:]
    reference = losses(straight.stdout + straight.stderr)

    save = tmp_path / "s"
    stopped = train(data_bin, save, "--high-stage-updates", "6", "--max-update", "8")  # two batches into epoch 2
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    kept = tmp_path / "at8"
    shutil.copytree(save, kept)

    # 7 falls after the epoch the switch began (at 6): fairseq's "dataloader mismatch" before
    resumed = train(data_bin, save, "--high-stage-updates", "7", "--max-update", "12")
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, out[-3000:]
    assert re.search(r"HLT-MT stage all \(epoch 2, update 8\): routing map \(fixed\)", out), out[-3000:]
    after = losses(out)
    assert sorted(after) == list(range(9, 13))
    assert all(after[u] == reference[u] for u in after), (after, reference)

    # a switch later than the checkpoint: stage high cannot come back
    later = train(data_bin, kept, "--high-stage-updates", "20", "--max-update", "24")
    assert later.returncode != 0 and "Traceback" not in later.stderr, later.stderr[-3000:]
    assert error_lines(later) == ["hltmt_plugin: error: the checkpoint is past the stage switch (its routing map is "
                                  "fixed; this run goes on from update 8), and --high-stage-updates 20 asks for stage "
                                  "high until update 20: resume with the --high-stage-updates of the run that wrote it "
                                  "(or any value up to 8: the switch is behind)"], later.stderr[-2000:]


def test_resuming_in_stage_high_with_another_high_stage_updates(data_bin, tmp_path):
    save = tmp_path / "s"
    stopped = train(data_bin, save, "--high-stage-updates", "6", "--max-update", "4")  # stage high, mid-epoch
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    kept = tmp_path / "at4"
    shutil.copytree(save, kept)

    earlier = train(data_bin, save, "--high-stage-updates", "3", "--max-update", "10")
    assert earlier.returncode != 0 and "Traceback" not in earlier.stderr, earlier.stderr[-3000:]
    assert error_lines(earlier) == ["hltmt_plugin: error: the checkpoint was saved at update 4, in stage high (its "
                                    "routing map is not fixed yet), and --high-stage-updates 3 would have ended stage "
                                    "high before that: resume with the --high-stage-updates of the run that wrote it, "
                                    "or a larger one"], earlier.stderr[-2000:]

    longer = train(data_bin, kept, "--high-stage-updates", "8", "--max-update", "10")
    out = longer.stdout + longer.stderr
    assert longer.returncode == 0, out[-3000:]
    assert "epoch 1 ends at update 8 (end of stage high)" in out
    assert re.search(r"HLT-MT stage all \(epoch 2, update 8\): routing map fixed from the final stage-high gate", out)
    assert sorted(losses(out)) == list(range(5, 11))
