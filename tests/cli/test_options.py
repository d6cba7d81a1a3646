"""The options reference: docs/options.md is what `hltmt-options --markdown` writes from the code,
and every option fairseq's parser gets from the plugin is in it and in `hltmt-options`."""

import os

import pytest

from conftest import PLUGIN, ROOT, cli, run

REFERENCE = os.path.join(ROOT, "docs", "options.md")


def parser_options(task, arch, criterion):
    """Every --option of fairseq-train's real parser once it knows the task, model and criterion."""
    from fairseq import options

    parser = options.get_training_parser()
    options.parse_args_and_arch(
        parser,
        ["DATA", "--user-dir", PLUGIN, "--task", task, "--arch", arch, "--criterion", criterion],
        parse_known=True,
    )
    return {s for action in parser._actions for s in action.option_strings if s.startswith("--")}


@pytest.fixture(scope="module")
def plugin_options():
    """What the plugin adds: fairseq's parser with the plugin's task, model and criterion, less
    the same parser with their fairseq parents."""
    ours = parser_options("hltmt_translation", "hltmt_transformer", "hltmt_cross_entropy")
    parents = parser_options("translation_multi_simple_epoch", "transformer", "label_smoothed_cross_entropy")
    added = ours - parents
    assert {
        "--hlt-stage",
        "--slp-pool-size",
        "--language-adapters",
        "--skill-ffn",
        "--train-only",
        "--disparity-weight",
        "--sampling-temperature-epochs",
        "--pretrained-xlmr-checkpoint",
    } <= added
    return added


@pytest.mark.fast
def test_reference_is_up_to_date():
    done = run([cli("hltmt-options"), "--check", REFERENCE])
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_plugin_option_is_in_the_reference_and_the_command(plugin_options):
    with open(REFERENCE, encoding="utf-8") as f:
        reference = f.read()
    listed = run([cli("hltmt-options")])
    assert listed.returncode == 0, listed.stderr
    for option in sorted(plugin_options):
        assert f"`{option}" in reference, f"{option} is missing from docs/options.md"
        assert f"  {option}" in listed.stdout, f"{option} is missing from hltmt-options"


def test_defaults_and_help_come_from_the_code():
    from hltmt_plugin.cli import options
    from hltmt_plugin.pool.config import SlpConfig

    text = options.markdown()
    help_text = " ".join(SlpConfig.__dataclass_fields__["slp_pool_size"].metadata["help"].split())
    assert f"| `--slp-pool-size N` | `3` | {help_text} |" in text
    assert "| `--disparity-batch-size X` | `4096` |" in text
    assert "| `hltmt_transformer_xlmr_base` | `hltmt_transformer` |" in text


def test_a_stale_reference_is_one_line_and_exit_1(tmp_path):
    stale = tmp_path / "options.md"
    with open(REFERENCE, encoding="utf-8") as f:
        stale.write_text(f.read().replace("`--slp-pool-size N` | `3`", "`--slp-pool-size N` | `4`"))
    quiet = {"PYTHONWARNINGS": ""}  # as a user runs it: fairseq's start-up notices filtered
    done = run([cli("hltmt-options"), "--check", str(stale)], env_extra=quiet)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"hltmt-options: error: {stale} is out of date with the code: write it again with "
        f"hltmt-options --markdown > {stale}"
    ]
    done = run([cli("hltmt-options"), "--check", str(tmp_path / "missing.md")], env_extra=quiet)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert "argument --check: " in done.stderr and "missing.md: no such file" in done.stderr  # refused at parsing


def test_fairseq_help_leaves_the_plugins_options_out_as_the_reference_says():
    """docs/options.md explains why fairseq-train --help does not list the plugin's options (fairseq
    stops at --help before it adds any task's or model's options) and points to hltmt-options;
    when a fairseq lists them, this fails and the explanation must go."""
    done = run(
        [
            cli("fairseq-train"),
            "--user-dir",
            PLUGIN,
            "--task",
            "hltmt_translation",
            "--arch",
            "hltmt_transformer",
            "--help",
        ]
    )
    assert done.returncode == 0 and "--task" in done.stdout
    assert "--slp-pool-size" not in done.stdout and "--hlt-stage" not in done.stdout
    with open(REFERENCE, encoding="utf-8") as f:
        assert "`--help` prints and exits during that first parse" in " ".join(f.read().split())
