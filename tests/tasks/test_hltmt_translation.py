"""The task (hltmt_plugin/tasks/hltmt_translation.py): which directions its stages sample, and the
options that cannot work; then the real path, fairseq-train / -generate / -validate /
-interactive in subprocesses on a DebMT-10 slice, scored with sacreBLEU, and bad options refused
with one clear line."""

import json
import os
import re
from collections import Counter

import numpy as np
import pytest

from conftest import PLUGIN, TEST_SIZE, assert_one_error_line, build, cli, run, train_args
from hltmt_plugin.errors import HltmtConfigError

LOW = {"en-gu", "en-hi", "gu-en"}  # a low-resource language on either side


def sampled_directions(task, epochs=(1, 2, 3)):
    """Directions of every sentence in the training batches of some epochs."""
    task.load_dataset("train", epoch=1)
    dataset = task.datasets["train"]
    counts = Counter()
    for epoch in epochs:
        itr = task.get_batch_iterator(
            dataset=dataset,
            max_tokens=1500,
            max_positions=(1024, 1024),
            seed=1,
            epoch=epoch,
            required_batch_size_multiple=8,
        )
        itr.next_epoch_itr(shuffle=True)
        for batch in itr.frozen_batches:
            for index in batch:
                counts[dataset.keys[dataset._get_dataset_and_index(index)[0]].split(":")[1]] += 1
    return counts, len(dataset.keys)


def test_stage_high_samples_no_low_resource_direction(data_bin):
    _, task, _ = build(
        data_bin, "--hlt-stage", "high", "--sampling-method", "temperature", "--sampling-temperature", "5"
    )
    counts, _ = sampled_directions(task)
    assert sum(counts.values()) > 1000  # hundreds of batches' worth of sentences
    assert set(counts) == {"en-de", "en-fr", "de-en"}, counts


def test_stage_all_samples_every_direction_with_the_temperature_shares(data_bin):
    _, task, _ = build(
        data_bin, "--hlt-stage", "all", "--sampling-method", "temperature", "--sampling-temperature", "5"
    )
    counts, _ = sampled_directions(task)
    sizes = {"en-de": 1500, "en-fr": 1500, "en-gu": 400, "en-hi": 800, "de-en": 1500, "gu-en": 400}
    assert set(counts) == set(sizes)
    raw = np.array([sizes[d] for d in sizes], dtype=float)
    expected = (raw / raw.sum()) ** (1 / 5)
    expected /= expected.sum()
    total = sum(counts.values())
    for direction, share in zip(sizes, expected):
        assert abs(counts[direction] / total - share) < 0.02, (direction, counts[direction] / total, share)


def test_stage_all_conflicts_with_a_one_run_schedule(data_bin):
    with pytest.raises(HltmtConfigError, match="cannot be combined with --high-stage-updates"):
        build(data_bin, "--hlt-stage", "all", "--high-stage-updates", "10")


def test_stage_high_needs_a_high_resource_direction(data_bin):
    with pytest.raises(HltmtConfigError, match="stage high has no direction to train"):
        build(data_bin, "--lang-pairs", "en-gu,gu-en,en-hi", "--hlt-stage", "high")


def test_stage_all_refuses_a_model_whose_gate_never_learned(data_bin):
    _, task, model = build(data_bin, "--hlt-stage", "all")
    with pytest.raises(HltmtConfigError, match="stage all needs the routing map learned in stage high"):
        task.begin_epoch(1, model)


def test_stage_all_fixes_the_map_from_the_gate_and_freezes_the_gate(data_bin):
    _, task, model = build(data_bin, "--hlt-stage", "all")
    model.slp_router.gate_steps.add_(1)  # as if stage high had trained it
    before = model.map_by_language()
    task.begin_epoch(1, model)
    assert model.slp_router.map_is_fixed and model.map_by_language() == before
    assert not any(p.requires_grad for p in model.slp_router.gate.parameters())


def test_options_the_stages_or_adapters_cannot_honour_are_refused(data_bin):
    import pytest

    from hltmt_plugin.errors import HltmtConfigError

    with pytest.raises(HltmtConfigError, match="RoundRobin does not allow"):
        build(data_bin, "--high-stage-updates", "5", "--sampling-method", "RoundRobin")
    with pytest.raises(HltmtConfigError, match="use --decoder-layerdrop 0"):
        build(data_bin, "--invertible-adapters", "--enable-lang-ids", "--decoder-layerdrop", "0.1")


# ---------------------------------------------------------------------------------------
# through fairseq's commands


def generate_args(data_bin, ckpt, src, tgt, *extra):
    return [
        data_bin,
        "--user-dir",
        PLUGIN,
        "--task",
        "hltmt_translation",
        "--langs",
        "en,de,fr,gu,hi",
        "--lang-pairs",
        "en-de,en-fr,en-gu,en-hi,de-en,gu-en",
        "--encoder-langtok",
        "tgt",
        "-s",
        src,
        "-t",
        tgt,
        "--path",
        ckpt,
        "--cpu",
        *extra,
    ]


@pytest.mark.parametrize("src, tgt", [("en", "de"), ("en", "gu")])
def test_generate_and_score_high_and_low_resource_directions(data_bin, trained, tmp_path, src, tgt):
    ckpt, _ = trained
    done = run(
        [
            cli("fairseq-generate"),
            *generate_args(
                data_bin,
                ckpt,
                src,
                tgt,
                "--gen-subset",
                "test",
                "--beam",
                "5",
                "--max-tokens",
                "3000",
                "--max-len-b",
                "40",
                "--remove-bpe",
                "sentencepiece",
            ),
        ]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    hyps, refs = {}, {}
    for line in done.stdout.splitlines():
        kind, _, rest = line.partition("-")
        if kind in ("D", "T") and "\t" in rest:
            fields = rest.split("\t")
            (hyps if kind == "D" else refs)[int(fields[0])] = fields[-1]
    assert len(hyps) == TEST_SIZE and hyps.keys() == refs.keys()
    (tmp_path / "hyp").write_text("".join(hyps[i] + "\n" for i in sorted(hyps)))
    (tmp_path / "ref").write_text("".join(refs[i] + "\n" for i in sorted(refs)))
    score = run([cli("sacrebleu"), str(tmp_path / "ref"), "-i", str(tmp_path / "hyp"), "-m", "bleu", "chrf", "-b"])
    assert score.returncode == 0, score.stderr
    bleu, chrf = json.loads(score.stdout)
    assert 0 <= bleu <= 100 and 0 <= chrf <= 100
    assert f"__{tgt}__" not in "".join(hyps.values())  # the language token is stripped from output


def test_validate_and_interactive_load_the_checkpoint(data_bin, trained):
    ckpt, _ = trained
    done = run(
        [
            cli("fairseq-validate"),
            *generate_args(data_bin, ckpt, "en", "de", "--valid-subset", "valid", "--max-tokens", "3000"),
        ]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"valid on 'valid' subset \| loss \d", done.stdout + done.stderr)
    done = run(
        [cli("fairseq-interactive"), *generate_args(data_bin, ckpt, "en", "fr", "--beam", "2", "--max-len-b", "10")],
        input="▁The ▁file ▁is ▁open\n",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"^H-0\t", done.stdout, re.M)


def test_a_direction_outside_the_training_directions_is_named_on_stderr_or_refused(data_bin, trained):
    """The rule of hltmt_plugin.directions in fairseq's own commands, with the study's committed
    model (English into ten languages): a source the model only produced, or a target it never
    produced, ends the command with one line (a zero-shot direction's line on stderr:
    tests/hub/test_translator.py)."""
    from hub_common import STUDY_MODEL

    folder = os.path.dirname(STUDY_MODEL)
    langs, targets = "en,fr,cs,de,fi,lv,et,ro,hi,tr,gu", ["fr", "cs", "de", "fi", "lv", "et", "ro", "hi", "tr", "gu"]
    pairs = ",".join(f"en-{t}" for t in targets)
    study = [
        folder,
        "--user-dir",
        PLUGIN,
        "--task",
        "hltmt_translation",
        "--langs",
        langs,
        "--lang-pairs",
        pairs,
        "--encoder-langtok",
        "tgt",
        "--path",
        STUDY_MODEL,
        "--cpu",
        "--beam",
        "2",
        "--max-len-b",
        "10",
        "--bpe",
        "sentencepiece",
        "--sentencepiece-model",
        os.path.join(folder, "spm.model"),
    ]
    done = run([cli("fairseq-interactive"), *study, "-s", "fr", "-t", "de"], input="Le fichier est ouvert.\n")
    assert_one_error_line(
        done,
        "hltmt_plugin: error: -s fr -t de: direction fr-de refused: the model never read fr (it was only a "
        f"target); the checkpoint was trained on {pairs}",
    )
    done = run([cli("fairseq-interactive"), *study, "-s", "de", "-t", "en"], input="Hallo Welt.\n")
    assert_one_error_line(
        done,
        f"hltmt_plugin: error: -s de -t en: direction de-en refused: the model never produced "
        f"en; the checkpoint was trained on {pairs}",
    )
    assert "H-" not in done.stdout
    done = run(
        [
            cli("fairseq-generate"),
            *generate_args(data_bin, trained[0], "de", "en", "--beam", "1", "--max-len-b", "3", "--max-tokens", "3000"),
        ]
    )
    assert done.returncode == 0 and "zero-shot" not in done.stderr, done.stderr[-3000:]  # trained: no word


def test_training_log_reports_the_pool(trained):
    _, log = trained
    assert "HLT-MT: pool of 2 modules for de,fr; universal layer for en,gu,hi" in log
    assert re.search(r"num_updates=30", log) or "num_updates 30" in log
    assert "Traceback" not in log


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--high-resource-langs", "de,xx"], "--high-resource-langs names xx, not in the language list"),
        (["--slp-pool-size", "0"], "--slp-pool-size must lie in [1, 2]"),
        (["--slp-pool-size", "5"], "--slp-pool-size must lie in [1, 2]"),
        (["--encoder-langtok", "src"], "--encoder-langtok tgt or from --encoder-langtok src --decoder-langtok"),
    ],
)
def test_bad_options_fail_with_one_clear_line(data_bin, tmp_path, extra, message):
    done = run(
        [
            cli("fairseq-train"),
            *train_args(
                data_bin,
                "--max-update",
                "1",
                "--save-dir",
                str(tmp_path),
                "--optimizer",
                "adam",
                "--lr",
                "1e-3",
                "--max-tokens",
                "1000",
                *extra,
            ),
        ]
    )
    assert done.returncode != 0
    assert "hltmt_plugin: error:" in done.stderr and message in done.stderr
    assert "Traceback" not in done.stderr
    assert not os.listdir(tmp_path)  # nothing written that looks like a result


@pytest.mark.parametrize(
    "extra, dropout, message",
    [
        (["--encoder-attention-heads", "3"], 0.0, "--encoder-attention-heads 3 does not divide --encoder-embed-dim"),
        ([], 5.0, "--dropout 5.0 is not a probability"),
    ],
)
def test_a_new_models_options_pass_the_one_model_check_before_fairseq_builds_it(data_bin, extra, dropout, message):
    """fairseq-train's new model (the task's build_model): an option fairseq's modules would
    assert on, or misuse, is one line naming it (hltmt_plugin/model_check.py)."""
    with pytest.raises(HltmtConfigError, match=message):
        build(data_bin, *extra, dropout=dropout)
