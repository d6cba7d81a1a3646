"""What a translation call returns (hltmt_plugin/hub/results.py): a :class:`Translation` per
sentence and its JSON form (``error`` only on a failed sentence, ``zero_shot`` only in a zero-shot
direction), and :class:`TranslationErrors`, a plugin error that carries every sentence's result."""

import json

import pytest

from hltmt_plugin.errors import HltmtError, HltmtInputError
from hltmt_plugin.hub.results import Translation, TranslationErrors

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


def test_a_translated_sentence_is_every_field_but_error_and_zero_shot():
    done = Translation(
        line=2, src="en", tgt="de", source="Hello.", text="Hallo.", score=-0.5, tokens=3, routing={"slp": "m0"}
    )
    assert done.to_dict() == {
        "line": 2,
        "src": "en",
        "tgt": "de",
        "source": "Hello.",
        "text": "Hallo.",
        "score": -0.5,
        "tokens": 3,
        "routing": {"slp": "m0"},
    }
    assert json.loads(json.dumps(done.to_dict())) == done.to_dict()


def test_a_failed_sentence_keeps_its_error_and_a_zero_shot_one_says_so():
    failed = Translation(line=1, src="en", tgt="xx", source="Hi.", error="no language xx")
    assert failed.to_dict()["error"] == "no language xx" and failed.to_dict()["text"] is None
    assert "zero_shot" not in failed.to_dict()
    zero_shot = Translation(line=3, src="gu", tgt="hi", source="x", text="y", zero_shot=True)
    assert zero_shot.to_dict()["zero_shot"] is True and "error" not in zero_shot.to_dict()


def test_translation_errors_is_a_plugin_input_error_carrying_every_result_in_input_order():
    ok = Translation(line=1, src="en", tgt="de", source="a", text="b")
    bad = Translation(line=2, src="en", tgt="xx", source="c", error="no language xx")
    error = TranslationErrors("1 of 2 sentences failed: line 2", [ok, bad], [bad])
    assert isinstance(error, HltmtInputError) and isinstance(error, HltmtError)
    assert str(error) == "1 of 2 sentences failed: line 2"
    assert error.results == [ok, bad] and error.failed == [bad]
