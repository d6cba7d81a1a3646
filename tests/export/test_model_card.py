"""hltmt_plugin.export.model_card: the card a Hub user reads, from an export's manifest record
and what the project records (the checkpoint's stored options and update counts, the data,
the licence and metrics given to hltmt-export); what is not known is said to be unknown. On the
committed models, the card's fields against the runs' own records (their training logs and
scores)."""

import json
import os
import re
import shlex

import pytest
import yaml

from conftest import ROOT
from hltmt_plugin.errors import HltmtError
from hltmt_plugin.export import model_card

MODELS = os.path.join(ROOT, "docs", "results", "cpu-study", "models")
RUNS = os.path.join(ROOT, "docs", "results", "cpu-study", "runs")
BLEU_SIG = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
CHRF_SIG = "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0"


def record(**changes):
    found = {
        "engine": "transformers",
        "langs": ["en", "de", "fr"],
        "lang_pairs": ["en-de", "en-fr"],
        "encoder_langtok": "tgt",
        "decoder_langtok": False,
        "targets": {"en": "universal", "de": "m0", "fr": "universal"},
        "models": {"m0": "models/m0", "universal": "models/universal"},
        "language_codes": {"en": ">>en<<", "de": ">>de<<", "fr": ">>fr<<"},
        "source": {"checkpoint": "hltmt.pt", "class": "MarianMTModel", "transformers": "5.25.0"},
    }
    found.update(changes)
    return found


def split(card):
    head, body = card.split("\n---\n", 1)
    return yaml.safe_load(head[len("---\n") :]), body


@pytest.mark.fast
def test_the_card_has_the_hubs_metadata_the_directions_groups_and_the_command():
    facts = {"system": "hltmt", "search": {"beam": 5, "lenpen": 1.0, "max_len": 200}, "name": "hltmt"}
    facts["command"] = ["fairseq-train data", "--task hltmt_translation", "--arch hltmt_transformer_tiny"]
    meta, body = split(model_card.card(record(), facts))
    assert meta["language"] == ["en", "de", "fr"] and meta["library_name"] == "transformers"
    assert "pipeline_tag" not in meta and "license" not in meta  # no translation pipeline; no licence given
    assert "Trained directions: en-de, en-fr." in body and "(en never a target)" in body
    assert "| `models/m0` | de |" in body and "| `models/universal` | fr |" in body  # en is no target
    only_en = model_card.card(record(targets={"en": "universal", "de": "m0", "fr": "m1"}), facts)
    assert "| `models/universal` | none (en: never a target) |" in only_en
    assert 'subfolder="models/m0"' in body and ">>de<< The file could not be saved." in body
    # the transformers releases the card names are the ones the deploying page states
    assert f"loads with transformers {model_card.TRANSFORMERS_VERSIONS}" in body
    with open(os.path.join(ROOT, "docs", "deploying.md"), encoding="utf-8") as f:
        assert "loads with transformers 4.57 or later, 4.x and 5.x alike" in " ".join(f.read().split())
    assert model_card.TRANSFORMERS_VERSIONS == "4.57 or later (4.x and 5.x)"
    assert "translate with `generate`" in body and "model.generate(**batch)" in body
    assert "fairseq-train data \\\n    --task hltmt_translation" in body
    assert "No metrics were given" in body and "Licence: not given to hltmt-export" in body


@pytest.mark.fast
def test_zero_shot_directions_metrics_and_the_source_convention():
    facts = {
        "name": "m",
        "metrics": {"scores": {"en-de": {"bleu": 14.34}}, "signatures": {"BLEU": BLEU_SIG}, "dataset": "a test"},
        "license": {"license": "other", "license_name": "debmt10", "license_link": "LICENSE"},
    }
    card = model_card.card(record(lang_pairs=["en-de", "fr-en"], encoder_langtok="src", decoder_langtok=True), facts)
    meta, body = split(card)
    assert "fr-de" in body.split("Zero-shot directions")[1].split("\n")[0]  # fr read, de produced: zero-shot
    assert "forced_bos_token_id=tok.convert_tokens_to_ids('>>de<<')" in body
    assert "| en-de | 14.34 |" in body and f"sacreBLEU signature, BLEU: `{BLEU_SIG}`" in body
    assert (meta["license"], meta["license_name"], meta["license_link"]) == ("other", "debmt10", "LICENSE")
    (result,) = meta["model-index"][0]["results"]
    assert result["metrics"] == [{"type": "bleu", "value": 14.34, "name": "BLEU en-de", "config": BLEU_SIG}]
    assert result["dataset"]["name"] == "a test" and result["task"]["type"] == "translation"


@pytest.mark.fast
@pytest.mark.parametrize(
    "given,match",
    [
        ({"license": "Not A Licence"}, "--license 'Not A Licence': give a licence identifier"),
        ({"license": "other", "license_name": "x"}, r"--license other needs --license-link \(not given: a file"),
        (
            {"license": "other", "license_name": "x", "license_link": ""},
            r"--license other needs --license-link \(empty: a file of the folder such as LICENSE, or a URL\), as",
        ),
        ({"license": "other"}, r"needs --license-name \(not given: .*\) and --license-link \(not given: "),
        ({"license": "mit", "license_link": "LICENSE"}, "add --license other"),
        ({"bleu_signature": BLEU_SIG}, "go with --metrics FILE"),
        ({"metrics": "SCORES"}, "no sacreBLEU signature for its BLEU scores: give --bleu-signature"),
        ({"metrics": "SCORES", "bleu_signature": BLEU_SIG}, "no sacreBLEU signature for its chrF scores"),
        ({"metrics": "PARTIAL", "bleu_signature": BLEU_SIG}, "metrics record .*lacks 'bleu': a partial record"),
        ({"data_sizes": "PARTIAL"}, "data sizes record .*field 'train' must be a map"),
    ],
)
def test_card_options_that_do_not_hold_are_one_line(tmp_path, given, match):
    (tmp_path / "partial.json").write_text('{"scores": {"en-de": {"chrf": 40.1}}, "train": 3}')
    files = {"SCORES": os.path.join(RUNS, "hltmt.seed1", "scores.json"), "PARTIAL": str(tmp_path / "partial.json")}
    given = {k: files.get(v, v) for k, v in given.items()}
    with pytest.raises(HltmtError, match=match) as refused:
        model_card.read_options(given)
    assert "\n" not in str(refused.value)


@pytest.mark.fast
def test_one_model_in_the_folder_itself_and_a_data_folder_whose_sizes_are_not_known():
    plain = record(targets={"en": "main", "de": "main", "fr": "main"}, models={"main": "."})
    card = model_card.card(plain, {"data": {"folder": "/runs/data/bin", "sizes": {}}, "updates": [2000, 5000]})
    assert "One model serves every direction: the folder itself." in card
    assert "The data folder the run read, `bin`." in card and "`--data-sizes FILE`" in card
    assert "The checkpoint records 2 runs, each with the update count it was saved at: 2,000, 5,000." in card
    assert "The last run's command" in card and 'from_pretrained("MODEL_FOLDER")\n' in card


@pytest.mark.fast
def test_a_model_that_serves_no_direction_says_so():
    card = model_card.card(record(encoder_langtok=None, language_codes={}), {})
    assert "It serves no direction" in card and "translated into: none" in card


@pytest.mark.fast
def test_metrics_of_a_direction_the_model_never_learned_are_refused():
    facts = {"metrics": {"scores": {"en-de": {"bleu": 1.0}, "de-fr": {"bleu": 2.0}}, "signatures": {"BLEU": "s"}}}
    with pytest.raises(HltmtError, match="--metrics: de-fr is not a direction the model was trained on"):
        model_card.check_metrics(record(), facts)


def run_command(log: str):
    """The fairseq-train options a run's log records on its first line (``$ python -m fairseq_cli.train ...``)."""
    with open(log, encoding="utf-8") as f:
        words = shlex.split(f.readline()[2:])
    return words[words.index("fairseq_cli.train") + 1 :]


def parsed(words):
    from fairseq import options

    import hltmt_plugin

    plugin = os.path.dirname(os.path.abspath(hltmt_plugin.__file__))
    at = words.index("--user-dir") + 1
    words = [*words[:at], plugin, *words[at + 1 :]]
    return vars(options.parse_args_and_arch(options.get_training_parser(), input_args=words))


@pytest.mark.fast
@pytest.mark.parametrize("name", ["hltmt", "lsmnmt", "mnmt", "mnmt-staged"])
def test_the_training_command_reads_back_as_the_one_the_run_recorded(name):
    from hltmt_plugin.compat.safe_loading import load_checkpoint

    state = load_checkpoint(os.path.join(MODELS, f"{name}.pt"))
    words, unshown = model_card.training_command(model_card.stored_options(state["cfg"]))
    assert unshown == []
    card = shlex.split(" ".join(words).replace('"$USER_DIR"', "USER_DIR"))[1:]
    recorded = run_command(os.path.join(RUNS, f"{name}.seed1", "train.log"))
    assert any(os.path.isabs(w) for w in recorded)  # the run was given paths of its machine
    assert not any(os.path.isabs(w) for w in card)  # the card names them by their last name only
    assert parsed(card) == parsed([model_card.shown_path(w) if os.path.isabs(w) else w for w in recorded])


@pytest.mark.fast
def test_a_stored_option_no_command_line_gives_back_is_named_not_dropped():
    from hltmt_plugin.compat.safe_loading import load_checkpoint

    stored = model_card.stored_options(load_checkpoint(os.path.join(MODELS, "mnmt.pt"))["cfg"])
    stored["num_workers"] = None  # no command line gives None (its default is 1)
    words, unshown = model_card.training_command(stored)
    assert unshown == ["--num-workers"] and "--max-tokens 4096" in words
    card = model_card.card(record(), {"command": words, "unshown": unshown})
    assert "Stored options that no command line gives back, not shown: --num-workers." in card


def test_the_card_of_a_committed_model_states_the_runs_records(tmp_path):
    pytest.importorskip("transformers")
    from hltmt_plugin.experiments.runs import read_scores
    from hltmt_plugin.export.transformers import export

    scores = os.path.join(RUNS, "hltmt.seed1", "scores.json")
    given = {"metrics": scores, "bleu_signature": BLEU_SIG, "chrf_signature": CHRF_SIG, "dataset": "DebMT-10"}
    given.update(license="other", license_name="debmt10-licences", license_link="https://example.org/debmt10")
    given["data_sizes"] = os.path.join(ROOT, "docs", "results", "cpu-study", "data.json")
    export(os.path.join(MODELS, "hltmt.pt"), str(tmp_path / "hf"), card=given)
    meta, body = split((tmp_path / "hf" / "README.md").read_text())
    run = read_scores(scores)
    assert meta["license_name"] == "debmt10-licences" and "pipeline_tag" not in meta
    found = {r["task"]["name"].split()[-1]: r["metrics"] for r in meta["model-index"][0]["results"]}
    assert {d: (m[0]["value"], m[1]["value"]) for d, m in found.items()} == {
        d: (s["bleu"], s["chrf"]) for d, s in run["scores"].items()
    }
    assert {m[0]["config"] for m in found.values()} == {BLEU_SIG} and {m[1]["config"] for m in found.values()} == {
        CHRF_SIG
    }
    recorded = parsed(run_command(os.path.join(RUNS, "hltmt.seed1", "train.log")))
    assert f"the data folder the run read, `{os.path.basename(recorded['data'])}`" in body
    assert ROOT not in body and ROOT not in str(meta)  # no path of the machine that built it
    assert not [w for w in body.split() if w.strip("`'\"(),.:;").startswith("/")]
    from hltmt_plugin.compat.safe_loading import load_checkpoint

    state = load_checkpoint(os.path.join(MODELS, "hltmt.pt"))
    stored = model_card.stored_options(state["cfg"])
    size = re.search(
        r"Size: ([\d,]+) parameters in the checkpoint \(`--arch (\S+)`, (\d+) encoder and (\d+) decoder", body
    )
    assert size, body
    assert (size.group(2), int(size.group(3)), int(size.group(4))) == (
        stored["arch"],
        stored["encoder_layers"],
        stored["decoder_layers"],
    )
    weights = {k: v.numel() for k, v in state["model"].items() if v.is_floating_point() and not k.endswith(".version")}
    tied = ["decoder.output_projection.weight"] if stored.get("share_decoder_input_output_embed") else []
    tied += (
        ["decoder.embed_tokens.weight", "decoder.output_projection.weight"]
        if stored.get("share_all_embeddings")
        else []
    )
    expected = sum(weights.values()) - sum(weights[k] for k in set(tied))  # a tied table is one parameter
    assert int(size.group(1).replace(",", "")) == expected, (size.group(0), expected)
    assert f"Trained for {run['setting']['updates']:,} updates" in body and "--max-update 6000" in body
    assert "--hlt-stage high" in body and "--high-stage-updates 2000" in body
    assert "fr 18,805" in body and "93,727 in all" in body
    setting = run["setting"]  # how the scores were made, from the record the scores came with
    assert (
        f"Scored on a split the metrics record does not name, segments of at most {setting['max_en_words']} English "
        f"words and at most {setting['max_xx_words']} target words; translated with beam {setting['beam']}, at most "
        f"{setting['gen_len'][0]:g} x the source's length + {setting['gen_len'][1]:g} tokens"
    ) in body
    assert "| `models/universal` | lv, ro, hi, gu |" in body  # en is never a target


@pytest.mark.fast
def test_the_usage_example_feeds_english_where_the_model_was_trained_from_english():
    many = record(lang_pairs=["af-de", "de-af", "en-de", "de-en"], langs=["af", "de", "en"], encoder_langtok="src")
    many.update(decoder_langtok=True, targets={"af": "main", "de": "main", "en": "main"}, models={"main": "."})
    many["language_codes"] = {"af": "__af__", "de": "__de__", "en": "__en__"}
    body = model_card.card(many, {})
    assert "__en__ The file could not be saved." in body and "__af__ The file could not be saved." not in body
    assert model_card._example(many, "main") == ("en", "de")
    only = record(lang_pairs=["de-en"], langs=["de", "en"], targets={"de": "main", "en": "main"}, models={"main": "."})
    assert model_card._example(only, "main") == ("de", "en")  # no English source: the trained pair's


@pytest.mark.fast
def test_runs_are_counted_each_as_the_checkpoint_records_it():
    card = model_card.card(record(), {"updates": [0, 2, 2], "imported": [0], "max_update": 2})
    assert (
        "records 3 runs, each with the update count it was saved at: 0 (an import by hltmt-import: no training), 2, 2"
        in card
    )
    assert "by hltmt-import" not in model_card.card(record(), {"updates": [0, 2], "max_update": 2})  # a 0 alone
    assert "Trained for" not in card
    one = model_card.card(record(), {"updates": [5000], "max_update": 6000})
    assert "Trained for 5,000 updates, as the checkpoint records. The last run was given `--max-update 6000`" in one


@pytest.mark.fast
def test_a_path_of_the_building_machine_is_shown_by_its_last_name():
    assert model_card.shown_path("/home/me/runs/study/data/bin") == "bin"
    assert model_card.shown_path("runs/quickstart/bin") == "runs/quickstart/bin"  # the user's own words
    assert model_card.shown_path("/a/shard0:/a/shard1") == "shard0:shard1"
    assert model_card.shown_path("(0.9,0.98)") == "(0.9,0.98)"


@pytest.mark.fast
def test_the_evaluation_is_stated_from_the_metrics_record_or_said_unknown(tmp_path):
    scores = {"en-de": {"bleu": 1.5}}
    stated = tmp_path / "stated.json"
    stated.write_text(json.dumps({"scores": scores, "split": "test", "setting": {"beam": 4, "max_en_words": 9}}))
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"scores": scores}))
    for path, said in (
        (stated, "Scored on the test split, segments of at most 9 English words; translated with beam 4 (as"),
        (
            bare,
            "Scored on a split the metrics record does not name, no segment filter recorded; translated with a beam",
        ),
    ):
        metrics = model_card.read_metrics(str(path), BLEU_SIG, None)
        assert said in model_card.card(record(), {"metrics": metrics}), path
    (tmp_path / "odd.json").write_text(json.dumps({"scores": scores, "setting": {"beam": "five"}}))
    with pytest.raises(HltmtError, match="beam"):
        model_card.read_metrics(str(tmp_path / "odd.json"), BLEU_SIG, None)


@pytest.mark.fast
def test_the_last_runs_directions_stand_apart_from_those_of_the_model_it_started_from():
    base = record(lang_pairs=["en-de", "en-fr", "de-en", "fr-en", "de-fr", "fr-de"], encoder_langtok="src")
    base.update(decoder_langtok=True, targets={"en": "main", "de": "main", "fr": "main"}, models={"main": "."})
    facts = {"run_pairs": ["en-de", "de-en"], "started_from": "/home/me/imported/checkpoint.pt"}
    body = model_card.card(base, facts)
    assert (
        "Trained directions: en-de, de-en in the last training run (its `--lang-pairs`); 4 more the model it started "
        "from (`checkpoint.pt`) had been trained on: en-fr, de-fr, fr-en, fr-de." in body
    )
    assert "Trained directions: en-de, en-fr, de-en" in model_card.card(base, {"run_pairs": base["lang_pairs"]})


@pytest.mark.fast
def test_the_base_model_is_the_one_the_import_recorded():
    """A model fine-tuned from an hltmt-import names the imported model: ``base_model`` in the
    Hub's metadata and beside the base's directions; a model that was never imported names none."""
    base = record(lang_pairs=["en-de", "en-fr", "de-en"], encoder_langtok="src")
    base.update(decoder_langtok=True, targets={"en": "main", "de": "main", "fr": "main"}, models={"main": "."})
    facts = {"run_pairs": ["en-de"], "started_from": "/x/imported/checkpoint.pt", "base_model": "facebook/m2m100_418M"}
    card = model_card.card(base, facts)
    meta, _ = split(card)
    assert meta["base_model"] == "facebook/m2m100_418M"
    assert "(`checkpoint.pt`, imported from `facebook/m2m100_418M` with hltmt-import) had been trained on" in card
    assert "base_model" not in split(model_card.card(base, {"run_pairs": ["en-de"]}))[0]
