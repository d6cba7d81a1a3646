"""The experiment recipe: each system's fairseq-train line read back by fairseq's own parser,
the pool-size rule, scoring and the training log."""

import argparse

import pytest

from hltmt_plugin.experiments import recipe
from hltmt_plugin.experiments.recipe import Comparison, Hyper

LANGS = ["fr", "de", "gu"]


def parsed(cmd):
    """fairseq-train's options of a command line the recipe built (after ``python -m fairseq_cli.train``)."""
    from fairseq import options

    from hltmt_plugin.cli import register

    register()
    assert cmd[1:3] == ["-m", "fairseq_cli.train"]
    return options.parse_args_and_arch(options.get_training_parser(), cmd[3:])


def comparison(tmp_path, **kw):
    return Comparison(str(tmp_path), LANGS, recipe.directions(LANGS), ["fr", "de"], **kw)


def test_pool_size_rule():
    from hltmt_plugin.corpora import DEBMT10_HIGH, WMT10_HIGH

    assert recipe.pool_size(WMT10_HIGH) == recipe.pool_size(DEBMT10_HIGH) == 3
    assert [recipe.pool_size(["de"] * n) for n in (1, 2, 3, 4)] == [1, 2, 3, 3]
    assert recipe.pool_size(["fr", "de"]) == 2
    assert recipe.pool_size(["fr", "de", "cs", "tr"], most=4) == 4
    assert recipe.high_among(["de", "gu"], ["fr", "de", "cs"]) == ["de"]
    assert recipe.directions(["de", "gu"], to_english=False) == ["en-de", "en-gu"]


def test_mnmt_is_fairseqs_plain_transformer(tmp_path):
    args = parsed(comparison(tmp_path).train_command("mnmt", Hyper(), seed=3, updates=40, save_dir=str(tmp_path / "m")))
    assert (args.task, args.arch, args.criterion) == (
        recipe.BASELINE_TASK,
        "transformer_hltmt_tiny",
        "label_smoothed_cross_entropy",
    )
    assert (args.seed, args.max_update, args.lr, args.warmup_updates, args.sampling_temperature) == (
        3,
        40,
        [0.003],
        200,
        5.0,
    )
    assert args.lang_pairs == "en-fr,en-de,en-gu,fr-en,de-en,gu-en" and args.cpu


def test_hltmt_both_stages_in_one_run(tmp_path):
    cmd = comparison(tmp_path).train_command(
        "hltmt", Hyper(lr=1e-3), seed=1, updates=40, save_dir=str(tmp_path / "h"), high_updates=20
    )
    args = parsed(cmd)
    assert (args.task, args.arch, args.criterion) == (
        recipe.PLUGIN_TASK,
        "hltmt_transformer_tiny",
        "hltmt_cross_entropy",
    )
    assert (args.high_resource_langs, args.slp_pool_size, args.hlt_stage, args.high_stage_updates) == (
        "fr,de",
        2,
        "high",
        20,
    )
    assert args.lr == [0.001] and args.log_format == "simple"


def test_hltmt_stage_all_and_lsmnmt(tmp_path):
    c = comparison(tmp_path, cpu=False)
    stage_all = parsed(c.train_command("hltmt", Hyper(), seed=1, updates=8, save_dir="s", stage="all", pool=1))
    assert (stage_all.hlt_stage, stage_all.slp_pool_size, stage_all.cpu) == ("all", 1, False)
    ls = parsed(c.train_command("lsmnmt", Hyper(), seed=1, updates=8, save_dir="s", ls_langs=["en", *LANGS]))
    assert (ls.high_resource_langs, ls.slp_pool_size, ls.slp_language_specific) == ("en,fr,de,gu", 4, True)


def test_staged_mnmt_trains_the_high_directions_first(tmp_path):
    c = Comparison(str(tmp_path), LANGS, recipe.directions(LANGS, to_english=False), ["de", "fr"])
    assert c.high_pairs() == ["en-fr", "en-de"]
    args = parsed(c.train_command("mnmt-staged", Hyper(), seed=1, updates=8, save_dir="s", pairs=c.high_pairs()))
    assert args.lang_pairs == "en-fr,en-de" and args.task == recipe.BASELINE_TASK


def test_driver_options_come_last_and_win(tmp_path):
    cmd = comparison(tmp_path).train_command(
        "mnmt", Hyper(), seed=1, updates=8, save_dir="s", options=["--log-interval", "7", "--no-save"]
    )
    args = parsed(cmd)
    assert args.log_interval == 7 and args.no_save


def test_another_criterion_and_the_options_after_the_program(tmp_path):
    c = comparison(tmp_path)
    own = c.system_args("hltmt", Hyper())
    assert own[own.index("--criterion") + 1] == "hltmt_cross_entropy" and "--disparity-weight" in own
    lsce = parsed(
        c.train_command("hltmt", Hyper(), seed=1, updates=8, save_dir="s", criterion="label_smoothed_cross_entropy")
    )
    assert (lsce.criterion, lsce.hlt_stage, lsce.task) == ("label_smoothed_cross_entropy", "high", recipe.PLUGIN_TASK)
    mnmt = c.system_args("mnmt", Hyper(), criterion="cross_entropy")
    assert mnmt[mnmt.index("--criterion") + 1] == "cross_entropy"
    args = dict(seed=2, updates=9, save_dir="s", options=["--no-save"])
    assert c.train_command("mnmt", Hyper(), **args)[3:] == c.train_args("mnmt", Hyper(), **args)


def test_unknown_system(tmp_path):
    with pytest.raises(ValueError, match="unknown system 'moe'"):
        comparison(tmp_path).system_args("moe", Hyper())


def test_score_is_sacrebleus():
    refs = ["the cat sat on the mat", "a dog barked loudly"]
    signatures = {}
    same = recipe.score(refs, refs, signatures)
    assert same == {"bleu": pytest.approx(100.0), "chrf": pytest.approx(100.0)}
    assert signatures["BLEU"].startswith("nrefs:1") and "chrF" in signatures
    worse = recipe.score(["the cat", "dog"], refs)
    assert 0 <= worse["bleu"] < 100 and 0 < worse["chrf"] < 100


SIMPLE_LOG = """\
2026-12-05 07:00:00 | INFO | fairseq_cli.train | num. shared model params: 1,234 (num. trained: 1,234)
2026-12-05 07:00:01 | INFO | fairseq_cli.train | num. expert model params: 66 (num. trained: 66)
2026-12-05 07:00:02 | INFO | train_inner | epoch 001:     10 / 40 loss=9.5, ppl=724.1, wps=1500.5, ups=2.5, num_updates=10, lr=0.001
2026-12-05 07:00:03 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.75 | nll_loss 8.1 | ppl 274.3 | wps 900 | num_updates 10
2026-12-05 07:00:04 | INFO | train_inner | epoch 001:     20 / 40 loss=8.5, ppl=362, wps=1600, ups=2.6, num_updates=20, lr=0.002
2026-12-05 07:00:05 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.25 | nll_loss 7.6 | ppl 194 | num_updates 20
2026-12-05 07:00:06 | INFO | fairseq_cli.train | done training in 6.5 seconds
"""


def test_train_log_simple_format(tmp_path):
    log = recipe.parse_train_log(SIMPLE_LOG)
    assert [p["num_updates"] for p in log.progress] == [10, 20] and log.progress[1]["ups"] == 2.6
    assert [v["num_updates"] for v in log.valid] == ["10", "20"] and log.valid_loss == 8.25
    assert (log.updates, log.params, log.wall) == (20, 1300, 6.5)
    path = tmp_path / "train.log"
    assert recipe.read_train_log(str(path)).updates == 0  # not written yet
    path.write_text(SIMPLE_LOG.splitlines()[2][:-30] + "\n")  # a line cut while being written
    assert recipe.read_train_log(str(path)).updates == 0


def test_train_log_json_format():
    text = (
        '2026-12-05 07:00:02 | INFO | train_inner | {"epoch": 1, "loss": "9.5", "wps": "1500", "num_updates": "10"}\n'
        'INFO:train_inner:{"epoch": 1, "loss": "8.5", "wps": "1700", "num_updates": "20", "lr": "0.002"}\n'
    )
    log = recipe.parse_train_log(text)
    assert [p["num_updates"] for p in log.progress] == [10.0, 20.0] and log.progress[1]["wps"] == 1700.0
    assert log.steady("wps") == 1700.0 and log.steady("ups") == 0.0  # the first line holds the start-up
    one = recipe.parse_train_log(text.splitlines()[0])
    assert one.steady("wps") == 1500.0 and recipe.parse_train_log("").steady("wps") is None


def test_every_whole_validation_is_read(tmp_path):
    log = tmp_path / "train.log"
    line = "epoch 001 | valid on 'valid' subset | loss {} | nll_loss 1.2 | ppl 2.3 | num_updates {}\n"
    log.write_text(
        "noise\n" + line.format("5.5", 100) + "valid on 'valid' subset | loss 1\n" + line.format("4.5", 200),
        encoding="utf-8",
    )
    points = recipe.read_train_log(str(log)).valid
    assert [(p["loss"], p["num_updates"]) for p in points] == [("5.5", "100"), ("4.5", "200")]


def test_the_data_is_prepared_by_one_hltmt_prepare_data_line(tmp_path):
    from hltmt_plugin.cli.prepare_data import build_parser

    raw = str(tmp_path)  # an input that is there: the parser refuses a missing one
    cmd = recipe.prepare_command(raw, "out", ["de", "gu"], vocab=600, segment_words=(12, 16), max_test=8)
    assert cmd[1:3] == ["-m", "hltmt_plugin.cli.prepare_data"]
    args = build_parser().parse_args(cmd[3:])
    assert (args.raw, args.out, args.langs, args.vocab_size, args.max_test) == (raw, "out", "de,gu", 600, 8)
    assert "--segment-words" in cmd and "--max-train" not in cmd and "--max-valid" not in cmd
    xlmr = recipe.prepare_command("raw", "out", ["de"], options=["--spm-model", "s.model", "--dict", "d.txt"])
    assert "--vocab-size" not in xlmr and xlmr[-4:] == ["--spm-model", "s.model", "--dict", "d.txt"]


def test_every_direction_decodes_under_the_plugins_task(tmp_path):
    from fairseq import options

    from hltmt_plugin.cli import register

    register()
    common = comparison(tmp_path).generate_args(max_tokens=20000, gen_len=(0, 16), fp16=True)
    args = options.parse_args_and_arch(
        options.get_generation_parser(), [*common, "--path", "m.pt", "-s", "en", "-t", "de"]
    )
    assert (args.task, args.gen_subset, args.beam, args.max_tokens) == (recipe.PLUGIN_TASK, "test", 5, 20000)
    assert (args.max_len_a, args.max_len_b, args.post_process, args.fp16) == (0, 16, "sentencepiece", True)
    valid = comparison(tmp_path).generate_args(subset="valid", beam=4)
    assert valid[valid.index("--max-len-a") + 1] == "1.5" and "--fp16" not in valid
    assert valid[valid.index("--gen-subset") + 1] == "valid" and valid[valid.index("--beam") + 1] == "4"


# ---- a driver's --langs and --high, read once by the recipe
@pytest.mark.parametrize(
    "langs, high, message",
    [
        ("de,de", None, "--langs names de twice"),
        ("de,,gu", None, "--langs names an empty language"),
        ("de,gu", "de,de", "--high names de twice"),
        ("de,gu", "fr", "--high fr not in --langs (de,gu): HLT-MT's pool would have no language of its own"),
        ("gu,hi", None, "no high-resource language among --langs (gu,hi): HLT-MT needs at least one"),
    ],
)
def test_languages_that_cannot_work_are_refused_in_one_line(langs, high, message):
    from hltmt_plugin.corpora import WMT10_HIGH, WMT10_LANGS
    from hltmt_plugin.errors import HltmtConfigError

    with pytest.raises(HltmtConfigError) as error:
        recipe.languages_of(langs, high, WMT10_LANGS, WMT10_HIGH)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_drivers_languages_are_its_options_else_its_defaults(tmp_path):
    def of(langs=None, high=None, **kw):
        args = argparse.Namespace(langs=langs, high=high)
        return Comparison.from_args(args, str(tmp_path), langs=LANGS, high=["cs", "de", "fr"], **kw)

    c = of()
    assert (c.data, c.langs, c.high, c.pairs) == (str(tmp_path), LANGS, ["de", "fr"], recipe.directions(LANGS))
    assert (of("de,gu").langs, of("de,gu").high) == (["de", "gu"], ["de"])
    assert of("de,gu", "gu").high == ["gu"] and of(high="gu,fr").high == ["gu", "fr"]
    assert of(to_english=False).pairs == ["en-fr", "en-de", "en-gu"] and of(cpu=False).cpu is False


def test_the_pool_size_is_the_recipes_at_most_the_drivers_bound(tmp_path):
    args = argparse.Namespace(langs=None, high="fr,de,gu")
    hyper = Hyper()
    for bound, size in ((recipe.POOL_SIZE, 3), (2, 2), (5, 3)):
        c = Comparison.from_args(args, str(tmp_path), langs=LANGS, high=[], max_pool=bound)
        line = c.train_command("hltmt", hyper, seed=1, updates=8, save_dir="s")
        assert line[line.index("--slp-pool-size") + 1] == str(size)
    assert "--slp-pool-size" not in c.train_command("mnmt", hyper, seed=1, updates=8, save_dir="s")


@pytest.mark.parametrize("size", ["tiny", "small", "base", "big", "xlmr_base"])
def test_the_hyper_parameters_name_a_size_of_the_one_table(tmp_path, size):
    from hltmt_plugin.sizes import MODEL_SIZES

    hyper = Hyper(model=size)
    assert (hyper.hltmt_arch, hyper.baseline_arch) == (MODEL_SIZES[size].hltmt_arch, MODEL_SIZES[size].baseline_arch)
    line = comparison(tmp_path).train_command("mnmt", hyper, seed=1, updates=8, save_dir="s")
    assert line[line.index("--arch") + 1] == MODEL_SIZES[size].baseline_arch
    with pytest.raises(KeyError):
        Hyper(model="huge")
