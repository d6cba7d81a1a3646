"""The search options of the translator's contract (hltmt_plugin.hub.arguments.Search) mean the
same on every engine: the study's committed HLT-MT served as its checkpoint (fairseq's
generator), exported to CTranslate2 and to transformers. n-best: how many, best first, the
checkpoint's; sampling: top-k 1 and a tiny top-p are the greedy search, a seed gives the same
samples, another seed others, samples are not the beam's translation; no-repeat n-grams: no
n-gram of pieces twice (which hypothesis the blocked beam finds may differ between engines)."""

import pytest

pytest.importorskip("ctranslate2")
pytest.importorskip("transformers")

ITEMS = [
    ("en", "de", "The file is open."),
    ("en", "fi", "The file could not be saved."),
    ("en", "fr", "Save the file."),
    ("en", "fr", "The file, the file, the file, the file."),
]


@pytest.fixture(scope="module")
def engines(study_engines):
    return study_engines


@pytest.fixture(scope="module")
def checkpoints(engines):
    """The checkpoint's answers, which every engine must give."""
    mt = engines["checkpoint"]
    return {
        "nbest": mt.translate_batch(ITEMS, beam=4, nbest=3),
        "greedy": mt.translate_batch(ITEMS, beam=1),
        "no_repeat": mt.translate_batch(ITEMS, no_repeat_ngram_size=2),  # blocked as fairseq-generate on a GPU
    }


@pytest.mark.parametrize("engine", ["checkpoint", "ctranslate2", "transformers"])
def test_each_search_option_means_the_same_on_every_engine(engines, checkpoints, engine):
    mt = engines[engine]
    found = mt.translate_batch(ITEMS, beam=4, nbest=3, details=True)
    best = mt.translate_batch(ITEMS, beam=4)
    for result, text in zip(found, best):
        scores = [h.score for h in result.hypotheses]
        assert len(result.hypotheses) == 3 and scores == sorted(scores, reverse=True), result
        assert result.text == result.hypotheses[0].text == text and result.score == scores[0]
    assert [[h.text for h in r.hypotheses] for r in found] == checkpoints["nbest"]

    greedy = checkpoints["greedy"]
    for options in ({"sampling_topk": 1}, {"sampling_topp": 1e-6}):  # only the likeliest token is left
        assert mt.translate_batch(ITEMS, beam=1, sampling=True, seed=5, **options) == greedy, options
    drawn = mt.translate_batch(ITEMS, beam=3, nbest=3, sampling=True, seed=7)
    assert drawn == mt.translate_batch(ITEMS, beam=3, nbest=3, sampling=True, seed=7)
    assert drawn != mt.translate_batch(ITEMS, beam=3, nbest=3, sampling=True, seed=8)
    assert drawn != mt.translate_batch(ITEMS, beam=3, nbest=3, sampling=True, seed=7, temperature=3.0)
    assert [texts[0] for texts in drawn] != best and all(len(texts) == 3 for texts in drawn)

    blocked = mt.translate_batch(ITEMS, no_repeat_ngram_size=2)
    assert repeats(mt, best[3]) and [repeats(mt, text) for text in blocked] == [False] * len(ITEMS), blocked


def repeats(mt, text) -> bool:
    """Whether the pieces of ``text`` hold a bigram twice."""
    pieces = mt.bpe.encode(text).split() if hasattr(mt, "bpe") else mt.pieces.encode([text])[0]
    return len(set(zip(pieces, pieces[1:]))) < len(pieces) - 1


def test_the_checkpoint_blocks_repeated_ngrams_on_the_cpu(engines, checkpoints):
    """fairseq 0.12's generator reads the padding for the latest n-gram on the CPU (blocking
    nothing); the checkpoint's translator gives it the tokens generated so far."""
    assert repeats(engines["checkpoint"], checkpoints["greedy"][3])
    assert checkpoints["no_repeat"][3] == "Le fichier de fichier, choisissez Fichier, le fichier."


@pytest.mark.parametrize("engine", ["checkpoint", "transformers"])
def test_a_seeded_call_leaves_torchs_generator_as_it_was(engines, engine):
    """A seed is the call's: torch's generator, which the program draws from, is as it was after."""
    import torch

    torch.manual_seed(11)
    before = torch.get_rng_state()
    engines[engine].translate_batch(ITEMS[:2], beam=2, nbest=2, sampling=True, seed=3)
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("engine", ["checkpoint", "ctranslate2", "transformers"])
def test_seeded_calls_in_several_threads_draw_what_each_draws_alone(engines, engine):
    """The generators are the process's: seeded calls of several threads take turns
    (contract.SEEDED_CALLS), so each gives the samples its seed gives alone."""
    import threading

    mt = engines[engine]
    options = dict(beam=3, nbest=3, sampling=True, temperature=2.0)
    alone = {seed: mt.translate_batch(ITEMS, seed=seed, **options) for seed in (1, 2, 3, 4)}
    found, failures = {}, []

    def draw(seed):
        try:
            for round in range(3):
                found[seed, round] = mt.translate_batch(ITEMS, seed=seed, **options)
        except Exception as error:  # noqa: BLE001 (reported by the test)
            failures.append(error)

    threads = [threading.Thread(target=draw, args=(seed,)) for seed in alone]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert {key: value for key, value in found.items() if value != alone[key[0]]} == {}
