"""Skill options and the skill matrix (hltmt_plugin/skills/config.py): the default matrix, bad
matrices and files refused naming the entry (in-process and as fairseq-train's one line), a
model whose matrix file is gone rebuilt from its arguments, a warning for several language
skills."""

import json
import os

import pytest

from conftest import build
from hltmt_plugin.errors import HltmtConfigError, HltmtError, HltmtInputError
from hltmt_plugin.skills import default_matrix
from skills_common import GOOD, SKILLS, train, write


def test_default_matrix_has_generic_source_language_and_english_direction_skills():
    m = default_matrix(["en", "de", "fr"])
    assert m.skills == ["generic", "en", "de", "fr", "to_en", "from_en"]
    assert m.directions["en-de"] == ["generic", "en", "from_en"]
    assert m.directions["de-en"] == ["generic", "de", "to_en"]
    assert m.directions["de-fr"] == ["generic", "de"]  # no English side: generic + source language
    assert len(m.directions) == 6


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
    with pytest.raises(HltmtInputError, match=r"--skill-matrix .* is not valid JSON \(.*line 1"):
        build(data_bin, *SKILLS, "--skill-matrix", write(tmp_path, '{"skills": ["generic",'))
    with pytest.raises(HltmtInputError, match="cannot read --skill-matrix .*missing.json"):
        build(data_bin, *SKILLS, "--skill-matrix", str(tmp_path / "missing.json"))
    for record, why in (
        ({}, "is empty: a partial record"),
        ({"skills": "generic", "directions": {}}, "field 'skills'"),
    ):
        with pytest.raises(HltmtInputError, match=why):
            build(data_bin, *SKILLS, "--skill-matrix", write(tmp_path, record))
    with pytest.raises(HltmtConfigError, match="add --enable-lang-ids"):
        build(data_bin, "--skill-ffn")
    with pytest.raises(HltmtConfigError, match=r"names layer\(s\) 5"):
        build(data_bin, *SKILLS, "--skill-layers", "5")
    with pytest.raises(HltmtConfigError, match="add --skill-ffn and/or --skill-attention"):
        build(data_bin, "--skill-matrix", write(tmp_path, GOOD))


def test_a_model_whose_matrix_file_is_gone_is_rebuilt_from_the_copy_in_its_arguments(data_bin, tmp_path):
    path = write(tmp_path, GOOD)
    args, task, model = build(data_bin, *SKILLS, "--skill-matrix", path)
    assert args.skill_matrix_saved["directions"]["de-en"] == ["generic", "de"]  # saved with the checkpoint's args
    os.remove(path)
    again = task.build_model(args)  # as fairseq-generate does from a checkpoint's arguments
    assert again.encoder.skill_layout.matrix.directions == model.encoder.skill_layout.matrix.directions
    args.skill_matrix_saved = {**args.skill_matrix_saved, "directions": {"de-en": "generic"}}
    with pytest.raises(HltmtInputError, match="copy of the skill matrix: field 'directions.de-en' must be a list"):
        task.build_model(args)
    args.skill_matrix_saved = None
    with pytest.raises(HltmtInputError, match="cannot read --skill-matrix"):
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
        ("[" * 100000 + "]" * 100000, "nests more than 32 levels deep"),
    ],
)
def test_skill_names_and_files_that_cannot_work_are_one_line_errors(data_bin, tmp_path, content, message):
    path = tmp_path / "matrix.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(HltmtError, match=message):
        build(data_bin, *SKILLS, "--skill-matrix", str(path))


def test_a_direction_with_several_language_skills_is_named_in_a_warning(data_bin, tmp_path, caplog):
    matrix = {
        "skills": ["generic", "en", "de", "fr", "gu", "hi"],
        "directions": {p: ["generic", *p.split("-")] for p in "en-de,en-fr,en-gu,en-hi,de-en,gu-en".split(",")},
    }
    build(data_bin, *SKILLS, "--skill-matrix", write(tmp_path, matrix))
    assert 'direction "en-de" activates 2 language skills (en,de)' in caplog.text


def test_a_bad_skill_matrix_fails_with_one_line_naming_the_entry(data_bin, tmp_path):
    path = tmp_path / "matrix.json"
    path.write_text(json.dumps({"skills": ["generic", "en"], "directions": {"en-de": ["generic", "legal"]}}))
    done = train(data_bin, tmp_path, "--skill-ffn", "--skill-matrix", str(path))
    assert done.returncode != 0
    assert f'hltmt_plugin: error: --skill-matrix {path}: direction "en-de" names skill legal' in done.stderr
    assert "Traceback" not in done.stderr
