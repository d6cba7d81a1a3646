"""hltmt_plugin.hub.hf_engine: an export to transformers served with the translator's contract,
side by side with its checkpoint (the study's HLT-MT): the same lines, routes, lengths and
scores, mixed directions in one call, the same refusals; through hltmt-translate too."""

import json
import os

import pytest

from conftest import ROOT, cli, run

pytest.importorskip("transformers")

from hltmt_plugin.errors import HltmtConfigError  # noqa: E402
from hltmt_plugin.hub import HltmtTranslator  # noqa: E402

STUDY = os.path.join(ROOT, "docs", "results", "cpu-study")
CHECKPOINT = os.path.join(STUDY, "models", "hltmt.pt")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from hltmt_plugin.export.transformers import export

    out = str(tmp_path_factory.mktemp("hf_engine") / "hltmt")
    export(CHECKPOINT, out)
    return out


def items():
    found = []
    for tgt in ("de", "fi", "fr", "gu", "ro"):
        with open(os.path.join(STUDY, "refs", f"en-{tgt}.en"), encoding="utf-8") as f:
            found += [("en", tgt, line.rstrip("\n")) for line in list(f)[:4]]
    return found[::2] + found[1::2]  # the directions mixed


def test_the_export_serves_the_checkpoints_lines_routes_and_scores(folder):
    served = HltmtTranslator.load(folder)
    assert type(served).__name__ == "HfTranslator" and served.engine == "transformers"
    mt = HltmtTranslator.load(CHECKPOINT, device="cpu")
    bad = [("en", "xx", "The file."), ("de", "en", "Die Datei."), ("en", "de", "  ")]
    expected = mt.translate_batch(items() + bad, beam=5, details=True, errors="keep")
    found = served.translate_batch(items() + bad, beam=5, details=True, errors="keep")
    assert [r.text for r in found] == [r.text for r in expected]
    assert [r.routing for r in found] == [r.routing for r in expected]
    assert [r.tokens for r in found] == [r.tokens for r in expected]
    assert [r.error for r in found] == [r.error for r in expected] and found[-1].error is not None
    for mine, theirs in zip(found[: len(items())], expected):
        assert mine.score == pytest.approx(theirs.score, abs=2e-3)
    assert {r.routing["slp"] for r in found[: len(items())]} == {"m0", "m1", "m2", "universal"}


def test_options_of_another_engine_are_refused_in_one_line(folder):
    with pytest.raises(
        HltmtConfigError, match="compute type 'int8': --compute-type applies to CTranslate2's exports only"
    ):
        HltmtTranslator.load(folder, compute_type="int8")
    with pytest.raises(HltmtConfigError, match="carries its own sentencepiece model"):
        HltmtTranslator.load(folder, spm=os.path.join(STUDY, "models", "spm.model"))


def test_hltmt_translate_serves_the_folder(folder, tmp_path):
    rows = tmp_path / "in.tsv"
    rows.write_text("".join(f"{s}\t{t}\t{x}\n" for s, t, x in items()[:4]), encoding="utf-8")
    done = run([cli("hltmt-translate"), "--checkpoint", folder, "--input", str(rows), "--json"])
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    expected = HltmtTranslator.load(CHECKPOINT, device="cpu").translate_batch(items()[:4], beam=5)
    assert [line["translation"] for line in lines] == expected


# ---- the folder checked on load: transformers' load report must be empty ------------------------------
@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """The study's MNMT exported: one model, at the folder's top."""
    from hltmt_plugin.export.transformers import export

    out = str(tmp_path_factory.mktemp("hf_plain") / "mnmt")
    export(os.path.join(STUDY, "models", "mnmt.pt"), out)
    return out


def edited(plain, tmp_path, edit, seal=True):
    """A copy of the export ``plain`` with ``edit(folder)`` applied; with ``seal``, its manifest
    written anew as the export writes it (so that its digests hold)."""
    import shutil

    from hltmt_plugin.hub import manifest

    folder = str(tmp_path / "edited")
    shutil.copytree(plain, folder)
    edit(folder)
    if seal:
        with open(os.path.join(folder, "manifest.json"), encoding="utf-8") as f:
            manifest.write(folder, json.load(f))
    return folder


def config_set(**changes):
    def edit(folder):
        path = os.path.join(folder, "config.json")
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        config.update(changes)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(config, f)

    return edit


def narrower_fc1(folder):
    from safetensors.torch import load_file, save_file

    path = os.path.join(folder, "model.safetensors")
    state = load_file(path)
    state["model.encoder.layers.0.fc1.weight"] = state["model.encoder.layers.0.fc1.weight"][:-1].clone()
    save_file(state, path, metadata={"format": "pt"})


def translate_refused(folder, tmp_path):
    """hltmt-translate on ``folder``: its exit status and what it wrote to standard error."""
    rows = tmp_path / "in.tsv"
    rows.write_text("en\tde\tThe file is open.\n", encoding="utf-8")
    done = run([cli("hltmt-translate"), "--checkpoint", folder, "--input", str(rows)])
    assert done.returncode != 0 and done.stdout == "", done.stdout[-2000:]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hltmt-translate: error: "), done.stderr[-3000:]
    return lines[0]


def test_an_edited_config_is_first_refused_by_the_manifests_digest(plain, tmp_path):
    folder = edited(plain, tmp_path, config_set(decoder_layers=1), seal=False)
    line = translate_refused(folder, tmp_path)
    assert "config.json is not the file that was exported (its SHA-256 differs)" in line


@pytest.mark.parametrize(
    "edit, said",
    [
        (config_set(decoder_layers=1), "model.decoder.layers.1.encoder_attn.k_proj.bias UNEXPECTED"),
        (config_set(encoder_layers=3), "model.encoder.layers.2.fc1.bias MISSING"),
        (
            config_set(max_position_embeddings=10**12),
            "model.encoder.embed_positions.weight MISMATCH Reinit due to size mismatch - ckpt: "
            "torch.Size([1024, 128]) vs model:torch.Size([1000000000000, 128])",
        ),
        (narrower_fc1, "model.encoder.layers.0.fc1.weight MISMATCH Reinit due to size mismatch"),
    ],
    ids=["fewer-layers", "more-layers", "positions-1e12", "a-weights-shape"],
)
def test_a_sealed_folder_whose_config_and_weights_disagree_is_refused_in_transformers_words(
    plain, tmp_path, edit, said
):
    """The manifest re-sealed as the export writes it: the load report is what refuses, in one line
    with transformers' own words, no progress bar or log of transformers on the terminal."""
    folder = edited(plain, tmp_path, edit)
    line = translate_refused(folder, tmp_path)
    assert f"transformers cannot load the export {folder}: transformers' load report is not empty: " in line
    assert said in line and "export the checkpoint again" in line


def test_a_refused_load_leaves_transformers_logging_as_it_was(plain, tmp_path, capfd):
    """transformers' load report is read, not printed, and its logging is as it was after."""
    import logging

    import transformers

    from hltmt_plugin.errors import HltmtInputError

    root = logging.getLogger("transformers")
    before = (root.handlers[:], root.level, root.propagate, transformers.utils.logging.is_progress_bar_enabled())
    folder = edited(plain, tmp_path, config_set(encoder_layers=3))
    capfd.readouterr()
    with pytest.raises(HltmtInputError, match="MISSING"):
        HltmtTranslator.load(folder)
    assert capfd.readouterr().err == ""
    assert (
        root.handlers[:],
        root.level,
        root.propagate,
        transformers.utils.logging.is_progress_bar_enabled(),
    ) == before


def test_loads_in_several_threads_leave_transformers_logging_as_it_was(folder):
    """transformers' logging settings are the process's: loads in several threads take turns
    (hf_engine._LOADS), so the last to end does not put back what another load had set."""
    import logging
    import threading

    import transformers

    root = logging.getLogger("transformers")
    before = (root.handlers[:], root.level, root.propagate, transformers.utils.logging.is_progress_bar_enabled())
    failures = []

    def load():
        try:
            HltmtTranslator.load(folder)
        except Exception as error:  # noqa: BLE001 (reported by the test)
            failures.append(error)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    after = (root.handlers[:], root.level, root.propagate, transformers.utils.logging.is_progress_bar_enabled())
    assert after == before


# ---- a pool model's groups: one model in memory, each group's top layer swapped in ------------------
def test_the_groups_share_one_model_but_their_top_layer(folder):
    served = HltmtTranslator.load(folder)
    layers = {group: model.get_decoder().layers for group, model in served.models.items()}
    assert sorted(layers) == ["m0", "m1", "m2", "universal"]
    assert len({id(group[-1]) for group in layers.values()}) == 4  # each group's own top layer
    assert all(group[0] is layers["m0"][0] for group in layers.values())  # the rest shared
    shared = {id(p) for model in served.models.values() for p in model.parameters()}
    one = sum(1 for _ in served.models["m0"].parameters())
    assert len(shared) == one + 3 * sum(1 for _ in layers["m1"][-1].parameters())


def test_a_group_that_differs_beyond_its_top_layer_is_loaded_whole(folder, tmp_path):
    """A planted difference outside the top layer (an encoder weight of models/m1, the folder
    sealed again): m1 is not given m0's weights, it is loaded whole and translates with its own."""
    from safetensors.torch import load_file, save_file

    def edit(copy):
        path = os.path.join(copy, "models", "m1", "model.safetensors")
        state = load_file(path)
        state["model.encoder.layers.0.fc1.bias"] = state["model.encoder.layers.0.fc1.bias"] + 1.0
        save_file(state, path, metadata={"format": "pt"})

    served = HltmtTranslator.load(edited(folder, tmp_path, edit))
    m0, m1 = served.models["m0"], served.models["m1"]
    assert m1.get_encoder() is not m0.get_encoder()
    assert served.models["m2"].get_encoder() is m0.get_encoder()
    bias = m1.get_encoder().layers[0].fc1.bias - m0.get_encoder().layers[0].fc1.bias
    assert float(bias.min()) == float(bias.max()) == 1.0


# ---- a transformers user's loader: the group of the target, codes checked ----------------------------
def test_the_loader_gives_the_targets_group_and_refuses_any_other(folder):
    from hltmt_plugin.errors import HltmtInputError
    from hltmt_plugin.hub.hf_engine import from_pretrained

    tok, model = from_pretrained(folder, "de")
    assert model.config.hltmt == {"group": "m0", "targets": ["cs", "de"], "codes": [">>cs<<", ">>de<<"]}
    lines = [text for _, tgt, text in items() if tgt == "de"]
    batch = tok([f">>de<< {line}" for line in lines], return_tensors="pt", padding=True)
    expected = HltmtTranslator.load(folder).translate(lines, "en", "de", beam=5)
    assert tok.batch_decode(model.generate(**batch), skip_special_tokens=True) == expected
    with pytest.raises(HltmtInputError, match=r"unknown language 'xx' \(this model knows en,fr,cs"):
        from_pretrained(folder, "xx")
    with pytest.raises(HltmtInputError, match="'models/m1' does not serve de \\(models/m0 does\\)"):
        from_pretrained(folder, "de", subfolder="models/m1")
    with pytest.raises(HltmtInputError, match="unknown language code '>>xx<<'"):
        tok([">>de<< A line.", ">>xx<< The file."])
    with pytest.raises(HltmtInputError, match=">>fi<< is not a target this model serves"):
        tok(">>fi<< The file.")


def test_the_pool_folder_itself_names_the_subfolders_to_load(folder):
    import transformers

    with pytest.raises(ValueError, match="load one: subfolder='models/m0' for cs, de; subfolder='models/m1' for fi"):
        transformers.AutoConfig.from_pretrained(folder)


def test_torch_threads_are_the_translators_for_its_calls_only(folder, monkeypatch):
    """threads=1 holds for each call of the translator, and the process's own setting comes back
    after it (loading changes nothing)."""
    import torch

    from hltmt_plugin.hub.hf_engine import HfTranslator

    before = torch.get_num_threads()
    other = 2 if before != 2 else 3
    torch.set_num_threads(other)
    try:
        mt = HltmtTranslator.load(folder, threads=1)
        assert torch.get_num_threads() == other  # the load leaves the process's setting
        seen = []
        run = HfTranslator._run
        monkeypatch.setattr(
            HfTranslator, "_run", lambda self, *a: (seen.append(torch.get_num_threads()), run(self, *a))
        )
        mt.translate_batch(items()[:2])
        assert seen and set(seen) == {1} and torch.get_num_threads() == other
    finally:
        torch.set_num_threads(before)
