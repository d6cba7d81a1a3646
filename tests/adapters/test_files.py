"""One language's adapters as a file of their own (hltmt_plugin/adapters/files.py), through the
real CLI: a MAD-X model trained by fairseq-train, a new language added by training only its
adapters and token row, export / import of a language's adapters (in Python and with
hltmt-adapters, which trusts nothing in the file and never leaves a partial checkpoint), and the
errors a user gets. The hltmt-adapters checks are here, not in tests/cli/, so that the two
trained models (``base``, ``with_hi``) are built once."""

import os
import re
import subprocess

import pytest
import torch

from adapters_common import BASE_PAIRS, train
from conftest import LANGS, MADX, PLUGIN, ROOT, build, cli, file_size_limit, generate, mixed_sample, run
from hltmt_plugin.adapters.files import (
    TOKEN_TABLES,
    add_new_language,
    base_fingerprint,
    export_language,
    import_language,
)
from hltmt_plugin.compat.safe_loading import load_state
from hltmt_plugin.compatibility import stored_options
from hltmt_plugin.directions import TRAINED, TrainedDirections
from hltmt_plugin.errors import HltmtInputError
from hltmt_plugin.hub.loading import load_model

OLD = ["en-de", "de-en", "en-gu", "gu-en", "en-fr"]
NEW = ["en-hi", "hi-en"]


@pytest.fixture(scope="module")
def base(data_bin, tmp_path_factory):
    """A MAD-X model (language + shared + invertible adapters, encoder and decoder) trained
    in full on the directions without hi; hi is in --langs (its token exists) but has no adapters."""
    save = tmp_path_factory.mktemp("madx_base")
    done = train(
        data_bin, save, "--lang-pairs", BASE_PAIRS, *MADX, "--adapter-langs", "en,de,fr,gu", "--max-update", "12"
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return str(save / "checkpoint_last.pt"), done.stdout + done.stderr


@pytest.fixture(scope="module")
def with_hi(data_bin, base, tmp_path_factory):
    """hi added to the trained base: only hi's adapters and its token row train."""
    save = tmp_path_factory.mktemp("madx_hi")
    done = train(
        data_bin,
        save,
        "--lang-pairs",
        "en-hi,hi-en",
        *MADX,
        "--adapter-langs",
        "en,de,fr,gu,hi",
        "--train-only",
        "adapters:hi,lang-token-rows:hi",
        "--hlt-stage",
        "all",
        "--restore-file",
        base[0],
        "--reset-optimizer",
        "--reset-dataloader",
        "--reset-meters",
        "--reset-lr-scheduler",
        "--max-update",
        "6",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return str(save / "checkpoint_last.pt"), done.stdout + done.stderr


def load_identity_hi(ckpt):
    """The base model with hi's adapters added at identity (what training started from)."""
    from hltmt_plugin.adapters.files import add_language

    _, model = load(ckpt)
    add_language(model, "hi")
    return model


def load(ckpt):
    model, _, task = load_model(ckpt)  # read by the plugin's loader, as every route reads it
    model.eval()
    return task, model


@pytest.fixture(scope="module")
def task(data_bin):
    """A task over every direction, to build batches (the checkpoints' own tasks know only
    the directions they trained on); same dictionary and language list."""
    return build(data_bin)[1]


def outputs(model, sample):
    with torch.no_grad():
        return model(**sample["net_input"])[0]


def hi_row(model):
    return model.encoder.languages.token_index("hi")


# ---------------------------------------------------------------------------------------


def test_training_with_adapters_logs_the_parameter_report(base):
    _, log = base
    assert "Traceback" not in log
    assert re.search(r"adapters: base model [\d,]+ parameters; added", log)
    found = re.search(r"per language \(en,de,fr,gu\): \+([\d,]+) \((\d+\.\d+)%\)", log)
    d = 128
    lang = 2 * (2 * d * 64 + d + 64)  # one pfeiffer adapter in each of 2 layers
    inv = 2 * (2 * 64 * 32 + 64 + 32)  # F and G: d/2 -> d/4 -> d/2
    assert found and int(found.group(1).replace(",", "")) == 2 * lang + 2 * inv
    assert "shared adapters (all languages): +" in log


def test_adding_a_language_changes_only_its_adapters_and_token_row(base, with_hi):
    before = load_state(base[0])["model"]
    after_state = load_state(with_hi[0])
    after = after_state["model"]
    _, model = load(with_hi[0])
    row = hi_row(model)
    params = {n for n, _ in model.named_parameters()}
    new = {k for k in after if k not in before}
    assert new and all(".hi." in k for k in new)
    for name in params - new:
        if name == "encoder.embed_tokens.weight":
            others = torch.ones(after[name].size(0), dtype=torch.bool)
            others[row] = False
            assert torch.equal(after[name][others], before[name][others])
            assert not torch.equal(after[name][row], before[name][row])
        else:
            assert torch.equal(after[name], before[name]), name
    ups = [k for k in new if k.endswith(".up.weight")]
    assert ups and all(after[k].abs().sum() > 0 for k in ups)  # hi's adapters trained away from identity
    # the optimizer holds exactly the trainable tensors: hi's adapters and the encoder embedding table
    optimizer = after_state["last_optimizer_state"]
    assert len(optimizer["param_groups"][0]["params"]) == len(new) + 1
    # the run keeps the base's trained directions and adds its own: none of them is zero-shot
    assert stored_options(after_state).hltmt_trained_directions == f"{BASE_PAIRS},en-hi,hi-en"
    directions = TrainedDirections.from_options(stored_options(after_state))
    assert {directions.kind(*pair.split("-")) for pair in OLD + NEW} == {TRAINED}
    assert "train only adapters:hi,lang-token-rows:hi:" in with_hi[1]
    assert "(languages hi); they start at identity" in with_hi[1]


def test_other_directions_give_identical_outputs_after_adding_a_language(task, base, with_hi):
    _, old = load(base[0])
    _, new = load(with_hi[0])
    sample = mixed_sample(task, OLD * 2, seed=1)
    # every weight these directions use is bit-identical (test above); two model instances can
    # still differ in the last float bit (CPU kernels depend on memory alignment)
    torch.testing.assert_close(outputs(new, sample), outputs(old, sample), rtol=0, atol=1e-5)
    hi_sample = mixed_sample(task, NEW)
    assert not torch.allclose(outputs(new, hi_sample), outputs(load_identity_hi(base[0]), hi_sample), atol=1e-3)
    with pytest.raises(HltmtInputError, match="'hi'"):  # the base has no adapters for hi
        outputs(old, mixed_sample(task, NEW))


@pytest.mark.fast
def test_export_import_round_trip_through_the_cli_gives_identical_outputs(task, base, with_hi, tmp_path):
    path = tmp_path / "hi.adapters.pt"
    done = run([cli("hltmt-adapters"), "export", "--path", with_hi[0], "--lang", "hi", "--out", str(path)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "exported hi: 32 adapter tensors" in done.stdout
    assert os.path.getsize(path) < os.path.getsize(with_hi[0]) / 10  # a small file
    merged = tmp_path / "base_plus_hi.pt"
    done = run([cli("hltmt-adapters"), "import", "--path", base[0], "--adapters", str(path), "--out", str(merged)])
    assert done.returncode == 0, done.stderr[-3000:]
    _, trained_hi = load(with_hi[0])
    _, imported = load(str(merged))
    assert imported.encoder.adapter_layout.adapter_langs == ["en", "de", "fr", "gu", "hi"]
    # the base's trained directions, and the file's: en-hi and hi-en are trained, not zero-shot
    assert "trained directions en-de,en-fr,en-gu,de-en,gu-en,en-hi,hi-en)" in done.stdout
    assert load_state(str(merged))["cfg"]["model"].hltmt_trained_directions == f"{BASE_PAIRS},en-hi,hi-en"
    assert load_state(path)["directions"] == ["en-hi", "hi-en"]
    wanted = trained_hi.state_dict()
    assert all(torch.equal(v, wanted[k]) for k, v in imported.state_dict().items() if "routing_map" not in k)
    sample = mixed_sample(task, NEW * 3 + OLD, seed=2)
    torch.testing.assert_close(outputs(imported, sample), outputs(trained_hi, sample), rtol=0, atol=1e-5)


def test_export_import_in_python_and_the_checks_on_the_base_and_sizes(data_bin, task, base, with_hi, tmp_path):
    _, trained_hi = load(with_hi[0])
    _, model = load(base[0])
    assert base_fingerprint(model) == base_fingerprint(trained_hi)  # adapters and token rows do not count
    path = str(tmp_path / "hi.pt")
    export_language(trained_hi, "hi", path)
    with pytest.raises(HltmtInputError, match="has no adapters for 'gu'|no adapters for 'xx'"):
        export_language(model, "xx", path)
    # another size: language adapters of 32 instead of 64
    args, _, other_size = build(data_bin, *MADX, "--adapter-dim", "32")
    with pytest.raises(HltmtInputError, match="does not fit this model's adapters: language_dim 64 in the file, 32"):
        import_language(other_size, path)
    # another base: the same architecture, one base weight different
    with torch.no_grad():
        model.decoder.layers[0].fc1.weight[0, 0] += 1e-3
    with pytest.raises(HltmtInputError, match="was exported from another base model"):
        import_language(model, path)
    with torch.no_grad():
        model.decoder.layers[0].fc1.weight[0, 0] -= 1e-3
    model.load_state_dict(load_state(base[0])["model"], strict=False)
    assert import_language(model, path) == "hi"
    sample = mixed_sample(task, NEW + OLD, seed=5)
    torch.testing.assert_close(outputs(model, sample), outputs(trained_hi, sample), rtol=0, atol=1e-5)


def test_an_adapter_file_for_a_model_without_adapters_fails_with_one_line(trained, with_hi, tmp_path):
    path = tmp_path / "hi.pt"
    _, model = load(with_hi[0])
    export_language(model, "hi", str(path))
    done = run(
        [
            cli("hltmt-adapters"),
            "import",
            "--path",
            trained[0],
            "--adapters",
            str(path),
            "--out",
            str(tmp_path / "out.pt"),
        ]
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "hltmt-adapters: error: this model has no adapters" in done.stderr
    assert not (tmp_path / "out.pt").exists()


def generate_args(data_bin, ckpt, src, tgt, *extra):
    return [
        cli("fairseq-generate"),
        data_bin,
        "--user-dir",
        PLUGIN,
        "--task",
        "hltmt_translation",
        "--langs",
        LANGS,
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
        "--gen-subset",
        "test",
        "--beam",
        "2",
        "--max-len-b",
        "6",
        "--max-tokens",
        "3000",
        *extra,
    ]


def test_generation_with_the_new_language_and_a_language_without_adapters(data_bin, base, with_hi):
    done = run(generate_args(data_bin, with_hi[0], "hi", "en"))  # one source language: no --enable-lang-ids needed
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(re.findall(r"^H-\d+\t", done.stdout, re.M)) == 37
    done = run(generate_args(data_bin, base[0], "en", "hi", "--enable-lang-ids"))  # the base never produced hi
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "hltmt_plugin: error: -s en -t hi: direction en-hi refused: the model never produced hi" in done.stderr
    # told that it was trained into hi, the model still meets no adapter for hi in its decoder
    done = run(
        generate_args(
            data_bin,
            base[0],
            "en",
            "hi",
            "--enable-lang-ids",
            "--model-overrides",
            "{'hltmt_trained_directions': 'en-de,en-hi'}",
        )
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert re.search(
        r"hltmt_plugin: error: a sentence with target language 'hi' reached the decoder, which has no "
        r"\w+ adapter for 'hi'",
        done.stderr,
    )


# ---------------------------------------------------------------------------------------
# hltmt-adapters import trusts nothing in the file, and never leaves a partial checkpoint

ADAPTERS = cli("hltmt-adapters")


@pytest.fixture(scope="module")
def hi_file(with_hi, tmp_path_factory):
    path = tmp_path_factory.mktemp("hi_file") / "hi.adapters.pt"
    # without the suite's PYTHONWARNINGS=ignore: the script itself keeps fairseq's noise out
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    done = subprocess.run(
        [ADAPTERS, "export", "--path", with_hi[0], "--lang", "hi", "--out", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(env, OMP_NUM_THREADS="1"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Warning" not in done.stderr and "tensorboardX" not in done.stderr, done.stderr[-3000:]
    return path


def _first(blob):
    return sorted(blob["tensors"])[0]


def _rename(blob, old, new):
    blob["tensors"] = {k.replace(f".{old}.", f".{new}."): v for k, v in blob["tensors"].items()}


def _set(blob, value):
    t = blob["tensors"][_first(blob)]
    t.view(-1)[0] = value


TAMPERED = {
    "another language's tensors": (
        lambda b: _rename(b, "hi", "fr"),
        "is for hi but holds decoder.invertible_adapters.adapters.fr.f.down.bias and 31 more, not one of hi's",
    ),
    "a base weight (the gate)": (
        lambda b: b["tensors"].__setitem__("decoder.slp.gate.weight", torch.zeros(2, 128)),
        "is for hi but holds decoder.slp.gate.weight, not one of hi's adapter tensors",
    ),
    "NaN": (lambda b: _set(b, float("nan")), "holds NaN: the model cannot translate"),  # the one model check
    "1e30": (
        lambda b: _set(b, 1e30),
        "holds values up to 1e+30 in absolute value (more than 10000: not a trained adapter)",
    ),
    "int64": (
        lambda b: b["tensors"].__setitem__(_first(b), b["tensors"][_first(b)].long()),
        "is int64, this model's is float32",
    ),
    "float16": (
        lambda b: b["tensors"].__setitem__(_first(b), b["tensors"][_first(b)].half()),
        "is float16, this model's is float32",
    ),
    "no sizes": (lambda b: b.pop("sizes"), "lacks 'sizes': a partial record"),
    "sizes of a wrong type": (lambda b: b.__setitem__("sizes", [64]), "field 'sizes' must be a map, got a list"),
    "a tensor that is not one": (lambda b: b["tensors"].__setitem__(_first(b), [0.5]), "must be a tensor, got a list"),
    "a tensor missing": (lambda b: b["tensors"].pop(_first(b)), "lacks 1 of the 32 adapter tensors of hi"),
    "another shape": (lambda b: b["tensors"].__setitem__(_first(b), b["tensors"][_first(b)][:-1]), "has shape"),
    "a token row of inf": (
        lambda b: next(iter(b["token_rows"].values()))["row"].fill_(float("inf")),
        "holds an infinity: the model cannot translate",  # the one model check (hltmt_plugin/model_check.py)
    ),
    "a token row of another vocabulary": (
        lambda b: next(iter(b["token_rows"].values())).__setitem__("index", 7),
        "is row 7 there",
    ),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_import_refuses_a_tampered_adapter_file_with_one_line(base, hi_file, tmp_path, case):
    tamper, message = TAMPERED[case]
    blob = load_state(hi_file)
    tamper(blob)
    bad = tmp_path / "bad.adapters.pt"
    torch.save(blob, bad)
    out = tmp_path / "out.pt"
    done = run([ADAPTERS, "import", "--path", base[0], "--adapters", str(bad), "--out", str(out)])
    assert done.returncode != 0, done.stdout[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("hltmt-adapters: error: adapter file ") and message in errors[0], (
        done.stderr[-3000:]
    )
    assert not out.exists()


def test_import_over_its_own_checkpoint_never_truncates_it(base, hi_file, tmp_path):
    import shutil

    ckpt = tmp_path / "checkpoint_last.pt"
    shutil.copy(base[0], ckpt)
    before = ckpt.read_bytes()
    cmd = [ADAPTERS, "import", "--path", str(ckpt), "--adapters", str(hi_file), "--out", str(ckpt)]
    done = run(cmd, preexec_fn=file_size_limit(len(before) // 2))  # the disk fills halfway through the write
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert f"hltmt-adapters: error: could not write {ckpt} (File too large): it is unchanged" in done.stderr
    assert ckpt.read_bytes() == before  # the base is whole
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_last.pt"]  # and no temporary file is left
    done = run(cmd)  # with room on the disk, in place
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"imported hi into {ckpt} (replacing it)" in done.stdout
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_last.pt"]
    _, model = load(str(ckpt))
    assert model.encoder.adapter_layout.adapter_langs == ["en", "de", "fr", "gu", "hi"]


def test_export_over_its_own_checkpoint_is_refused(with_hi, tmp_path):
    import shutil

    ckpt = tmp_path / "checkpoint_last.pt"
    shutil.copy(with_hi[0], ckpt)
    before = ckpt.read_bytes()
    done = run([ADAPTERS, "export", "--path", str(ckpt), "--lang", "hi", "--out", str(ckpt)])
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert f"error: --out {ckpt} is --path {ckpt}, an input of this command" in done.stderr
    assert ckpt.read_bytes() == before


# ---------------------------------------------------------------------------------------
# a language outside the base's --langs: a new token row (hltmt-adapters add-language)


def test_a_new_language_gets_a_token_row_and_the_base_translates_as_before_token_for_token(task, base, tmp_path):
    out = tmp_path / "base_plus_xx.pt"  # (hltmt-adapters add-language: tests/test_adapters_page.py)
    old_task, old = load(base[0])
    state = load_state(base[0])
    assert add_new_language(state, old_task, "xx") == "__xx__"
    torch.save(state, out)
    new_task, new = load(str(out))
    assert new_task.langs == [*LANGS.split(","), "xx"]
    assert new_task.source_dictionary.symbols == [*old_task.source_dictionary.symbols, "__xx__"]
    assert new.encoder.languages.token_index("xx") == len(old_task.source_dictionary)
    before, after = old.state_dict(), new.state_dict()
    assert set(after) == set(before)
    grown = [name for name in before if name.endswith(TOKEN_TABLES)]
    assert grown and all(torch.equal(after[name][:-1], before[name]) for name in grown)  # one row more
    assert all(torch.equal(after[n], before[n]) for n in before if n not in grown and not n.endswith("lang_names"))
    record = stored_options(load_state(str(out))).hltmt_compat
    assert record["languages"][-1] == "xx" and record["vocabulary"]["symbols"] == len(new_task.source_dictionary)
    # every direction of the base: the same hypotheses, token for token
    sample = mixed_sample(task, OLD * 2, seed=3)
    for was, now in zip(generate(old_task, old, sample), generate(new_task, new, sample)):
        assert [h["tokens"].tolist() for h in now] == [h["tokens"].tolist() for h in was]


def test_add_language_refuses_a_known_language_and_a_table_it_cannot_grow_in_one_line(base):
    task, _ = load(base[0])
    state = load_state(base[0])
    with pytest.raises(HltmtInputError, match=r"^hi is already in this model's language list \(en,de,fr,gu,hi\)"):
        add_new_language(state, task, "hi")
    with pytest.raises(HltmtInputError, match=r"^--lang 'x-y': a language name is letters, digits and _"):
        add_new_language(state, task, "x-y")
    rows = state["model"]["encoder.embed_tokens.weight"].size(0)
    state["model"]["decoder.output_bias"] = torch.zeros(rows)  # a planted per-symbol tensor
    with pytest.raises(HltmtInputError, match="decoder.output_bias has a row per symbol and is not a token table"):
        add_new_language(state, task, "xx")
