"""hltmt_plugin.export.model_card: the card a Hub user reads, from an export's manifest record
and the checkpoint's facts; what is not known is said to be unknown."""

import pytest

from hltmt_plugin.export import model_card

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


def record(**changes):
    found = {
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


def test_the_card_has_the_hubs_metadata_the_directions_groups_and_the_command():
    facts = {"system": "hltmt", "search": {"beam": 5, "lenpen": 1.0, "max_len": 200}, "name": "hltmt"}
    facts["command"] = ["fairseq-train data", "--task hltmt_translation", "--arch hltmt_transformer_tiny"]
    card = model_card.card(record(), facts)
    head, body = card.split("\n---\n", 1)
    assert head.startswith("---\nlanguage:\n- en\n- de\n- fr\n") and "pipeline_tag: translation" in head
    assert "library_name: transformers" in head and "license: other" in head  # no licence recorded
    assert "Trained directions: en-de, en-fr." in body
    assert "| `models/m0` | de |" in body and "| `models/universal` | en, fr |" in body
    assert 'subfolder="models/m0"' in body and ">>de<< The file could not be saved." in body
    assert "fairseq-train data \\\n    --task hltmt_translation" in body
    assert "No metrics were recorded" in body and "not recorded with the checkpoint" in body


def test_zero_shot_directions_metrics_and_the_source_convention():
    facts = {
        "metrics": {"scores": {"en-de": 14.34}, "signature": "nrefs:1|case:mixed|tok:13a|smooth:exp|version:2.6.0"}
    }
    card = model_card.card(record(lang_pairs=["en-de", "fr-en"], encoder_langtok="src", decoder_langtok=True), facts)
    assert "Zero-shot directions (never trained; output often in the wrong language): en-en" not in card
    assert "fr-de" in card.split("Zero-shot directions")[1].split("\n")[0]  # fr read, de produced: zero-shot
    assert "forced_bos_token_id=tok.convert_tokens_to_ids('>>de<<')" in card
    assert "| en-de | 14.34 |" in card and "sacreBLEU signature: `nrefs:1|" in card
    assert "model-index:" in card and "value: 14.34" in card
