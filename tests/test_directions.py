"""hltmt_plugin.directions: a direction is trained (one of --lang-pairs), zero-shot (both
languages seen in training, the pair not trained) or refused (the target never produced, or the
source never read); a language whose adapters were imported counts as seen and produced."""

from argparse import Namespace

import pytest

from hltmt_plugin.directions import REFUSED, TRAINED, ZERO_SHOT, TrainedDirections
from hltmt_plugin.errors import HltmtInputError

ENGLISH_TO_X = "en-de,en-fr,en-gu"  # the shape of the study's models


@pytest.mark.parametrize(
    "src, tgt, kind",
    [
        ("en", "de", TRAINED),
        ("en", "gu", TRAINED),
        ("de", "en", REFUSED),  # en was never a target
        ("fr", "de", ZERO_SHOT),  # fr seen (as a target), de produced
        ("de", "de", ZERO_SHOT),
        ("hi", "de", REFUSED),  # hi in no trained direction
        ("en", "hi", REFUSED),
    ],
)
def test_english_to_x(src, tgt, kind):
    assert TrainedDirections(ENGLISH_TO_X).kind(src, tgt) == kind


def test_both_sides_and_lists():
    both = TrainedDirections(["en-de", "de-en", "en-fr"])
    assert (
        both.kind("de", "en") == TRAINED and both.kind("fr", "en") == ZERO_SHOT and both.kind("de", "fr") == ZERO_SHOT
    )
    assert both.targets == ["de", "en", "fr"] and both.sources == ["de", "en"]


def test_a_language_whose_adapters_were_imported_is_zero_shot_both_ways():
    directions = TrainedDirections("en-de,en-fr,de-en", "en,de,fr,hi")  # hi imported (hltmt-adapters)
    assert directions.added == ["hi"]
    assert directions.kind("en", "hi") == ZERO_SHOT and directions.kind("hi", "en") == ZERO_SHOT
    assert directions.kind("en", "de") == TRAINED and directions.kind("en", "gu") == REFUSED
    assert "adapters added for hi" in directions.describe()


def test_from_options_reads_a_namespace_or_a_dict():
    found = TrainedDirections.from_options(Namespace(lang_pairs="en-de,en-fr", adapter_langs=None))
    assert found.pairs == ["en-de", "en-fr"] and found.added == []
    assert TrainedDirections.from_options({"lang_pairs": ["en-de"], "adapter_langs": "en,de,gu"}).added == ["gu"]
    assert TrainedDirections.from_options(Namespace()) is None
    assert TrainedDirections.from_options({"lang_pairs": ""}) is None


def test_check_names_the_direction_and_the_training():
    directions = TrainedDirections(ENGLISH_TO_X)
    assert directions.check("en", "de", zero_shot=False) == TRAINED
    with pytest.raises(
        HltmtInputError,
        match=r"^direction de-en refused: the model never produced en; it was "
        r"trained on en-de,en-fr,en-gu \(targets de,fr,gu\)$",
    ):
        directions.check("de", "en", zero_shot=True)
    with pytest.raises(HltmtInputError, match="direction hi-de refused: the model never read hi"):
        directions.check("hi", "de", zero_shot=True)
    with pytest.raises(
        HltmtInputError,
        match=r"direction fr-de is zero-shot \(the model was trained on "
        r"en-de,en-fr,en-gu \(targets de,fr,gu\)\): translated only with "
        r"zero_shot=True \(hltmt-translate --zero-shot\)",
    ):
        directions.check("fr", "de", zero_shot=False)
    assert directions.check("fr", "de", zero_shot=True) == ZERO_SHOT
