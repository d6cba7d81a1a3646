"""hltmt-average-checkpoints: the mean of checkpoints of stage all (their routing map kept);
checkpoints whose map or gate differ, of other options, or holding code, and options that cannot
work, refused in one line; and a map averaged across the stage switch by another tool refused
when the checkpoint is loaded. The checks share one training run (``two_stages``) on both sides
of its stage switch."""

import os
import re

import pytest
import torch

import hltmt_plugin  # noqa: F401  (registers the task, model and criterion with fairseq)
from checkpoint_common import DECODE, craft
from conftest import cli, run, train_args
from hltmt_plugin.compat.safe_loading import load_state

AVERAGE_RUN = [
    "--criterion",
    "hltmt_cross_entropy",
    "--optimizer",
    "adam",
    "--lr",
    "2e-3",
    "--max-tokens",
    "1000",
    "--num-workers",
    "0",
    "--seed",
    "5",
    "--no-epoch-checkpoints",
    "--high-stage-updates",
    "5",
    "--max-update",
    "8",
    "--save-interval-updates",
    "2",
    "--keep-interval-updates",
    "-1",
]


@pytest.fixture(scope="module")
def two_stages(data_bin, tmp_path_factory):
    """Checkpoints of one run on both sides of its stage switch (update 5): 1_2 and 1_4 of stage
    high (the map open), 2_6 and 2_8 of stage all (the map fixed)."""
    save = tmp_path_factory.mktemp("two_stages")
    done = run([cli("fairseq-train"), *train_args(data_bin, *AVERAGE_RUN, "--save-dir", str(save))])
    assert done.returncode == 0, done.stderr[-3000:]
    return save


def weights(path):
    return load_state(path)["model"]


def average_cmd(*args):
    return run([cli("hltmt-average-checkpoints"), *map(str, args)])


def one_error(done):
    out = done.stdout + done.stderr
    assert done.returncode != 0 and "Traceback" not in out, out[-3000:]
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, out[-3000:]
    return errors[0]


@pytest.mark.fast
def test_averaging_checkpoints_of_stage_all_gives_their_mean_and_keeps_the_map(data_bin, two_stages, tmp_path):
    out = tmp_path / "averaged.pt"
    done = average_cmd("--inputs", two_stages, "--num-update-checkpoints", "2", "--output", out)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        f"averaged 2 checkpoint(s) into {out}: {two_stages}/checkpoint_2_8.pt, {two_stages}/checkpoint_2_6.pt"
        in done.stdout
    )
    a, b, avg = weights(two_stages / "checkpoint_2_8.pt"), weights(two_stages / "checkpoint_2_6.pt"), weights(out)
    for key in ("decoder.slp.universal.fc1.weight", "encoder.embed_tokens.weight"):
        torch.testing.assert_close(avg[key], ((a[key].double() + b[key].double()) / 2).float(), rtol=0, atol=1e-7)
        assert not torch.equal(a[key], b[key])
    assert torch.equal(avg["decoder.slp_router.routing_map"], a["decoder.slp_router.routing_map"])
    decoded = run([cli("fairseq-generate"), data_bin, *DECODE, "--path", str(out), "--gen-subset", "test"])
    assert decoded.returncode == 0, decoded.stderr[-3000:]
    printed = re.search(r"HLT-MT routing map \(fixed, from the checkpoint\): (de->m\d, fr->m\d)", decoded.stderr)
    last = run(
        [
            cli("fairseq-generate"),
            data_bin,
            *DECODE,
            "--path",
            str(two_stages / "checkpoint_2_8.pt"),
            "--gen-subset",
            "test",
        ]
    )
    assert printed and printed.group(1) in last.stderr, decoded.stderr[-2000:]


def older_form(path, out):
    """``path`` as an earlier version wrote it: the router's tensors on the pool, the map as indices."""
    state = load_state(path)
    model = state["model"]
    older = {"high_lang_names": "decoder.high_langs", "routing_map": "decoder.slp.fixed_map_onehot"}
    for key in [k for k in model if k.startswith("decoder.slp_router.")]:
        name = key[len("decoder.slp_router.") :]
        model[older.get(name, "decoder.slp." + name)] = model.pop(key)
    onehot = model.pop("decoder.slp.fixed_map_onehot")
    model["decoder.slp.fixed_map"] = torch.where(onehot[:, -1] > 0, -1, onehot.argmax(dim=-1))
    torch.save(state, out)
    return out


def previous_names(path, out):
    """``path`` with the routing map and the map's language names under the router's previous
    names (decoder.slp_router.fixed_map_onehot, decoder.slp_router.high_langs)."""
    state = load_state(path)
    model = state["model"]
    model["decoder.slp_router.fixed_map_onehot"] = model.pop("decoder.slp_router.routing_map")
    model["decoder.slp_router.high_langs"] = model.pop("decoder.slp_router.high_lang_names")
    torch.save(state, out)
    return out


def test_a_checkpoint_in_an_older_form_averages_with_one_of_today(two_stages, tmp_path):
    old = older_form(two_stages / "checkpoint_2_6.pt", tmp_path / "old.pt")
    out = tmp_path / "averaged.pt"
    done = average_cmd("--inputs", old, two_stages / "checkpoint_2_8.pt", "--output", out)
    assert done.returncode == 0, done.stderr[-3000:]
    avg, b = weights(out), weights(two_stages / "checkpoint_2_8.pt")
    assert torch.equal(avg["decoder.slp_router.routing_map"], b["decoder.slp_router.routing_map"])
    assert not any(k.startswith(("decoder.slp.gate", "decoder.slp.fixed_map")) for k in avg)
    stage_high = older_form(two_stages / "checkpoint_1_4.pt", tmp_path / "old1.pt")
    mixed = average_cmd("--inputs", two_stages / "checkpoint_2_6.pt", stage_high, "--output", out)
    assert "their routing maps (decoder.slp_router.routing_map) differ" in one_error(mixed)
    previous = previous_names(two_stages / "checkpoint_2_6.pt", tmp_path / "previous.pt")
    done = average_cmd("--inputs", two_stages / "checkpoint_2_8.pt", previous, "--output", out)
    assert done.returncode == 0, done.stderr[-3000:]
    avg, a = weights(out), weights(two_stages / "checkpoint_2_6.pt")
    assert sorted(avg) == sorted(b) and torch.equal(
        avg["decoder.slp_router.routing_map"], b["decoder.slp_router.routing_map"]
    )
    key = "decoder.slp.universal.fc1.weight"
    torch.testing.assert_close(avg[key], ((a[key].double() + b[key].double()) / 2).float(), rtol=0, atol=1e-7)


@pytest.mark.parametrize(
    "pair, why",
    [
        (
            ("checkpoint_1_4.pt", "checkpoint_2_6.pt"),
            r"their routing maps \(decoder\.slp_router\.routing_map\) differ "
            r"\(.*\): checkpoints from both sides of the stage switch",
        ),
        (
            ("checkpoint_1_2.pt", "checkpoint_1_4.pt"),
            r"the gate trained for \d+ and \d+ steps \(decoder\.slp_router\.gate_steps\): "
            r"checkpoints of stage high",
        ),
    ],
)
def test_averaging_checkpoints_whose_map_or_gate_differ_is_refused(two_stages, tmp_path, pair, why):
    out = tmp_path / "averaged.pt"
    first, second = (two_stages / name for name in pair)
    line = one_error(average_cmd("--inputs", first, second, "--output", out))
    assert re.fullmatch(
        rf"hltmt-average-checkpoints: error: cannot average {re.escape(str(first))} and {re.escape(str(second))}: "
        rf"{why}.*",
        line,
    ), line
    assert not out.exists() and os.listdir(tmp_path) == []


def test_a_map_averaged_across_the_stage_switch_by_other_tools_is_refused_on_load(data_bin, two_stages, tmp_path):
    """What fairseq's scripts/average_checkpoints.py computes (the sum, then ``//`` for integer
    tensors and ``/`` for the others): once [-1, -1] and [1, 1] made the map [0, 0]."""
    states = [load_state(two_stages / name) for name in ("checkpoint_1_4.pt", "checkpoint_2_6.pt")]
    model = {k: sum(s["model"][k] for s in states) for k in states[0]["model"]}
    states[0]["model"] = {k: v / 2 if v.is_floating_point() else v // 2 for k, v in model.items()}
    path = tmp_path / "fairseq_average.pt"
    torch.save(states[0], path)
    line = one_error(run([cli("fairseq-generate"), data_bin, *DECODE, "--path", str(path), "--gen-subset", "test"]))
    assert re.fullmatch(
        r"hltmt_plugin: error: the checkpoint's routing map \(decoder\.slp_router\.routing_map\) is no map "
        r"a training stage wrote: the row of (de|fr) is \[\d, \d, \d\], not a single 1 .*were "
        r"checkpoints with different maps averaged \(e\.g\. from both sides of the stage switch\)\?.*",
        line,
    ), line


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--num-update-checkpoints", "9"],
            r"holds 4 checkpoint\(s\) named checkpoint_\\d\+_\(\\d\+\)\\.pt, fewer than the 9 "
            r"asked for",
        ),
        (
            ["--num-update-checkpoints", "2", "--checkpoint-upper-bound", "1"],
            r"holds 0 checkpoint\(s\) .* up to 1, fewer",
        ),
        (["--num-epoch-checkpoints", "0"], r"--num-epoch-checkpoints must be at least 1, got 0"),
        (
            ["--checkpoint-upper-bound", "4"],
            r"--checkpoint-upper-bound needs --num-epoch-checkpoints or "
            r"--num-update-checkpoints",
        ),
    ],
)
def test_averaging_options_that_cannot_work_are_one_line(two_stages, tmp_path, args, message):
    line = one_error(average_cmd("--inputs", two_stages, *args, "--output", tmp_path / "a.pt"))
    assert re.search(message, line), line
    assert os.listdir(tmp_path) == []


def test_averaging_a_checkpoint_holding_code_runs_none_of_it(trained, two_stages, tmp_path):
    """The averaging command loads as fairseq's loader does under the plugin."""
    ckpt, marker, option = craft(trained[0], tmp_path, "eval_str_list")
    line = one_error(average_cmd("--inputs", ckpt, trained[0], "--output", tmp_path / "a.pt"))
    assert line.startswith(
        f"hltmt-average-checkpoints: error: refused to load checkpoint {ckpt}: its stored option {option}"
    ), line
    assert not marker.exists() and not (tmp_path / "a.pt").exists()


def test_averaging_checkpoints_trained_with_other_options_is_refused(two_stages, tmp_path):
    state = load_state(two_stages / "checkpoint_2_6.pt")
    state["cfg"]["model"].high_resource_langs = "fr,de"  # the same weights would mean the other language
    state["cfg"]["model"].hltmt_compat["model"]["high_resource_langs"] = "fr,de"  # and the record says so
    other = tmp_path / "other.pt"
    torch.save(state, other)
    line = one_error(average_cmd("--inputs", two_stages / "checkpoint_2_8.pt", other, "--output", tmp_path / "a.pt"))
    assert line == (
        f"hltmt-average-checkpoints: error: cannot average {two_stages / 'checkpoint_2_8.pt'} and {other}: they were "
        "trained on other data or options (--high-resource-langs: first de,fr, second fr,de), so the same "
        "weight means something else in each"
    ), line
    assert sorted(os.listdir(tmp_path)) == ["other.pt"]


def test_a_checkpoint_whose_stored_options_were_edited_is_refused(two_stages, tmp_path):
    state = load_state(two_stages / "checkpoint_2_6.pt")
    state["cfg"]["model"].decoder_ffn_embed_dim += 1  # the options no longer fit the weights
    other = tmp_path / "other.pt"
    torch.save(state, other)
    line = one_error(average_cmd("--inputs", two_stages / "checkpoint_2_8.pt", other, "--output", tmp_path / "a.pt"))
    assert (
        f"checkpoint {other}: the checkpoint's stored options were changed after it was written "
        "(--decoder-ffn-embed-dim: written 256, now 257)" in line
    ), line
    assert sorted(os.listdir(tmp_path)) == ["other.pt"]


def test_a_checkpoint_named_twice_is_refused(two_stages, tmp_path):
    ckpt = two_stages / "checkpoint_2_8.pt"
    (tmp_path / "link.pt").symlink_to(ckpt)
    for again in (ckpt, tmp_path / "link.pt"):
        line = one_error(average_cmd("--inputs", ckpt, again, "--output", tmp_path / "a.pt"))
        assert "it would count twice in the average" in line, line
    assert sorted(os.listdir(tmp_path)) == ["link.pt"]


def test_what_help_says_of_the_output_is_what_the_command_does(two_stages, tmp_path):
    """--help: --output may lie in the folder --inputs names, or be one of the input files; and each
    example of --help is a command line the parser takes (no output refused as an input's)."""
    import shlex

    from hltmt_plugin.cli.average_checkpoints import build_parser

    parser = build_parser()
    text = " ".join(parser.format_help().split())
    assert "it may lie in the folder --inputs names or be one of the input files" in text
    examples = [line.split(None, 1)[1] for line in parser.description.splitlines() if line.strip().startswith("hltmt-")]
    assert len(examples) == 2
    (tmp_path / "ckpt").mkdir()
    for name in ("checkpoint_2_6.pt", "checkpoint_2_8.pt"):
        os.link(two_stages / name, tmp_path / "ckpt" / name)  # the run's files, read only here
    for name in ("checkpoint9.pt", "checkpoint10.pt"):  # the second example's files: they must exist to parse
        (tmp_path / "ckpt" / name).write_bytes(b"")
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        for example in examples:
            parser.parse_args(shlex.split(example))  # an output refused at parsing exits here
    finally:
        os.chdir(cwd)
    for name in ("checkpoint9.pt", "checkpoint10.pt"):
        os.unlink(tmp_path / "ckpt" / name)
    inside = tmp_path / "ckpt" / "averaged.pt"
    done = average_cmd("--inputs", tmp_path / "ckpt", "--num-update-checkpoints", "2", "--output", inside)
    assert done.returncode == 0 and inside.is_file(), done.stderr[-2000:]
    first, second = tmp_path / "ckpt" / "checkpoint_2_8.pt", tmp_path / "ckpt" / "checkpoint_2_6.pt"
    os.unlink(first)
    (tmp_path / "ckpt" / "checkpoint_2_8.pt").write_bytes((two_stages / "checkpoint_2_8.pt").read_bytes())
    done = average_cmd("--inputs", first, second, "--output", first)  # the output is one of the inputs
    assert done.returncode == 0, done.stderr[-2000:]
    a, b, avg = weights(two_stages / "checkpoint_2_8.pt"), weights(second), weights(first)
    key = "decoder.slp.universal.fc1.weight"
    torch.testing.assert_close(avg[key], ((a[key].double() + b[key].double()) / 2).float(), rtol=0, atol=1e-7)
    torch.testing.assert_close(weights(inside)[key], avg[key], rtol=0, atol=0)
