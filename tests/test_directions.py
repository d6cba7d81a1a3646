"""hltmt_plugin.directions: a direction is trained (one of --lang-pairs), zero-shot (the source
a source of some trained direction, the target a target of some trained direction, the pair not
trained) or refused (the target never produced, or the source never read: a language seen only
as a target is not read); a language whose adapters were imported counts as read and produced; a
model without a token naming the target serves one target at most."""

from argparse import Namespace

import pytest

from hltmt_plugin.directions import (
    REFUSED,
    TRAINED,
    TRAINED_KEY,
    ZERO_SHOT,
    TrainedDirections,
    extend_trained,
    trained_pairs,
)
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

ENGLISH_TO_X = "en-de,en-fr,en-gu"  # the shape of the study's models


@pytest.mark.parametrize(
    "src, tgt, kind",
    [
        ("en", "de", TRAINED),
        ("en", "gu", TRAINED),
        ("de", "en", REFUSED),  # en was never a target
        ("fr", "de", REFUSED),  # fr only a target: never read
        ("de", "de", REFUSED),
        ("hi", "de", REFUSED),  # hi in no trained direction
        ("en", "hi", REFUSED),
    ],
)
def test_english_to_x(src, tgt, kind):
    assert TrainedDirections(ENGLISH_TO_X).kind(src, tgt) == kind


def test_both_sides_and_lists():
    both = TrainedDirections(["en-de", "de-en", "en-fr"])
    assert (
        both.kind("de", "en") == TRAINED and both.kind("de", "fr") == ZERO_SHOT and both.kind("de", "de") == ZERO_SHOT
    )
    assert both.targets == ["de", "en", "fr"] and both.sources == ["de", "en"]


@pytest.mark.parametrize(
    "src, tgt, kind",
    [
        ("de", "fr", ZERO_SHOT),  # de a source (de-en), fr a target (en-fr)
        ("fr", "en", REFUSED),  # fr only a target: the encoder never read it
        ("fr", "de", REFUSED),
        ("en", "gu", REFUSED),  # gu only a source: the model never produced it
        ("gu", "de", ZERO_SHOT),
    ],
)
def test_the_source_must_have_been_a_source_and_the_target_a_target(src, tgt, kind):
    assert TrainedDirections("en-de,en-fr,de-en,gu-en").kind(src, tgt) == kind


def test_a_language_seen_only_as_a_target_is_refused_as_a_source_with_the_reason():
    with pytest.raises(
        HltmtInputError, match=r"^direction fr-de refused: the model never read fr \(it was only a target\); "
    ):
        TrainedDirections("en-de,en-fr,de-en").check("fr", "de", zero_shot=True)
    with pytest.raises(HltmtInputError, match=r"^direction en-gu refused: the model never produced gu; "):
        TrainedDirections("en-de,gu-en").check("en", "gu", zero_shot=True)


def test_a_model_without_a_target_token_serves_its_one_target_or_nothing():
    options = {"lang_pairs": "de-en,fr-en", "encoder_langtok": "src", "decoder_langtok": False}
    one_target = TrainedDirections.from_options(options)
    assert not one_target.marked
    assert [one_target.kind(*d) for d in [("de", "en"), ("fr", "en"), ("en", "de")]] == [TRAINED, TRAINED, REFUSED]
    several = TrainedDirections.from_options(
        Namespace(lang_pairs="en-de,en-fr", encoder_langtok=None, decoder_langtok=False)
    )
    assert several.kind("en", "de") == REFUSED and several.kind("en", "fr") == REFUSED
    with pytest.raises(
        HltmtInputError,
        match=r"^direction en-de refused: the model was trained without a token naming the target language "
        r"\(neither --encoder-langtok tgt nor --decoder-langtok\), so it cannot be told which of de,fr to produce",
    ):
        several.check("en", "de", zero_shot=True)
    for marked in ({"encoder_langtok": "tgt"}, {"encoder_langtok": "src", "decoder_langtok": True}):
        assert TrainedDirections.from_options({"lang_pairs": "en-de,en-fr", **marked}).kind("en", "de") == TRAINED
    for main, marked in [(("src", None), False), (("tgt", None), True), (("src", "tgt"), True)]:
        assert (
            TrainedDirections.from_options({"lang_pairs": "en-de,en-fr", "langtoks": {"main": main}}).marked is marked
        )


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
    both = TrainedDirections("en-de,en-fr,de-en")
    with pytest.raises(
        HltmtInputError,
        match=r"direction de-fr is zero-shot \(the model was trained on "
        r"en-de,en-fr,de-en \(targets de,en,fr\)\): translated only with "
        r"zero_shot=True \(hltmt-translate --zero-shot\)",
    ):
        both.check("de", "fr", zero_shot=False)
    assert both.check("de", "fr", zero_shot=True) == ZERO_SHOT


def test_check_command_names_what_the_command_line_gave_and_the_checkpoint():
    both = TrainedDirections("en-de,en-fr,de-en")
    assert both.check_command("en", "de", zero_shot=False) == TRAINED
    assert both.check_command("de", "fr", zero_shot=True) == ZERO_SHOT
    with pytest.raises(
        HltmtConfigError,
        match=r"^-s fr -t de: direction fr-de refused: the model never read fr \(it was only a target\); the "
        r"checkpoint was trained on en-de,en-fr,de-en \(targets de,en,fr\)$",
    ):
        both.check_command("fr", "de", zero_shot=True)
    with pytest.raises(
        HltmtConfigError,
        match=r"^--lang-pairs de-fr: direction de-fr is zero-shot \(the checkpoint was trained on .*\): decoded "
        r"only with --task X$",
    ):
        both.check_command("de", "fr", zero_shot=False, option="--task X", given="--lang-pairs de-fr")


# ---- the directions kept when a language is added (extend_trained, trained_pairs) ------------


def test_a_model_trained_further_keeps_its_directions_and_adds_the_new_ones():
    assert extend_trained("en-fr,fr-en", ["en-hi", "en-fr", "hi-en"]) == ["en-fr", "fr-en", "en-hi", "hi-en"]
    # a run on en-hi,hi-en from a base trained on en-fr,fr-en: every direction trained, none zero-shot
    options = Namespace(lang_pairs="en-hi,hi-en", adapter_langs="en,fr,hi", encoder_langtok="tgt")
    setattr(options, TRAINED_KEY, ",".join(extend_trained("en-fr,fr-en", options.lang_pairs)))
    directions = TrainedDirections.from_options(options)
    assert [directions.kind(*p.split("-")) for p in ("en-fr", "fr-en", "en-hi", "hi-en")] == [TRAINED] * 4
    assert directions.kind("fr", "hi") == ZERO_SHOT and directions.added == []
    # without the stored key (a model trained from scratch): its --lang-pairs, the others added
    del options.hltmt_trained_directions
    assert TrainedDirections.from_options(options).kind("en", "fr") == ZERO_SHOT


@pytest.mark.parametrize("stored", ["", "en", "en-fr,en fr", ["en-fr", "-"], 5, "en-fr,de-en-x"])
def test_stored_trained_directions_that_are_not_a_list_of_directions_are_refused_in_one_line(stored):
    options = {"lang_pairs": "en-fr", TRAINED_KEY: stored}
    with pytest.raises(HltmtInputError, match=rf"^the checkpoint's trained directions \({TRAINED_KEY}\) hold "):
        trained_pairs(options)
    assert trained_pairs({"lang_pairs": "en-fr", TRAINED_KEY: "en-fr,en-hi"}) == ["en-fr", "en-hi"]
