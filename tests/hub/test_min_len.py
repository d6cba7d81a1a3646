"""A translation's least length (hltmt_plugin.hub.arguments.Search.min_len) means the same on
every engine: the study's committed HLT-MT served as its checkpoint (fairseq's --min-len),
exported to CTranslate2 (min_decoding_length) and to transformers (generate's min_new_tokens).
With min_len equal to max_len every translation is exactly that many tokens and its end of
sentence, whatever the weights: the same work on every engine (scripts/bench_export.py
--fixed-len). A min_len no translation can reach is refused before any search."""

import pytest

# the checkpoint ends all three in 4 to 6 tokens (end of sentence included)
ITEMS = [("en", "de", "The file is open."), ("en", "fr", "Save the file."), ("en", "gu", "The file.")]


@pytest.mark.fast
def test_a_min_len_no_translation_can_reach_is_refused():
    from hltmt_plugin.errors import HltmtConfigError
    from hltmt_plugin.hub import arguments

    assert arguments.search().min_len == 1 and arguments.search(max_len=9, min_len=9).min_len == 9
    for bad, message in [
        (dict(min_len=0), "min_len must be at least 1, got 0"),
        (dict(min_len=2.0), "min_len must be a whole number of at least 1, got 2.0"),
        (dict(min_len=True), "min_len must be a whole number"),
        (dict(max_len=8, min_len=9), "min_len 9 is more than max_len 8: no translation could end"),
    ]:
        with pytest.raises(HltmtConfigError, match=message):
            arguments.search(**bad)
    # max_len is cut to the model's positions; a min_len beyond them is refused, not cut
    search = arguments.search(max_len=500, min_len=300)
    with pytest.raises(HltmtConfigError, match=r"min_len 300 is more than this model's longest translation \(255"):
        arguments.model_bounds(search, 1000, 256)
    assert arguments.model_bounds(arguments.search(max_len=500, min_len=255), 1000, 256).max_len == 255


@pytest.mark.fast
def test_ctranslate2_counts_a_forced_first_token_as_fairseq_does():
    from hltmt_plugin.hub import arguments
    from hltmt_plugin.hub.ct2_engine import decoding

    def least(min_len, prefix):
        return decoding(arguments.search(max_len=10, min_len=min_len), prefix)["min_decoding_length"]

    # fairseq's default (no end of sentence at the first step) is filled by a forced token
    assert [least(1, False), least(1, True)] == [1, 0]
    assert [least(7, False), least(7, True)] == [7, 7]  # the prefix counted by both


@pytest.fixture(scope="module")
def engines(study_engines):
    return study_engines


@pytest.mark.parametrize("engine", ["checkpoint", "ctranslate2", "transformers"])
def test_a_fixed_length_gives_exactly_that_many_tokens_on_every_engine(engines, engine):
    mt = engines[engine]
    free = mt.translate_batch(ITEMS, beam=4, details=True)
    assert all(r.tokens <= 6 for r in free), [r.tokens for r in free]
    for n in (3, 9):  # cut short, and held past the end the model would choose
        fixed = mt.translate_batch(ITEMS, beam=4, min_len=n, max_len=n, details=True)
        assert [r.tokens for r in fixed] == [n + 1] * len(ITEMS), (n, fixed)  # n tokens and the end of sentence
    one = mt.translate_batch(ITEMS[-1:], beam=4, min_len=9, max_len=9, details=True)  # a batch of one
    assert one[0].tokens == 10
    longer = mt.translate_batch(ITEMS, beam=4, min_len=8, max_len=30, details=True)
    assert all(8 < r.tokens <= 31 for r in longer), [r.tokens for r in longer]  # at least 8, then its own end
