"""Shared by the skill tests (tests/skills/test_*.py): the skill options, skills moved apart,
the skilled model, a skill-matrix file, and a short fairseq-train run with --enable-lang-ids."""

import json
import re

from conftest import LANGS, PAIRS, PLUGIN, build, cli, perturb, run

SKILLS = ["--skill-ffn", "--skill-attention", "--enable-lang-ids"]


def randomize_skills(model, scale=0.2, seed=0):
    """Move every skill away from the others (they start as copies of the dense layer)."""
    perturb(model, [".skill_ffn.", ".self_attn.skills."], scale, seed)


def skilled_model(data_bin):
    """(args, task, model) with skill FFNs and skill attention, the skills moved apart, in eval mode."""
    args, task, model = build(data_bin, *SKILLS)
    randomize_skills(model)
    model.eval()
    return args, task, model


def write(tmp_path, content):
    path = tmp_path / "matrix.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


GOOD = {
    "skills": ["generic", "en", "de", "fr", "gu", "hi"],
    "directions": {p: ["generic", p.split("-")[0]] for p in "en-de,en-fr,en-gu,en-hi,de-en,gu-en".split(",")},
}


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
