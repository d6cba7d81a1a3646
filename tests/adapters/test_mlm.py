"""MAD-X's language adapters from monolingual text (issue 12 point 3): gu's encoder language
and invertible adapters trained by masked language modelling on Gujarati text of DebMT-10,
everything else frozen, exported, imported into a MAD-X translation model trained with
adapters for en, de and fr only, and gu -> en decoded from it (zero-shot transfer)."""

import os
import re

import pytest
import torch

from conftest import LANGS, PLUGIN, ROOT, build, cli, run
from hltmt_plugin.adapters.files import add_language, export_language, read_language_file
from hltmt_plugin.adapters.mlm import EncoderMLM, encoder_language_parameters, mask_index, mlm_criterion, mlm_dataset
from hltmt_plugin.adapters.report import adapter_kind, adapter_language
from hltmt_plugin.errors import HltmtInputError

SCRIPT = cli("hltmt-train-language-adapter")
GU_TEXT = os.path.join(ROOT, "data", "debmt10", "train.en-gu.gu")
MADX = ["--language-adapters", "--shared-adapters", "--decoder-adapters", "--invertible-adapters", "--enable-lang-ids"]
STEPS, WINDOW = 100, 10


import hltmt_plugin.cli.train_language_adapter as tla  # noqa: E402


@pytest.fixture(scope="module")
def spm_model(data_bin):
    path = os.path.join(os.path.dirname(data_bin), "spm", "spm.model")  # prepare_data: OUT/spm, OUT/bin
    assert os.path.isfile(path)
    return path


@pytest.fixture(scope="module")
def gu_text(tmp_path_factory):
    """Gujarati lines the data slice did not use (it took the first 400 en-gu pairs)."""
    with open(GU_TEXT, encoding="utf-8") as f:
        lines = f.readlines()[500:1300]
    path = tmp_path_factory.mktemp("mono") / "mono.gu"
    path.write_text("".join(lines), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def base(data_bin, tmp_path_factory):
    """A MAD-X translation model trained by fairseq-train with adapters for en, de, fr only;
    gu is in --langs (its token exists) but has no adapters and no parallel data here."""
    save = tmp_path_factory.mktemp("mlm_base")
    done = run(
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
            "--encoder-langtok",
            "tgt",
            "--high-resource-langs",
            "de,fr",
            "--slp-pool-size",
            "2",
            "--cpu",
            "--lang-pairs",
            "en-de,en-fr,de-en",
            *MADX,
            "--adapter-langs",
            "en,de,fr",
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
            "--max-update",
            "12",
            "--save-dir",
            str(save),
            "--no-epoch-checkpoints",
            "--seed",
            "3",
            "--num-workers",
            "0",
        ]
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return str(save / "checkpoint_last.pt")


@pytest.fixture(scope="module")
def mlm(base, gu_text, spm_model, tmp_path_factory):
    """gu's adapters trained by MLM with the script's own functions: the model before and
    after, the per-step losses, the log and the exported file."""
    torch.manual_seed(0)
    model = tla.load_model(base)
    add_language(model, "gu")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    items, _ = tla.read_sentences(gu_text, spm_model, model.encoder.dictionary, model.encoder.max_positions())
    dataset = mlm_dataset(items, model, "gu", seed=1)
    log = []
    losses = tla.train(model, "gu", dataset, STEPS, lr=1e-3, max_sentences=16, log_interval=WINDOW, log=log.append)
    path = str(tmp_path_factory.mktemp("mlm_out") / "gu.mlm.adapters.pt")
    export_language(model, "gu", path)
    return before, model, losses, log, path


def test_masked_samples_have_the_encoder_input_layout(base, gu_text, spm_model):
    model = tla.load_model(base)
    add_language(model, "gu")
    d = model.encoder.dictionary
    items, _ = tla.read_sentences(gu_text, spm_model, d, model.encoder.max_positions())
    dataset = mlm_dataset(items[:64], model, "gu", seed=1)
    sample = dataset.collater([dataset[i] for i in range(64)])
    src, tgt = sample["net_input"]["src_tokens"], sample["target"]
    first = src.ne(d.pad()).long().argmax(dim=1)  # left-padded: the first real token
    assert (src.gather(1, first[:, None]) == model.encoder.languages.token_index("gu")).all()
    assert (tgt.gather(1, first[:, None]) == d.pad()).all()  # the language token is never a target
    assert mask_index(d) == d.bos()  # this dictionary has no <mask>
    masked = tgt.ne(d.pad())
    words = src.ne(d.pad()).sum() - src.size(0)
    assert 0.10 < masked.sum() / words < 0.20  # BERT's 15%
    assert src[masked].eq(d.bos()).float().mean() > 0.6  # 80% of the targets are masked, 10% random, 10% kept
    lang_tokens = model.encoder.languages.lang_of_token.ge(0)
    assert not lang_tokens[src[masked]].any()  # a random replacement is never a language token
    gu = model.encoder.languages.index("gu")
    assert (model.encoder.languages.lang_of_lang_id[sample["net_input"]["src_lang_id"].view(-1)] == gu).all()
    with torch.no_grad():  # the record carries gu as the source language of every row
        out = model.encoder(src, sample["net_input"]["src_lengths"], src_lang_id=sample["net_input"]["src_lang_id"])
    assert out["hltmt_languages"][0][:, 0].eq(gu).all()


def test_the_loss_is_fairseqs_masked_lm_loss_over_the_tied_embedding(base):
    model = tla.load_model(base)
    encoder = model.encoder
    d = encoder.dictionary
    torch.manual_seed(0)
    src = torch.randint(d.nspecial, d.nspecial + 300, (3, 9))
    src[:, 0] = model.encoder.languages.token_index("en")
    target = torch.full_like(src, d.pad())
    target[:, 3] = src[:, 3]
    src[:, 3] = mask_index(d)
    lang_id = torch.full((3, 1), encoder.languages.lang_id("en"))
    sample = {
        "net_input": {"src_tokens": src, "src_lengths": torch.full((3,), 9), "src_lang_id": lang_id},
        "target": target,
        "ntokens": 27,
        "nsentences": 3,
    }
    with torch.no_grad():
        loss, n, _ = mlm_criterion(encoder)(EncoderMLM(encoder), sample)
        out = encoder(src, sample["net_input"]["src_lengths"], src_lang_id=lang_id)
        x = out["encoder_out"][0].transpose(0, 1)
        with encoder.rows.use(out["hltmt_languages"][0]):
            x = encoder.invertible_adapters.inverse(x, encoder.rows, dim=0)
        logits = x[:, 3] @ encoder.embed_tokens.weight.t()
        expected = torch.nn.functional.cross_entropy(logits, target[:, 3], reduction="sum")
    assert int(n) == 3
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)


def test_mlm_trains_only_the_languages_encoder_adapters(mlm):
    before, model, _, _, _ = mlm
    trained = set(encoder_language_parameters(model, "gu"))
    assert trained and all(
        adapter_language(n) == "gu" and adapter_kind(n) in ("language", "invertible") and n.startswith("encoder.")
        for n in trained
    )
    assert any(".invertible_adapters." in n for n in trained) and any(".language_adapters." in n for n in trained)
    for name, p in model.named_parameters():
        if name in trained:
            assert not torch.equal(p, before[name]), f"{name} did not train"
        else:  # the base, other languages' adapters, the shared adapters, gu's decoder adapters
            assert torch.equal(p, before[name]), f"{name} changed"


def test_the_mlm_loss_falls(mlm):
    _, _, losses, log, _ = mlm
    assert len(losses) == STEPS and all(torch.isfinite(torch.tensor(losses)))
    first, last = sum(losses[:WINDOW]) / WINDOW, sum(losses[-WINDOW:]) / WINDOW
    print(f"gu MLM loss (bits per masked token): first {WINDOW} steps {first:.3f}, last {WINDOW} steps {last:.3f}")
    assert last < first - 1.0, (first, last)
    assert len(log) == STEPS // WINDOW and re.match(r"step 10/100 \| epoch 1 \| mlm_loss \d+\.\d{3} \|", log[0])


def test_the_file_imports_and_gu_translates_zero_shot(mlm, base, data_bin, tmp_path):
    _, model, _, _, path = mlm
    blob = read_language_file(path)
    assert blob["lang"] == "gu"
    out = str(tmp_path / "base_plus_gu.pt")
    done = run([cli("hltmt-adapters"), "import", "--path", base, "--adapters", path, "--out", out])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "adapter languages en,de,fr,gu" in done.stdout
    imported = tla.load_model(out)
    mine = dict(model.named_parameters())
    for name, p in imported.named_parameters():  # the trained gu adapters, on the untouched base
        assert torch.equal(p, mine[name]), name
    done = run(
        [
            cli("fairseq-generate"),
            data_bin,
            "--user-dir",
            PLUGIN,
            "--task",
            "hltmt_translation",
            "--langs",
            LANGS,
            "--lang-pairs",
            "en-de,en-fr,de-en,gu-en",
            "--encoder-langtok",
            "tgt",
            "-s",
            "gu",
            "-t",
            "en",
            "--path",
            out,
            "--cpu",
            "--gen-subset",
            "test",
            "--beam",
            "2",
            "--max-len-b",
            "6",
            "--max-tokens",
            "3000",
        ]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(re.findall(r"^H-\d+\t", done.stdout, re.M)) == 37


def test_without_the_import_gu_has_no_adapters(base, gu_text, spm_model):
    plain = tla.load_model(base)
    items, _ = tla.read_sentences(gu_text, spm_model, plain.encoder.dictionary, plain.encoder.max_positions(), 4)
    dataset = mlm_dataset(items, plain, "gu")
    sample = dataset.collater([dataset[i] for i in range(len(items))])
    with pytest.raises(HltmtInputError, match=r"has no \w+ adapter for 'gu'"):
        EncoderMLM(plain.encoder)(**sample["net_input"])


@pytest.mark.fast
def test_the_script_end_to_end_in_process(base, gu_text, spm_model, tmp_path, capsys):
    out = tmp_path / "gu.pt"
    assert (
        tla.main(
            [
                "--path",
                base,
                "--lang",
                "gu",
                "--text",
                gu_text,
                "--spm",
                spm_model,
                "--out",
                str(out),
                "--steps",
                "4",
                "--batch-size",
                "8",
                "--log-interval",
                "2",
                "--cpu",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "step 4/4 | epoch 1 | mlm_loss" in printed and "mlm_loss (base 2, per masked token): first 2" in printed
    assert read_language_file(str(out))["lang"] == "gu"


def tensors(value):
    """The tensors a structure holds, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else []
    return [t for item in items for t in tensors(item)]


def test_the_same_seed_trains_the_same_adapters(base, gu_text, spm_model, tmp_path, capsys):
    """--seed is the run's: torch's generator is seeded once the model is to be built, so that
    two runs of one seed in one process (after other draws) write the same adapters."""
    found = []
    for name in ("first", "second"):
        torch.rand(7)  # the process's draws before the run
        out = tmp_path / f"{name}.pt"
        options = ["--path", base, "--lang", "gu", "--text", gu_text, "--spm", spm_model, "--out", str(out)]
        assert tla.main(options + ["--steps", "2", "--batch-size", "8", "--seed", "5", "--cpu"]) == 0
        found.append(tensors(read_language_file(str(out))))
    capsys.readouterr()
    assert len(found[0]) == len(found[1]) > 0
    assert all(torch.equal(a, b) for a, b in zip(*found))


@pytest.mark.parametrize(
    "case, message",
    [
        ("no-text", "error: argument --text: {tmp}/missing.gu: no such file or folder"),
        ("empty-text", "error: text file {tmp}/empty.gu holds no text"),
        ("not-spm", "is not a sentencepiece model"),
        ("other-spm", "are unknown to the model's dictionary"),
        ("unknown-lang", "error: 'xx' is not in this model's language list (en,de,fr,gu,hi)"),
        ("no-checkpoint", "error: argument --path: {tmp}/none.pt: no such file"),
        ("mask-prob", "error: --mask-prob 1.5 is not a share of the tokens"),
    ],
)
def test_bad_input_is_one_line(case, message, base, gu_text, spm_model, tmp_path, capsys):
    args = {"--path": base, "--lang": "gu", "--text": gu_text, "--spm": spm_model, "--out": str(tmp_path / "o.pt")}
    if case == "no-text":
        args["--text"] = str(tmp_path / "missing.gu")
    elif case == "empty-text":
        (tmp_path / "empty.gu").write_text("\n  \n")
        args["--text"] = str(tmp_path / "empty.gu")
    elif case == "not-spm":
        args["--spm"] = gu_text
    elif case == "other-spm":
        import sentencepiece as spm

        spm.SentencePieceTrainer.train(
            input=os.path.join(ROOT, "data", "debmt10", "train.en-de.de"),
            model_prefix=str(tmp_path / "other"),
            vocab_size=1000,
            input_sentence_size=3000,
            minloglevel=2,
        )  # 43% of the gu pieces are <unk> to the model
        args["--spm"] = str(tmp_path / "other.model")
        args["--text"] = gu_text
    elif case == "unknown-lang":
        args["--lang"] = "xx"
    elif case == "no-checkpoint":
        args["--path"] = str(tmp_path / "none.pt")
    elif case == "mask-prob":
        args["--mask-prob"] = "1.5"
    argv = [v for kv in args.items() for v in kv] + ["--steps", "2", "--cpu"]
    try:
        code = tla.main(argv)
    except SystemExit as stop:  # a missing input, refused at parsing (paths.missing)
        code = stop.code
    assert code == (2 if case.startswith("no-") else 1)
    err = capsys.readouterr().err.strip().splitlines()
    assert err and (code == 2 or err[-1].startswith("hltmt-train-language-adapter: error: ")), err
    assert message.format(tmp=tmp_path) in err[-1], err
    assert not (tmp_path / "o.pt").exists()


def test_bad_input_from_the_command_line(base, spm_model, tmp_path):
    done = run(
        [
            SCRIPT,
            "--path",
            base,
            "--lang",
            "gu",
            "--text",
            str(tmp_path / "none.gu"),
            "--spm",
            spm_model,
            "--out",
            str(tmp_path / "o.pt"),
        ]
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr  # refused at parsing
    assert done.stderr.strip().splitlines()[-1] == (
        f"hltmt-train-language-adapter: error: argument --text: {tmp_path}/none.gu: no such file or folder (see --help)"
    )


def test_models_without_encoder_language_adapters_are_refused(data_bin):
    _, _, plain = build(data_bin)
    with pytest.raises(HltmtInputError, match="this model has no adapters"):
        add_language(plain, "gu")
    _, _, shared = build(data_bin, "--shared-adapters")
    with pytest.raises(HltmtInputError, match="no encoder language or invertible adapters for 'gu'"):
        encoder_language_parameters(shared, "gu")
