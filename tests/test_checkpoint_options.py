"""Every option that decides what a checkpoint's weights mean is checked against the checkpoint
(issue 14): the language list and its order, the high-resource languages of the routing map,
the map's values, and the dictionaries of the data."""
import os
import shutil

import torch

from conftest import HIGH, LANGS, PAIRS, PLUGIN, cli, run

import hltmt_plugin  # noqa: F401,E402  (allowlists the types fairseq checkpoints hold)


def generate(data_bin, ckpt, *extra, langs=LANGS, high=HIGH):
    return run([cli("fairseq-generate"), data_bin, "--user-dir", PLUGIN, "--task", "hltmt_translation",
                "--langs", langs, "--lang-pairs", PAIRS, "--encoder-langtok", "tgt", "-s", "en", "-t", "de",
                "--path", str(ckpt), "--gen-subset", "test", "--beam", "1", "--max-len-b", "3", "--cpu",
                "--model-overrides", f"{{'high_resource_langs': '{high}'}}", *extra])


def with_fixed_map(trained, tmp_path, mapping):
    state = torch.load(trained[0], map_location="cpu", weights_only=True)
    state["model"]["decoder.slp.fixed_map"] = mapping  # the older stored form: module indices
    del state["model"]["decoder.slp.fixed_map_onehot"]
    path = tmp_path / "fixed.pt"
    torch.save(state, path)
    return path


def test_decoding_with_the_languages_in_another_order_is_refused_naming_both_lists(data_bin, trained):
    done = generate(data_bin, trained[0], langs="en,fr,de,gu,hi")
    assert done.returncode != 0
    assert ("hltmt_plugin: error: the checkpoint was trained with the languages en,de,fr,gu,hi (in this order) "
            "and these options give en,fr,de,gu,hi") in done.stderr
    assert "Traceback" not in done.stderr


def test_the_routing_map_follows_language_names_and_other_languages_are_refused(data_bin, trained, tmp_path):
    path = with_fixed_map(trained, tmp_path, torch.tensor([1, 0]))  # trained as de,fr: de->m1, fr->m0
    same = generate(data_bin, path)
    assert same.returncode == 0, same.stderr[-2000:]
    assert "routing map (fixed, from the checkpoint): de->m1, fr->m0" in same.stderr
    swapped = generate(data_bin, path, high="fr,de")
    assert swapped.returncode == 0, swapped.stderr[-2000:]
    assert "routing map (fixed, from the checkpoint): fr->m0, de->m1" in swapped.stderr  # by name, not position
    hyps = lambda out: [line for line in out.stdout.splitlines() if line.startswith("H-")]  # noqa: E731
    assert hyps(swapped) == hyps(same)
    other = generate(data_bin, path, high="fr,gu")
    assert other.returncode != 0
    assert "the checkpoint's pool serves --high-resource-langs de,fr and these options name fr,gu" in other.stderr


def test_a_routing_map_out_of_range_is_refused_on_load(data_bin, trained, tmp_path):
    for bad in (torch.tensor([0, 2]), torch.tensor([0.0, 1.0]), torch.tensor([-1, 0])):
        done = generate(data_bin, with_fixed_map(trained, tmp_path, bad))
        assert done.returncode != 0, bad
        assert "hltmt_plugin: error: the checkpoint's routing map (decoder.slp.fixed_map)" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_a_dictionary_changed_after_binarization_is_refused(data_bin, tmp_path):
    copy = tmp_path / "bin"
    shutil.copytree(data_bin, copy)
    for name in os.listdir(copy):
        if name.startswith("dict.") and name.endswith(".txt"):
            lines = (copy / name).read_text(encoding="utf-8").splitlines(keepends=True)
            (copy / name).write_text("".join(lines[:5] + lines[6:]), encoding="utf-8")  # one line removed
    done = run([cli("fairseq-train"), str(copy), "--user-dir", PLUGIN, "--task", "hltmt_translation",
                "--arch", "hltmt_transformer_tiny", "--langs", LANGS, "--lang-pairs", PAIRS, "--encoder-langtok",
                "tgt", "--high-resource-langs", HIGH, "--slp-pool-size", "2", "--cpu", "--max-update", "1",
                "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000", "--save-dir", str(tmp_path / "s")])
    assert done.returncode != 0
    assert "dict.de.txt changed since the data was binarized" in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "s" / "checkpoint_last.pt").exists()


def test_a_language_of_the_pairs_without_adapters_is_refused_before_the_first_update(data_bin, tmp_path):
    """Stage high trains en-de,en-fr,de-en; gu (a source of stage all) has no adapter: refused
    at the start, not after stage high (issue 14)."""
    done = run([cli("fairseq-train"), data_bin, "--user-dir", PLUGIN, "--task", "hltmt_translation",
                "--arch", "hltmt_transformer_tiny", "--langs", LANGS, "--lang-pairs", PAIRS, "--encoder-langtok",
                "tgt", "--high-resource-langs", HIGH, "--slp-pool-size", "2", "--cpu", "--language-adapters",
                "--enable-lang-ids", "--adapter-langs", "en,de,fr", "--high-stage-updates", "3", "--max-update", "6",
                "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000", "--save-dir", str(tmp_path / "s")])
    assert done.returncode != 0
    assert "hltmt_plugin: error: --adapter-langs (en,de,fr) leaves out gu" in done.stderr, done.stderr[-1500:]
    assert "num_updates" not in done.stdout + done.stderr
