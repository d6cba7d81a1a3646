"""The direction rule on fairseq's own multilingual task (hltmt_plugin/compat/direction_rule.py):
fairseq-generate and fairseq-interactive under ``--task translation_multi_simple_epoch
--user-dir hltmt_plugin`` of the committed MNMT baseline (English into ten languages) decode a
trained direction exactly as without the rule and refuse a direction the model never trained in
one line (without the rule fairseq decodes it, exit 0); fairseq's hub does the same in process; a
zero-shot direction is refused on fairseq's task and decoded by the plugin's; a model whose
training directions are unknown is refused."""

import os
import shutil
import sys
from argparse import Namespace

import pytest
from fairseq import checkpoint_utils, options, tasks
from fairseq.hub_utils import GeneratorHubInterface
from fairseq.tasks.translation_multi_simple_epoch import TranslationMultiSimpleEpochTask

import hltmt_plugin  # noqa: F401  (registers the plugin's task)
from conftest import PLUGIN, ROOT, assert_one_error_line, cli, run
from hltmt_plugin.compat import direction_rule, hub_generator, safe_loading
from hltmt_plugin.errors import HltmtConfigError

MODELS = os.path.join(ROOT, "docs", "results", "cpu-study", "models")
MNMT, SPM = os.path.join(MODELS, "mnmt.pt"), os.path.join(MODELS, "spm.model")
TARGETS = ["fr", "cs", "de", "fi", "lv", "et", "ro", "hi", "tr", "gu"]
LANGS, PAIRS = "en," + ",".join(TARGETS), ",".join(f"en-{t}" for t in TARGETS)
STUDY = [
    "--task",
    "translation_multi_simple_epoch",
    "--langs",
    LANGS,
    "--lang-pairs",
    PAIRS,
    "--encoder-langtok",
    "tgt",
]
DECODE = ["--user-dir", PLUGIN, *STUDY, "--path", MNMT, "--cpu", "--beam", "2", "--max-len-b", "10"]
SENTENCES = ["The file could not be saved.", "Open the file.", "Thank you very much."]

# fairseq's command, run as fairseq runs it with the plugin loaded, but with the rule taken off again
WITHOUT_THE_RULE = """import sys
from fairseq_cli import {tool}
import hltmt_plugin
from hltmt_plugin import compat
compat.install()
from fairseq.tasks.translation_multi_simple_epoch import TranslationMultiSimpleEpochTask as T
for name in ("build_model", "build_generator"):
    assert getattr(T, name).hltmt_direction_rule
    setattr(T, name, getattr(T, name).__wrapped__)
sys.argv = [sys.argv[1], *sys.argv[2:]]
{tool}.cli_main()
"""


def fairseq(tool, *args, rule=True, **kwargs):
    """``fairseq-TOOL args``, or the same command with the rule taken off (``rule=False``)."""
    if rule:
        return run([cli(f"fairseq-{tool}"), *args], **kwargs)
    script = WITHOUT_THE_RULE.format(tool=tool)
    return run([sys.executable, "-c", script, cli(f"fairseq-{tool}"), *args], **kwargs)


def hypotheses(done):
    return [line for line in done.stdout.splitlines() if line.startswith(("H-", "D-"))]


@pytest.fixture(scope="module")
def study_bin(tmp_path_factory):
    """A test split of en-de sentences binarized with the committed models' dictionaries (every
    language's dictionary beside it, as the models were trained)."""
    import sentencepiece

    folder = tmp_path_factory.mktemp("study_bin")
    pieces = sentencepiece.SentencePieceProcessor(model_file=SPM)
    with open(os.path.join(ROOT, "docs", "results", "cpu-study", "refs", "en-de.ref"), encoding="utf-8") as f:
        german = [next(f).strip() for _ in SENTENCES]
    for lang, lines in (("en", SENTENCES), ("de", german)):
        with open(folder / f"test.{lang}", "w", encoding="utf-8") as f:
            f.writelines(" ".join(pieces.encode(line, out_type=str)) + "\n" for line in lines)
    dest = folder / "bin"
    done = run(
        [cli("fairseq-preprocess"), "--source-lang", "en", "--target-lang", "de", "--testpref", str(folder / "test")]
        + ["--destdir", str(dest), "--srcdict", f"{MODELS}/dict.en.txt", "--tgtdict", f"{MODELS}/dict.de.txt"]
        + ["--workers", "1"]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for lang in TARGETS:
        shutil.copy(os.path.join(MODELS, f"dict.{lang}.txt"), dest / f"dict.{lang}.txt")
    return str(dest)


def generate(study_bin, src, tgt, rule=True):
    whole = ["--max-tokens", "3000", "--required-batch-size-multiple", "1"]  # fairseq's task drops a partial batch
    return fairseq("generate", study_bin, *DECODE, "-s", src, "-t", tgt, "--gen-subset", "test", *whole, rule=rule)


def interactive(src, tgt, rule=True):
    spm = ["--bpe", "sentencepiece", "--sentencepiece-model", SPM]
    return fairseq("interactive", MODELS, *DECODE, *spm, "-s", src, "-t", tgt, rule=rule, input="\n".join(SENTENCES))


def test_a_trained_direction_decodes_as_without_the_rule(study_bin):
    for decode in (lambda rule: generate(study_bin, "en", "de", rule), lambda rule: interactive("en", "fr", rule)):
        done, bare = decode(True), decode(False)
        assert done.returncode == 0 and bare.returncode == 0, done.stderr[-3000:] + bare.stderr[-3000:]
        assert len(hypotheses(done)) == 2 * len(SENTENCES) and hypotheses(done) == hypotheses(bare)


@pytest.mark.parametrize(
    "src, tgt, reason",
    [("de", "en", "the model never produced en"), ("fr", "de", "the model never read fr (it was only a target)")],
)
def test_an_untrained_direction_is_one_line_in_fairseq_generate_and_interactive(study_bin, src, tgt, reason):
    line = f"hltmt_plugin: error: -s {src} -t {tgt}: direction {src}-{tgt} refused: {reason}; the checkpoint was trained on {PAIRS}"
    for done in (generate(study_bin, src, tgt), interactive(src, tgt)):
        assert_one_error_line(done, line)
        assert not hypotheses(done)


def test_without_the_rule_fairseq_decodes_the_untrained_direction_with_no_word():
    """What the rule closes (the test above fails without it)."""
    done = interactive("de", "en", rule=False)
    assert done.returncode == 0 and len(hypotheses(done)) == 2 * len(SENTENCES), done.stderr[-3000:]


@pytest.fixture
def rule(monkeypatch):
    """The patches compat.install() gives fairseq's task and hub in a command's process, applied
    here and taken off after the test."""
    for owner, name in ((TranslationMultiSimpleEpochTask, "build_model"), (GeneratorHubInterface, "string")):
        monkeypatch.setattr(owner, name, getattr(owner, name))
    monkeypatch.setattr(
        TranslationMultiSimpleEpochTask, "build_generator", TranslationMultiSimpleEpochTask.build_generator
    )
    hub_generator.install(TranslationMultiSimpleEpochTask, GeneratorHubInterface)
    direction_rule.install(TranslationMultiSimpleEpochTask)


def hub(src, tgt):
    """fairseq's hub on the committed MNMT model, as ``from_pretrained`` builds it (the state read
    by the plugin's weights-only loader)."""
    overrides = {"data": MODELS, "source_lang": src, "target_lang": tgt}
    overrides.update(bpe="sentencepiece", sentencepiece_model=SPM)
    state = safe_loading.load_checkpoint(MNMT, overrides)
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([MNMT], arg_overrides=overrides, state=state)
    return GeneratorHubInterface(cfg, task, models)


def test_fairseqs_hub_translates_a_trained_direction_and_refuses_an_untrained_one(rule):
    en_de = hub("en", "de")
    assert en_de.translate(SENTENCES[0], beam=2, max_len_b=10)
    with pytest.raises(HltmtConfigError) as refused:
        hub("de", "en").translate("Die Datei ist offen.", beam=2, max_len_b=10)
    assert str(refused.value) == (
        f"-s de -t en: direction de-en refused: the model never produced en; the checkpoint was trained on {PAIRS} "
        "(targets cs,de,et,fi,fr,gu,hi,lv,ro,tr)"
    )
    en_de.task.args.target_lang = "en"  # a direction changed after loading is checked too
    with pytest.raises(HltmtConfigError, match="direction en-en refused: the model never produced en"):
        en_de.translate(SENTENCES[0], beam=2)


def small_model(task_name, *extra):
    """A tiny model that fairseq's task builds from training options on the committed models'
    dictionaries (trained on en-de,en-fr,de-en: de-fr is zero-shot), and the task ``task_name``
    decoding with those options and ``extra``."""
    argv = [MODELS, "--user-dir", PLUGIN, "--langs", LANGS, "--lang-pairs", "en-de,en-fr,de-en"]
    argv += ["--encoder-langtok", "tgt", "--arch", "transformer_hltmt_tiny", "--cpu"]
    training = options.parse_args_and_arch(options.get_training_parser(), [*argv, *STUDY[:2]])
    model = tasks.setup_task(training).build_model(training)
    decoding = options.parse_args_and_arch(options.get_training_parser(), [*argv, "--task", task_name, *extra])
    return tasks.setup_task(decoding), model, decoding


def test_a_zero_shot_direction_is_refused_on_fairseqs_task_and_decoded_by_the_plugins(rule):
    task, model, args = small_model("translation_multi_simple_epoch", "-s", "de", "-t", "fr")
    with pytest.raises(HltmtConfigError) as refused:
        task.build_generator([model], args)
    assert str(refused.value).startswith(
        "-s de -t fr: direction de-fr is zero-shot (the checkpoint was trained on en-de,en-fr,de-en (targets "
        "de,en,fr)): decoded only with --task hltmt_translation, which takes the same options"
    )
    task, model, args = small_model("hltmt_translation", "-s", "de", "-t", "fr")
    assert task.build_generator([model], args) is not None


def test_without_s_and_t_every_pair_of_lang_pairs_is_checked(rule):
    task, model, args = small_model("translation_multi_simple_epoch", "--lang-pairs", "en-de,fr-de")
    assert direction_rule.decoded_directions(task) == [
        ("en", "de", "--lang-pairs en-de"),
        ("fr", "de", "--lang-pairs fr-de"),
    ]
    with pytest.raises(
        HltmtConfigError, match=r"^--lang-pairs fr-de: direction fr-de refused: the model never read fr"
    ):
        task.build_generator([model], args)


def test_a_model_whose_training_directions_are_unknown_is_refused(rule):
    task, model, args = small_model("translation_multi_simple_epoch", "-s", "en", "-t", "de")
    with pytest.raises(HltmtConfigError, match="that TranslationMultiSimpleEpochTask.build_model did not build"):
        task.build_generator([type(model)(model.args, model.encoder, model.decoder)], args)
    unnamed = task.build_model(Namespace(**{**vars(args), "lang_pairs": None}))
    with pytest.raises(
        HltmtConfigError, match=r"^the checkpoint's options name no training directions \(--lang-pairs\)"
    ):
        task.build_generator([unnamed], args)
    task.build_generator([model], args)  # the same model, built by the task: en-de trained


def test_the_patches_are_installed_once(rule):
    build_model, build_generator = (
        TranslationMultiSimpleEpochTask.build_model,
        TranslationMultiSimpleEpochTask.build_generator,
    )
    assert build_model.hltmt_direction_rule and build_generator.hltmt_direction_rule
    direction_rule.install(TranslationMultiSimpleEpochTask)
    assert TranslationMultiSimpleEpochTask.build_model is build_model
    assert TranslationMultiSimpleEpochTask.build_generator is build_generator
