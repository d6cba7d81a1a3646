"""The skill modules (hltmt_plugin/skills/modules.py): only the active skills run, once per
group of rows, and get gradient; the skill FFN outputs their mean; each row of a mixed batch
follows its own direction; a dense checkpoint converts with identical outputs; a direction
absent from training combines existing skills, one absent from the matrix is an input error."""

import pytest
import torch

import hltmt_plugin  # noqa: F401  (registers the task, model and criterion with fairseq)
from conftest import DIRECTIONS, MADX, build, mixed_sample
from hltmt_plugin.compat.safe_loading import load_checkpoint
from hltmt_plugin.errors import HltmtInputError
from hltmt_plugin.skills import SkillFFN
from skills_common import GOOD, SKILLS, randomize_skills, skilled_model, write


@pytest.fixture(scope="module")
def skilled(data_bin):
    return skilled_model(data_bin)


def combo_calls(monkeypatch):
    calls = []
    original = SkillFFN.run_skill

    def counted(self, skill, x):
        calls.append((skill, x.size(1)))
        return original(self, skill, x)

    monkeypatch.setattr(SkillFFN, "run_skill", counted)
    return calls


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
    dense.load_state_dict(load_checkpoint(ckpt)["model"])
    args, _, model = build(data_bin, *SKILLS, *MADX)
    model.load_state_dict(load_checkpoint(ckpt)["model"], strict=True, model_cfg=args)
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


def test_a_direction_missing_from_the_matrix_is_an_input_error_naming_it(data_bin, tmp_path):
    _, task, model = build(data_bin, *SKILLS, "--skill-matrix", write(tmp_path, GOOD))
    with pytest.raises(HltmtInputError, match="direction de-fr has no entry in the skill matrix"):
        model(**mixed_sample(task, ["en-de", "de-fr"])["net_input"])
