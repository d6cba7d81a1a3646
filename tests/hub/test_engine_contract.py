"""The engines' contract, generated over the whole accepted space: random combinations of the
search options (hypothesis) on the study's HLT-MT served as its checkpoint, its CTranslate2 export
and its transformers export. For every combination, each engine either gives the checkpoint's
lines, or the contract refuses that value for that engine (hltmt_plugin.hub.arguments: the
shared bounds, the cost model, an engine's own ``search_limits``) in one line. Sampling is drawn
from each engine's own generator (docs/translating.md), so it is compared where it is
determined: one token to choose from (top-k 1, or the smallest top-p)."""

import math

import pytest

pytest.importorskip("ctranslate2")
pytest.importorskip("transformers")
hypothesis = pytest.importorskip("hypothesis")

from hypothesis import (  # noqa: E402
    HealthCheck,
    given,
    settings,
    strategies as st,  # noqa: E402
)

from hltmt_plugin.errors import HltmtConfigError  # noqa: E402
from hltmt_plugin.hub import arguments  # noqa: E402

ITEMS = [
    ("en", "de", "The file is open."),
    ("en", "fi", "The file could not be saved."),
    ("en", "fr", "Save the file."),
    ("en", "gu", "Open the file."),
]
ENGINES = ("ctranslate2", "transformers")


@pytest.fixture(scope="module")
def engines(study_engines):
    return study_engines


def beam_search():
    """Every deterministic search the contract's types allow (values beyond its bounds included:
    then every engine must refuse them alike)."""
    return st.fixed_dictionaries(
        {
            "beam": st.integers(1, 12),
            "lenpen": st.floats(-12.0, 12.0, allow_nan=False),
            "max_len": st.integers(1, 40),
            "no_repeat_ngram_size": st.sampled_from([0, 2, 3]),
            "min_len": st.integers(1, 6),
        }
    ).map(lambda o: dict(o, nbest=1 + (o["beam"] - 1) // 2))


def one_token_sampling():
    return st.fixed_dictionaries(
        {
            "sampling": st.just(True),
            "beam": st.integers(1, 3),
            "seed": st.integers(0, arguments.MAX_SEED),
            "temperature": st.floats(0.5, 2.0),
            "max_len": st.integers(1, 30),
        }
    ).flatmap(
        lambda o: st.one_of(
            st.just(dict(o, sampling_topk=1)),
            st.floats(1e-300, 1e-30).map(lambda p: dict(o, sampling_topp=p)),  # below and at the contract's floor
            st.just(dict(o, sampling_topp=arguments.MIN_TOPP)),
        )
    )


def run(mt, options):
    try:
        return mt.translate_batch(ITEMS, **options)
    except HltmtConfigError as error:
        assert "\n" not in str(error)
        return ("refused", str(error).split(":")[0])


def refused_by_the_contract_for(mt, options) -> bool:
    """Whether the contract, not the engine's own library, refused ``options`` on ``mt``."""
    search = arguments.search(**options)
    try:
        search = arguments.model_bounds(search, len(mt.dictionary), mt.max_target_positions)
        arguments.engine_bounds(search, mt.search_limits, mt.engine_label())
    except HltmtConfigError:
        return True
    return False


def declared_difference(mt, options) -> bool:
    """Whether ``options`` hold a value the engine declares it accepts with other lines
    (``search_differences``)."""
    search = arguments.search(**options)
    return any(arguments.outside(limit, getattr(search, name)) for name, limit in mt.search_differences.items())


def same_or_refused(engines, options):
    expected = run(engines["checkpoint"], options)
    for name in ENGINES:
        found = run(engines[name], options)
        if found == expected:
            continue
        # a difference is allowed only where the contract refuses that value for that engine, or
        # where the engine declares it (search_differences, each stated in docs/deploying.md)
        refused = isinstance(found, tuple) and refused_by_the_contract_for(engines[name], options)
        assert refused or declared_difference(engines[name], options), (name, options, found)


CHECK = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,  # the same cases every run: a failure is reproduced by running the test again
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)


@CHECK
@given(options=beam_search())
def test_every_accepted_beam_search_gives_the_checkpoints_lines_or_is_refused_for_that_engine(engines, options):
    same_or_refused(engines, options)


@CHECK
@given(options=one_token_sampling())
def test_sampling_from_one_token_is_the_checkpoints_on_every_engine(engines, options):
    same_or_refused(engines, options)


def test_each_declared_difference_is_stated_in_the_deployment_page():
    from conftest import ROOT
    from hltmt_plugin.hub.ct2_engine import Ct2Translator
    from hltmt_plugin.hub.hf_engine import HfTranslator

    page = open(f"{ROOT}/docs/deploying.md", encoding="utf-8").read()
    for engine in (Ct2Translator, HfTranslator):
        for name, limit in {**engine.search_differences, **engine.search_limits}.items():
            assert f"`{name}`" in page and limit.why, (engine.engine_name, name)


def test_the_cases_that_diverged_are_refused_for_the_engine_that_differs(engines):
    """A negative length penalty on transformers (its generate keeps short finished hypotheses
    fairseq's search drops) and a top-p below float32's smallest (0 in CTranslate2) are refused
    in one line; the other engines agree with the checkpoint."""
    hf = engines["transformers"]
    with pytest.raises(HltmtConfigError, match="lenpen -10 is refused on transformers"):
        hf.translate_batch(ITEMS, lenpen=-10)
    assert run(engines["ctranslate2"], {"lenpen": -10}) == run(engines["checkpoint"], {"lenpen": -10})
    for name in ("checkpoint", *ENGINES):
        with pytest.raises(HltmtConfigError, match="sampling_topp must be from"):
            engines[name].translate_batch(ITEMS, beam=1, sampling=True, sampling_topp=1e-300)


def test_the_largest_beam_the_cost_model_accepts_is_bounded_on_every_engine(engines):
    """The cost model's bounds from the model's vocabulary and max_len: the vocabulary's own
    size (the old bound) is refused at the default max_len; the largest accepted beam is within
    both budgets."""
    mt = engines["checkpoint"]
    vocab = len(mt.dictionary)
    for name in ("checkpoint", *ENGINES):
        with pytest.raises(HltmtConfigError, match="is more than one search of this model may cost"):
            engines[name].translate_batch(ITEMS[:1], beam=vocab)
    largest = min(vocab, arguments.MAX_STEP_LOGITS // vocab, arguments.MAX_SEARCH_LOGITS // (vocab * 201))
    assert largest * vocab <= arguments.MAX_STEP_LOGITS and largest * vocab * 201 <= arguments.MAX_SEARCH_LOGITS
    arguments.search_bounds(largest, 200, vocab, mt.max_target_positions)  # accepted
    with pytest.raises(HltmtConfigError):
        arguments.search_bounds(largest + 1, 200, vocab, mt.max_target_positions)
    assert math.isfinite(largest)
