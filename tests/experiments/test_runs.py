"""hltmt_plugin.experiments.runs: what the experiment drivers read from a run (generate outputs,
validation curves) and the pictures they draw."""

import json

import pytest

from hltmt_plugin.experiments.runs import FLAT_DROP, convergence, draw_gate, read_gen

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


def test_read_gen_gives_hypotheses_and_references_in_sentence_order(tmp_path):
    gen = tmp_path / "en-de.gen"
    gen.write_text(
        "S-1\tsecond\nT-1\tzweite\nH-1\t-0.5\tzw eite\nD-1\t-0.5\tzweite\nS-0\tfirst\nT-0\terste\nD-0\t-0.2\terst\n",
        encoding="utf-8",
    )
    assert read_gen(gen) == (["erst", "zweite"], ["erste", "zweite"])


def test_read_gen_refuses_a_file_without_references_or_with_a_missing_hypothesis(tmp_path):
    empty, cut = tmp_path / "a.gen", tmp_path / "b.gen"
    empty.write_text("S-0\tx\n", encoding="utf-8")
    cut.write_text("T-0\ta\nD-0\t-1\ta\nT-1\tb\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no T- lines"):
        read_gen(empty)
    with pytest.raises(ValueError, match="1 sentences have no hypothesis"):
        read_gen(cut)


def test_read_gen_reads_with_the_one_text_rule(tmp_path):
    gen = tmp_path / "en-de.gen"
    gen.write_bytes(b"T-0\terste\nD-0\t-0.2\ter\x00ste\n")  # a hypothesis holding a NUL: not scored as it is
    with pytest.raises(ValueError, match=f"^{gen} line 2 holds a NUL character at position 12"):
        read_gen(gen)


def test_convergence_is_flat_falling_or_unknown_by_the_last_quarter():
    falling = [(100, 6.0), (200, 5.0), (300, 4.5), (400, 4.0)]
    assert convergence(falling)[0] == "falling"
    small = 4.0 * FLAT_DROP / 2
    flat = [(100, 6.0), (200, 5.0), (300, 4.0 + small), (400, 4.0)]
    assert convergence(flat) == ("flat", f"loss {4.0 + small:.3f} at 300 -> 4.000 at 400 (-0.5%)")
    assert convergence([(100, 5.0), (200, 4.0)])[0] == "unknown"
    assert convergence([(400, 6.0), (450, 5.0), (500, 4.0)])[0] == "unknown"  # nothing before the last quarter


def test_draw_gate_writes_a_picture_whole(tmp_path):
    path = tmp_path / "gate.png"
    draw_gate(str(path), [[0.7, 0.3], [0.2, 0.8]], ["de", "fr"], [0, 1], "gate")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["gate.png"]  # no temporary file left


SCORES = {
    "system": "hltmt",
    "seed": 1,
    "high": ["de"],
    "scores": {"en-de": {"bleu": 12.5, "chrf": 40.1, "sentences": 37}},
    "setting": {"updates": 10, "high_updates": 5, "lr": 0.003},
    "wall_seconds": 12,
}


@pytest.mark.parametrize(
    "text, why",
    [
        ("{", "is not valid JSON"),
        ("{}", "is empty: a partial record"),
        (json.dumps({**SCORES, "seed": "1"}), "field 'seed' must be a whole number"),
        (json.dumps({**SCORES, "scores": {"en-de": {"bleu": "12"}}}), "field 'scores.en-de' lacks 'chrf'"),
        (json.dumps({**SCORES, "setting": {"updates": 10}}), "field 'setting' lacks 'high_updates'"),
        ("[" * 50_000, "nests more than"),
    ],
)
def test_a_scores_record_is_read_checked_in_one_line(tmp_path, text, why):
    from hltmt_plugin.errors import HltmtInputError
    from hltmt_plugin.experiments.runs import read_scores

    path = tmp_path / "scores.json"
    path.write_text(json.dumps(SCORES))
    assert read_scores(path) == SCORES
    path.write_text(text)
    with pytest.raises(HltmtInputError, match=why) as refused:
        read_scores(path)
    assert str(path) in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize(
    "gate, why",
    [
        ({"langs": ["de"], "probs": [[0.7, 0.3]]}, "lacks 'map'"),
        ({"langs": ["de", "fr"], "probs": [[0.7, 0.3]], "map": [0, 1]}, "one row of one width per language"),
        ({"langs": ["de"], "probs": [[0.7, 1.3]], "map": [0]}, r"must be between 0 and 1, got 1.3"),
        ({"langs": ["de"], "probs": [[0.7, 0.3]], "map": [2]}, "names a module beyond the gate's 2"),
    ],
)
def test_a_gate_record_is_read_checked_in_one_line(tmp_path, gate, why):
    from hltmt_plugin.errors import HltmtInputError
    from hltmt_plugin.experiments.runs import read_gate

    path = tmp_path / "gate.json"
    path.write_text(json.dumps({"langs": ["de"], "probs": [[0.7, 0.3]], "map": [0]}))
    assert read_gate(path)["map"] == [0]
    path.write_text(json.dumps(gate))
    with pytest.raises(HltmtInputError, match=why):
        read_gate(path)
