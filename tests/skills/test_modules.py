"""Encoder skills (SkillNet-X) in the model: only the active skills run and train, the mean over
them, per-row choice in mixed batches, dense-to-skill conversion of a trained checkpoint,
new directions from existing skills, beam search = full forward, the report and the errors;
then through the real fairseq-train on the DebMT-10 slice: skills from scratch, skills + SLP +
adapters converted from a trained dense checkpoint, and the one-line error for a bad skill
matrix."""

import json
import re

import pytest
import torch

from fairseq import checkpoint_utils

import hltmt_plugin  # noqa: F401  (safe checkpoint loading under torch >= 2.6)
from conftest import (
    LANGS,
    MADX,
    PAIRS,
    PLUGIN,
    assert_beam_equals_forward,
    build,
    cli,
    mixed_sample,
    perturb,
    randomize_adapters,
    run,
)
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.skills import SkillFFN, default_matrix, skill_report

DIRECTIONS = ["en-de", "en-gu", "de-en", "en-fr", "en-hi", "gu-en"]
SKILLS = ["--skill-ffn", "--skill-attention", "--enable-lang-ids"]


def randomize_skills(model, scale=0.2, seed=0):
    """Move every skill away from the others (they start as copies of the dense layer)."""
    perturb(model, [".skill_ffn.", ".self_attn.skills."], scale, seed)


@pytest.fixture(scope="module")
def skilled(data_bin):
    args, task, model = build(data_bin, *SKILLS)
    randomize_skills(model)
    model.eval()
    return args, task, model


def combo_calls(monkeypatch):
    calls = []
    original = SkillFFN.run_skill

    def counted(self, skill, x):
        calls.append((skill, x.size(1)))
        return original(self, skill, x)

    monkeypatch.setattr(SkillFFN, "run_skill", counted)
    return calls


def test_default_matrix_has_generic_source_language_and_english_direction_skills():
    m = default_matrix(["en", "de", "fr"])
    assert m.skills == ["generic", "en", "de", "fr", "to_en", "from_en"]
    assert m.directions["en-de"] == ["generic", "en", "from_en"]
    assert m.directions["de-en"] == ["generic", "de", "to_en"]
    assert m.directions["de-fr"] == ["generic", "de"]  # no English side: generic + source language
    assert len(m.directions) == 6


def test_only_active_skills_are_computed_once_per_group_and_get_gradient(data_bin, monkeypatch):
    _, task, model = build(data_bin, *SKILLS)
    randomize_skills(model)
    model.train()
    calls = combo_calls(monkeypatch)
    sample = mixed_sample(task, ["en-de", "de-en", "en-fr"])  # sources en, de: skill sets {g,en,from_en}, {g,de,to_en}
    model.zero_grad(set_to_none=True)
    model(**sample["net_input"])[0].sum().backward()
    per_layer = sorted(calls[: len(calls) // 2])
    assert per_layer == sorted([("generic", 2), ("en", 2), ("from_en", 2), ("generic", 1), ("de", 1), ("to_en", 1)])
    assert len(calls) == 2 * len(per_layer)  # two layers, nothing else ran
    for name, p in model.named_parameters():
        if ".skill_ffn.experts." in name:
            active = name.split(".experts.")[1].split(".")[0] in ("generic", "en", "de", "to_en", "from_en")
        elif ".self_attn.skills." in name:
            active = name.split(".skills.")[1].split(".")[0] in ("en", "de")
        else:
            continue
        assert (p.grad is not None and p.grad.abs().sum() > 0) == active, name


def test_the_skill_ffn_outputs_the_mean_of_the_active_skills(skilled):
    _, task, model = skilled
    layer = model.encoder.layers[1]
    ffn = layer.skill_ffn
    x = torch.randn(5, 3, 128)
    langs = task.langs
    src = torch.tensor([langs.index("en"), langs.index("gu"), langs.index("en")])
    tgt = torch.tensor([langs.index("de"), langs.index("en"), langs.index("hi")])
    with torch.no_grad(), model.encoder.rows.use(torch.stack([src, tgt], dim=1)):
        got = layer.fc2(layer.activation_fn(layer.fc1(x)))  # what fairseq's layer calls

    def direct(skill, rows):
        e = ffn.experts[skill]
        return e.fc2(torch.relu(e.fc1(rows)))

    with torch.no_grad():
        row0 = sum(direct(s, x[:, 0]) for s in ("generic", "en", "from_en")) / 3
        row1 = sum(direct(s, x[:, 1]) for s in ("generic", "gu", "to_en")) / 3
    torch.testing.assert_close(got[:, 0], row0, rtol=0, atol=1e-5)
    torch.testing.assert_close(got[:, 1], row1, rtol=0, atol=1e-5)
    with torch.no_grad():  # row 2 (en-hi) has row 0's skills, on its own input
        row2 = sum(direct(s, x[:, 2]) for s in ("generic", "en", "from_en")) / 3
    torch.testing.assert_close(got[:, 2], row2, rtol=0, atol=1e-5)
    assert not torch.allclose(got[:, 0], direct("generic", x[:, 0]), atol=1e-3)  # the skills differ


def test_each_row_of_a_mixed_batch_equals_that_row_alone_and_follows_its_source_language(skilled):
    _, task, model = skilled
    sample = mixed_sample(task, DIRECTIONS, seed=4)
    net = sample["net_input"]
    pad = task.source_dictionary.pad()
    with torch.no_grad():
        batch_out = model(**net)[0]
        for b in range(len(DIRECTIONS)):
            src = net["src_tokens"][b : b + 1]
            src = src[:, src.ne(pad).any(0)]
            alone = model(
                src, src.ne(pad).sum(1), net["prev_output_tokens"][b : b + 1], src_lang_id=net["src_lang_id"][b : b + 1]
            )[0]
            torch.testing.assert_close(batch_out[b : b + 1], alone, rtol=0, atol=1e-4)
        enc = model.encoder(net["src_tokens"], net["src_lengths"], src_lang_id=net["src_lang_id"])["encoder_out"][0]
        other = net["src_lang_id"].clone()
        other[2] = task.data_manager.lang_dict.index("hi")
        changed = model.encoder(net["src_tokens"], net["src_lengths"], src_lang_id=other)["encoder_out"][0]
    diff = (enc - changed).abs().amax(dim=(0, 2))
    assert diff[2] > 1e-3 and torch.all(diff[[0, 1, 3, 4, 5]] == 0)


def test_a_trained_dense_checkpoint_converts_to_skills_with_identical_outputs(data_bin, trained):
    ckpt, _ = trained
    _, task, dense = build(data_bin, "--enable-lang-ids")
    dense.load_state_dict(checkpoint_utils.load_checkpoint_to_cpu(ckpt)["model"])
    args, _, model = build(data_bin, *SKILLS, *MADX)
    model.load_state_dict(checkpoint_utils.load_checkpoint_to_cpu(ckpt)["model"], strict=True, model_cfg=args)
    state = model.state_dict()
    assert not any(k.endswith("fc1.weight") and "skill_ffn" not in k and k.startswith("encoder") for k in state)
    for skill in ("generic", "hi", "to_en"):
        assert torch.equal(
            state[f"encoder.layers.1.skill_ffn.experts.{skill}.fc1.weight"],
            dense.state_dict()["encoder.layers.1.fc1.weight"],
        )
    dense.eval()
    model.eval()
    sample = mixed_sample(task, DIRECTIONS)
    with torch.no_grad():
        expected = dense(**sample["net_input"])[0]
        got = model(**sample["net_input"])[0]
        net = sample["net_input"]
        row = net["src_tokens"][:1]
        row = row[:, row.ne(task.source_dictionary.pad()).any(0)]
        unpadded = dict(
            net,
            src_tokens=row,
            src_lengths=net["src_lengths"][:1],
            prev_output_tokens=net["prev_output_tokens"][:1],
            src_lang_id=net["src_lang_id"][:1],
        )
        got_alone, expected_alone = model(**unpadded)[0], dense(**unpadded)[0]  # no padding mask at all
    # float32 rounding only: the language attention runs torch's kernel, the dense one fairseq's
    # (on some CPUs they differ in the last bits of logits of size ~10: 2e-6)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(got_alone, expected_alone, rtol=0, atol=1e-5)
    randomize_skills(model, seed=1)
    with torch.no_grad():
        assert (model(**sample["net_input"])[0] - expected).abs().max() > 1e-3  # the test can fail


def test_a_direction_absent_from_training_combines_existing_skills(data_bin, monkeypatch):
    _, task, model = build(data_bin, "--skill-ffn", "--enable-lang-ids", "--lang-pairs", "en-de,de-en,en-fr")
    model.eval()
    calls = combo_calls(monkeypatch)
    sample = mixed_sample(task, ["de-fr", "fr-de"])
    with torch.no_grad():
        out = model(**sample["net_input"])[0]
    assert torch.isfinite(out).all()
    assert sorted(set(calls)) == [("de", 1), ("fr", 1), ("generic", 1)]  # no direction skill: generic + source


def test_beam_search_scores_equal_a_full_forward_pass_with_skills(data_bin):
    _, task, model = build(data_bin, *SKILLS, "--language-adapters", "--shared-adapters")
    randomize_skills(model)
    randomize_adapters(model, scale=0.2)
    model.eval()
    sample = mixed_sample(task, DIRECTIONS, seed=3)
    checked = assert_beam_equals_forward(task, model, sample, beam=3, with_lang_ids=True)
    assert checked == len(DIRECTIONS) * 3


def test_the_report_counts_parameters_per_skill_and_the_active_share(skilled):
    _, task, model = skilled
    plan = model.encoder.skill_layout
    report = skill_report(model, plan)
    d, f, layers = 128, 256, 2
    ffn = layers * (d * f + f + f * d + d)
    qkv = layers * 3 * (d * d + d)
    assert report["per_skill"]["ffn"] == {s: ffn for s in ["generic", *task.langs, "to_en", "from_en"]}
    assert report["per_skill"]["attention"] == {lang: qkv for lang in task.langs}
    total = sum(p.numel() for p in model.parameters())
    inactive = 5 * ffn + 4 * qkv  # en-de: 3 of 8 skill FFNs, 1 of 5 languages
    assert report["directions"]["en-de"]["active"] == total - inactive
    assert set(report["directions"]) == {"en-de", "en-fr", "en-gu", "en-hi", "de-en", "gu-en"}


def write(tmp_path, content):
    path = tmp_path / "matrix.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


GOOD = {
    "skills": ["generic", "en", "de", "fr", "gu", "hi"],
    "directions": {p: ["generic", p.split("-")[0]] for p in "en-de,en-fr,en-gu,en-hi,de-en,gu-en".split(",")},
}


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda m: m["directions"].update({"en-de": ["generic", "legal"]}), r'direction "en-de" names skill legal'),
        (lambda m: m["directions"].update({"en-xx": ["generic"]}), r'direction "en-xx" names language xx'),
        (lambda m: m["directions"].update({"gu-en": []}), r'direction "gu-en" activates no skill'),
        (lambda m: m["directions"].pop("de-en"), r"no entry for direction\(s\) de-en"),
        (lambda m: m.update({"skills": ["generic", "generic"]}), "lists a skill twice"),
    ],
)
def test_a_bad_skill_matrix_is_refused_naming_the_entry(data_bin, tmp_path, change, message):
    matrix = json.loads(json.dumps(GOOD))
    change(matrix)
    with pytest.raises(HltmtConfigError, match=message):
        build(data_bin, *SKILLS, "--skill-matrix", write(tmp_path, matrix))


def test_a_malformed_matrix_file_and_bad_options_are_refused(data_bin, tmp_path):
    with pytest.raises(HltmtConfigError, match="not valid JSON: .* at line 1"):
        build(data_bin, *SKILLS, "--skill-matrix", write(tmp_path, '{"skills": ["generic",'))
    with pytest.raises(HltmtConfigError, match="cannot read the file"):
        build(data_bin, *SKILLS, "--skill-matrix", str(tmp_path / "missing.json"))
    with pytest.raises(HltmtConfigError, match="add --enable-lang-ids"):
        build(data_bin, "--skill-ffn")
    with pytest.raises(HltmtConfigError, match=r"names layer\(s\) 5"):
        build(data_bin, *SKILLS, "--skill-layers", "5")
    with pytest.raises(HltmtConfigError, match="add --skill-ffn and/or --skill-attention"):
        build(data_bin, "--skill-matrix", write(tmp_path, GOOD))


def test_a_direction_missing_from_the_matrix_is_an_input_error_naming_it(data_bin, tmp_path):
    _, task, model = build(data_bin, *SKILLS, "--skill-matrix", write(tmp_path, GOOD))
    with pytest.raises(HltmtInputError, match="direction de-fr has no entry in the skill matrix"):
        model(**mixed_sample(task, ["en-de", "de-fr"])["net_input"])


def test_skill_layers_choose_the_layers_and_skills_off_change_nothing(data_bin):
    _, _, model = build(data_bin, *SKILLS, "--skill-layers", "1")
    assert hasattr(model.encoder.layers[1], "skill_ffn") and not hasattr(model.encoder.layers[0], "skill_ffn")
    assert isinstance(model.encoder.layers[0].fc1, torch.nn.Linear)
    _, _, plain = build(data_bin)
    assert not any("skill" in n for n in plain.state_dict())
    assert plain.encoder.skill_layout is None


def test_a_model_whose_matrix_file_is_gone_is_rebuilt_from_the_copy_in_its_arguments(data_bin, tmp_path):
    path = write(tmp_path, GOOD)
    args, task, model = build(data_bin, *SKILLS, "--skill-matrix", path)
    assert args.skill_matrix_saved["directions"]["de-en"] == ["generic", "de"]  # saved with the checkpoint's args
    import os

    os.remove(path)
    again = task.build_model(args)  # as fairseq-generate does from a checkpoint's arguments
    assert again.encoder.skill_layout.matrix.directions == model.encoder.skill_layout.matrix.directions
    args.skill_matrix_saved = None
    with pytest.raises(HltmtConfigError, match="cannot read the file"):
        task.build_model(args)


@pytest.mark.parametrize(
    "content, message",
    [
        (
            {"skills": ["generic", "a.b"], "directions": {"en-de": ["generic"]}},
            "skill name\\(s\\) 'a.b' cannot name a module",
        ),
        ({"skills": ["generic", "train"], "directions": {"en-de": ["generic"]}}, "'train' cannot name a module"),
        (b"\xff\xfe{", "not UTF-8 text"),
        ("[" * 100000 + "]" * 100000, "nested too deeply"),
    ],
)
def test_skill_names_and_files_that_cannot_work_are_one_line_errors(data_bin, tmp_path, content, message):
    path = tmp_path / "matrix.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(HltmtConfigError, match=message):
        build(data_bin, *SKILLS, "--skill-matrix", str(path))


def test_a_direction_with_several_language_skills_is_named_in_a_warning(data_bin, tmp_path, caplog):
    matrix = {
        "skills": ["generic", "en", "de", "fr", "gu", "hi"],
        "directions": {p: ["generic", *p.split("-")] for p in "en-de,en-fr,en-gu,en-hi,de-en,gu-en".split(",")},
    }
    build(data_bin, *SKILLS, "--skill-matrix", write(tmp_path, matrix))
    assert 'direction "en-de" activates 2 language skills (en,de)' in caplog.text


# ---------------------------------------------------------------------------------------
# through fairseq-train


def train(data_bin, save, *extra):
    return run(
        [
            cli("fairseq-train"),
            data_bin,
            "--user-dir",
            PLUGIN,
            "--task",
            "hltmt_translation",
            "--arch",
            "hltmt_transformer_tiny",
            "--langs",
            LANGS,
            "--lang-pairs",
            PAIRS,
            "--encoder-langtok",
            "tgt",
            "--high-resource-langs",
            "de,fr",
            "--slp-pool-size",
            "2",
            "--cpu",
            "--criterion",
            "label_smoothed_cross_entropy",
            "--label-smoothing",
            "0.1",
            "--optimizer",
            "adam",
            "--lr",
            "2e-3",
            "--lr-scheduler",
            "inverse_sqrt",
            "--warmup-updates",
            "4",
            "--max-tokens",
            "1500",
            "--save-dir",
            str(save),
            "--log-interval",
            "1",
            "--no-epoch-checkpoints",
            "--seed",
            "3",
            "--num-workers",
            "0",
            "--enable-lang-ids",
            "--max-update",
            "3",
            *extra,
        ]
    )


def losses(log):
    return [float(v) for v in re.findall(r"\| loss ([0-9.]+) \|", log)]


def test_fairseq_train_with_skills_trains_them_and_logs_the_report(data_bin, tmp_path):
    done = train(data_bin, tmp_path, "--skill-ffn", "--skill-attention")
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    assert "skills: encoder layers 0,1" in log
    assert "skill FFN: generic,en,de,fr,gu,hi,to_en,from_en: 131,840 each" in log
    assert re.search(r"en-de: skills generic\+en\+from_en; active [0-9,]+ of [0-9,]+ parameters", log)
    assert losses(log) and all(v == v and v < 20 for v in losses(log))
    state = checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "checkpoint_last.pt"))["model"]
    assert "encoder.layers.0.skill_ffn.experts.to_en.fc1.weight" in state
    assert "encoder.layers.0.fc1.weight" not in state and "encoder.layers.1.self_attn.q_proj.weight" not in state
    # the skills trained apart: en's FFN (every en-* direction) moved differently from hi's (no hi source)
    en = state["encoder.layers.0.skill_ffn.experts.en.fc1.weight"]
    hi = state["encoder.layers.0.skill_ffn.experts.hi.fc1.weight"]
    assert not torch.equal(en, hi)


def test_a_trained_dense_model_continues_with_skills_slp_and_adapters_together(data_bin, trained, tmp_path):
    done = train(
        data_bin,
        tmp_path,
        "--skill-ffn",
        "--skill-attention",
        "--language-adapters",
        "--shared-adapters",
        "--decoder-adapters",
        "--restore-file",
        trained[0],
        "--reset-optimizer",
        "--reset-dataloader",
        "--reset-meters",
        "--reset-lr-scheduler",
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    assert "every skill FFN initialised from the checkpoint's dense FFN" in log
    assert "every language's Q/K/V initialised from the checkpoint's dense ones" in log
    assert "adapters: base model" in log and "HLT-MT: pool of 2 modules" in log
    state = checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "checkpoint_last.pt"))["model"]
    dense = checkpoint_utils.load_checkpoint_to_cpu(trained[0])["model"]
    assert {
        "encoder.layers.1.skill_ffn.experts.generic.fc2.weight",
        "encoder.layers.1.self_attn.skills.gu.k_proj.weight",
        "encoder.layers.0.adapters.ffn.language_adapters.en.up.weight",
        "decoder.layers.1.adapters.ffn.shared_adapter.up.weight",
    } <= set(state)
    assert any(k.startswith("decoder.slp.") for k in state)
    # started from the dense weights, then trained: close to them but moved
    moved = state["encoder.layers.1.skill_ffn.experts.generic.fc2.weight"] - dense["encoder.layers.1.fc2.weight"]
    assert 0 < moved.abs().max() < 0.1
    assert losses(log) and losses(log)[0] < 10.8  # a trained model's loss (about 10.1), not a fresh one's (about 11)


def test_a_bad_skill_matrix_fails_with_one_line_naming_the_entry(data_bin, tmp_path):
    path = tmp_path / "matrix.json"
    path.write_text(json.dumps({"skills": ["generic", "en"], "directions": {"en-de": ["generic", "legal"]}}))
    done = train(data_bin, tmp_path, "--skill-ffn", "--skill-matrix", str(path))
    assert done.returncode != 0
    assert f'hltmt_plugin: error: --skill-matrix {path}: direction "en-de" names skill legal' in done.stderr
    assert "Traceback" not in done.stderr
