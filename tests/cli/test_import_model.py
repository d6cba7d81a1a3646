"""hltmt-import: a tiny M2M-100-style transformers folder (tests/importing_common.py) imported
by the command; the folder it writes is served by hltmt-translate and by fairseq-interactive
(fairseq's task and model; the plugin only for its weights-only loading under torch >= 2.6) with
the same lines; bad uses end in one line and write
nothing."""

import os

import pytest

from conftest import PLUGIN, cli, run
from importing_common import build_m2m_folder, rows, shard_weights

pytest.importorskip("transformers")

IMPORT = cli("hltmt-import")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build_m2m_folder(str(tmp_path_factory.mktemp("m2m") / "hf"))


def test_the_imported_folder_serves_hltmt_translate_and_fairseq_interactive(folder, tmp_path):
    out = tmp_path / "imported"
    done = run([IMPORT, "--model", folder, "--out", str(out)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        done.stdout.count("\n") == 1 and "M2M100ForConditionalGeneration" in done.stdout and "pre-norm" in done.stdout
    )
    texts = [text for src, tgt, text in rows() if (src, tgt) == ("en", "de")]
    source = "".join(t + "\n" for t in texts)
    ours = run(
        [cli("hltmt-translate"), "--checkpoint", str(out / "checkpoint.pt"), "--src", "en", "--tgt", "de"]
        + ["--beam", "5", "--max-len", "40", "--device", "cpu"],
        input=source,
    )
    assert ours.returncode == 0, ours.stderr[-3000:]
    langs = (out / "langs.txt").read_text().split()
    pairs = ",".join(f"{a}-{b}" for a in langs for b in langs if a != b)
    theirs = run(
        [cli("fairseq-interactive"), str(out), "--path", str(out / "checkpoint.pt"), "--cpu", "--user-dir", PLUGIN]
        + ["--task", "translation_multi_simple_epoch", "--langs", ",".join(langs), "--lang-pairs", pairs]
        + ["--source-lang", "en", "--target-lang", "de", "--encoder-langtok", "src", "--decoder-langtok"]
        + ["--lang-tok-style", "multilingual", "--bpe", "sentencepiece", "--sentencepiece-model"]
        + [str(out / "spm.model"), "--beam", "5", "--max-len-b", "40", "--max-len-a", "0", "--buffer-size", "64"],
        input=source,
    )
    assert theirs.returncode == 0, theirs.stderr[-3000:]
    hypotheses = [line.split("\t", 2)[2] for line in theirs.stdout.splitlines() if line.startswith("D-")]
    assert [h.replace("__de__", "").strip() for h in hypotheses] == ours.stdout.splitlines()
    assert len(hypotheses) == len(texts)


def test_an_earlier_import_is_replaced_only_with_force(folder, tmp_path):
    out = tmp_path / "imported"
    assert run([IMPORT, "--model", folder, "--out", str(out)]).returncode == 0
    again = run([IMPORT, "--model", folder, "--out", str(out)])
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "--force" in again.stderr
    assert run([IMPORT, "--model", folder, "--out", str(out), "--force"]).returncode == 0


@pytest.mark.parametrize(
    "case,message",
    [
        ("no tokenizer", "has no tokenizer_config.json"),
        ("out inside the model", "--out"),
        ("model is a file", "--model"),
    ],
)
def test_bad_uses_end_in_one_line_and_write_nothing(case, message, folder, tmp_path):
    import shutil

    model, out = str(tmp_path / "hf"), str(tmp_path / "out")
    shutil.copytree(folder, model)
    if case == "no tokenizer":
        os.remove(os.path.join(model, "tokenizer_config.json"))
    elif case == "out inside the model":
        out = os.path.join(model, "imported")
    else:
        model = os.path.join(model, "config.json")
    done = run([IMPORT, "--model", model, "--out", out])
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert done.returncode != 0 and len(errors) == 1 and message in errors[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr and not os.path.exists(out)


@pytest.mark.fast
def test_what_help_says_of_weights_and_tokenizers_is_what_the_import_reads():
    """--help names the weight files in the order the import tries them, every tokenizer it takes
    (M2M-100's and NLLB's), and the model classes of the folders hltmt-export writes."""
    import re

    from hltmt_plugin.cli.import_model import build_parser
    from hltmt_plugin.export.importing import TOKENIZERS, WEIGHT_FILES
    from hltmt_plugin.export.transformers import CLASSES

    text = " ".join(build_parser().format_help().split())
    weights = text.split("The weights are read from the first of ")[1].split(";")[0]
    named = re.findall(r"``([\w.]+)``", weights)
    assert named == [name for pair in WEIGHT_FILES for name in pair], named
    for tokenizer in TOKENIZERS:
        assert f"``{tokenizer}``" in text, tokenizer
    assert "NLLB-200" in text and "M2M-100" in text
    for _, cls in CLASSES.values():
        assert f"``{cls}``" in text, cls


def _sharded(folder, out):
    """``folder`` with its weights as two safetensors shards and their index."""
    import shutil

    shutil.copytree(folder, out)
    shard_weights(out)
    return out


def test_progress_lines_go_to_stderr_only_and_change_no_file(folder, tmp_path):
    """HLTMT_PROGRESS=1 (what --help names): a line per stage and per shard on stderr; stdout and
    every file written are the same as without them."""
    sharded, out = _sharded(folder, str(tmp_path / "sharded")), tmp_path / "imported"
    quiet = run([IMPORT, "--model", sharded, "--out", str(out)], env_extra={"HLTMT_PROGRESS": "0"})
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr[-2000:]
    before = {name: (out / name).read_bytes() for name in sorted(os.listdir(out))}
    shown = run([IMPORT, "--model", sharded, "--out", str(out), "--force"], env_extra={"HLTMT_PROGRESS": "1"})
    assert shown.returncode == 0 and shown.stdout == quiet.stdout
    lines = shown.stderr.splitlines()
    assert (
        "hltmt-import: reading weights: shard 1 of 2" in lines
        and "hltmt-import: reading weights: shard 2 of 2" in lines
    )
    assert all(line.startswith("hltmt-import: ") for line in lines) and len(lines) >= 5
    assert {name: (out / name).read_bytes() for name in sorted(os.listdir(out))} == before
    assert "HLTMT_PROGRESS=1" in run([IMPORT, "--help"]).stdout
