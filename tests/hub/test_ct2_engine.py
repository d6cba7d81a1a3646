"""hltmt_plugin.hub.ct2_engine: an exported model served with the translator's contract: any
mix of directions in one call, results in input order, per-line errors, the same refusals."""

import os

import pytest

from conftest import ROOT
from hub_common import DIRECTIONS, sentences

pytest.importorskip("ctranslate2")

from hltmt_plugin.errors import HltmtConfigError  # noqa: E402
from hltmt_plugin.export.ctranslate2 import export  # noqa: E402
from hltmt_plugin.hub import HltmtTranslator, TranslationErrors  # noqa: E402
from hltmt_plugin.hub.ct2_engine import check_machine, engine_options  # noqa: E402


@pytest.fixture(scope="module")
def exported(hltmt, tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("ct2") / "hltmt")
    export(hltmt, folder)
    return folder


@pytest.fixture(scope="module")
def served(exported):
    return HltmtTranslator.load(exported, threads=1)


def test_mixed_directions_come_back_in_input_order_as_the_checkpoint_gives_them(served, translator):
    items = [(s, t, text) for s, t in DIRECTIONS for text in sentences(s, t, 4)][::-1]
    done = []
    found = served.translate_batch(items, beam=4, max_len=20, max_sentences=3, progress=done.append)
    assert found == translator.translate_batch(items, beam=4, max_len=20)
    assert sum(done) == len(items)
    first = sentences("en", "de", 1)
    one = served.translate(first, "en", "de", beam=4, max_len=20)
    assert one == [found[items.index(("en", "de", first[0]))]]


def test_bad_lines_fail_alone_with_their_line_numbers(served, translator):
    items = [
        ("en", "de", "The file is open."),
        ("xx", "de", "x"),
        ("en", "de", "   "),
        ("en", "de", "a\x00b"),
        ("en", "de", "word " * 2000),
        ("gu", "de", "x"),
        "not a tuple",
    ]
    found = served.translate_batch(items, details=True, errors="keep", first_line=10)
    expected = translator.translate_batch(items, details=True, errors="keep", first_line=10)
    assert [r.error for r in found] == [r.error for r in expected]
    assert [r.line for r in found] == list(range(10, 17))
    assert found[0].text == expected[0].text and found[0].routing == expected[0].routing
    with pytest.raises(TranslationErrors, match="6 of 7 sentence.s. not translated: line 2: unknown language"):
        served.translate_batch(items)


def test_a_zero_shot_direction_is_served_only_when_asked(served, translator):
    item = [("de", "gu", "Die Datei ist offen.")]
    with pytest.raises(TranslationErrors, match="zero-shot"):
        served.translate_batch(item)
    found = served.translate_batch(item, zero_shot=True, details=True)[0]
    assert found.zero_shot and found.text == translator.translate_batch(item, zero_shot=True)[0]


def test_options_that_do_not_apply_to_an_export_are_refused(exported):
    with pytest.raises(HltmtConfigError, match="carries its own sentencepiece model"):
        HltmtTranslator.load(exported, spm="x.model")
    with pytest.raises(HltmtConfigError, match="compute type 'int3'"):
        HltmtTranslator.load(exported, compute_type="int3")
    with pytest.raises(HltmtConfigError, match="threads must"):
        HltmtTranslator.load(exported, threads=0)
    with pytest.raises(HltmtConfigError, match="an exported model runs on cpu, cuda or cuda:N"):
        HltmtTranslator.load(exported, device="mps")


# ---- serving without torch and fairseq --------------------------------------------------

BLOCKED = """
import sys
sys.modules["torch"] = sys.modules["fairseq"] = None  # as where they are not installed: importing either fails
from hltmt_plugin.hub import HltmtTranslator
mt = HltmtTranslator.load(sys.argv[1], threads=1)
found = mt.translate_batch([("en", "de", "The file is open."), ("xx", "de", "x")], beam=4, max_len=20, errors="keep")
print(type(mt).__name__, found, sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "fairseq")))
"""


def test_an_export_is_served_with_neither_torch_nor_fairseq(exported, served):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", BLOCKED, exported], capture_output=True, text=True, env=_env(), timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    want = served.translate_batch([("en", "de", "The file is open.")], beam=4, max_len=20)[0]
    assert done.stdout.split(" ", 1) == ["Ct2Translator", f"{[want, None]!r} ['fairseq', 'torch']\n"]


def _env():
    import os

    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


# ---- where it runs: the GPU line, checked on any machine --------------------------------


class Machine:
    """What CTranslate2 says of a machine: its CUDA devices and the compute types each runs."""

    def __init__(self, cuda: int):
        self.cuda = cuda

    def get_cuda_device_count(self):
        return self.cuda

    def get_supported_compute_types(self, device, index=0):
        gpu = {"float32", "float16", "bfloat16", "int8", "int8_float16", "int8_bfloat16", "int8_float32"}
        return gpu if device == "cuda" else {"float32", "int8", "int8_float32", "int16"}


def test_the_gpu_options_build_ctranslate2s_arguments():
    built = engine_options("cuda:1", "int8_float16", 2)
    assert built == {
        "device": "cuda",
        "device_index": 1,
        "compute_type": "int8_float16",
        "inter_threads": 1,
        "intra_threads": 2,
    }
    assert engine_options("cuda", None, None, fp16=True)["compute_type"] == "float16"
    assert engine_options(None, None, 1)["device"] == "auto"
    assert check_machine(Machine(2), built)["device_index"] == 1
    assert check_machine(Machine(1), engine_options(None, "float16", 1))["device"] == "cuda"
    assert check_machine(Machine(0), engine_options(None, None, 1))["device"] == "cpu"
    for machine, options, why in (
        (Machine(0), ("cuda", "float16", 1), "device cuda is not available here .CTranslate2 sees 0 CUDA device"),
        (Machine(1), ("cuda:1", None, 1), "device cuda:1 is not available here .CTranslate2 sees 1 CUDA device"),
        (Machine(0), ("cpu", "int8_float16", 1), "compute type int8_float16 does not run on cpu here: .*--device cuda"),
    ):
        with pytest.raises(HltmtConfigError, match=why):
            check_machine(machine, engine_options(*options))
    for args, why in ((("mps", None, 1), "device 'mps'"), (("cpu:1", None, 1), "device 'cpu:1'")):
        with pytest.raises(HltmtConfigError, match=why):
            engine_options(*args)


def test_on_this_machine_a_missing_gpu_is_one_line(exported):
    import ctranslate2

    if ctranslate2.get_cuda_device_count() > 0:
        pytest.skip("this machine has a CUDA device")
    for options in ({"device": "cuda"}, {"device": "cuda", "compute_type": "int8_float16"}, {"fp16": True}):
        with pytest.raises(HltmtConfigError, match="not available here|does not run on cpu"):
            HltmtTranslator.load(exported, **options)


def test_the_search_options_as_ctranslate2_takes_them():
    from hltmt_plugin.hub.arguments import Search
    from hltmt_plugin.hub.ct2_engine import decoding

    plain = {"length_penalty": 1.0, "max_decoding_length": 200, "min_decoding_length": 1, "no_repeat_ngram_size": 0}
    assert decoding(Search(4, nbest=2)) == {"beam_size": 4, "num_hypotheses": 4, **plain}
    sampled = Search(3, sampling=True, sampling_topp=0.9, temperature=0.5, no_repeat_ngram_size=3)
    assert decoding(sampled) == {
        **plain,
        "beam_size": 1,  # beam samples
        "num_hypotheses": 3,
        "sampling_topk": 0,  # the whole vocabulary, cut by top-p
        "sampling_topp": 0.9,
        "sampling_temperature": 0.5,
        "no_repeat_ngram_size": 3,
    }
    assert decoding(Search(2, sampling=True, sampling_topk=5))["sampling_topk"] == 5


def test_a_seeded_call_draws_the_same_samples_from_the_folder_checked_again(exported, tmp_path):
    import shutil

    from hltmt_plugin.errors import HltmtError

    folder = str(tmp_path / "copy")
    shutil.copytree(exported, folder)
    mt = HltmtTranslator.load(folder, threads=1)
    drawn = mt.translate(["The file is open."], "en", "de", sampling=True, beam=3, nbest=3, seed=3)
    assert drawn == mt.translate(["The file is open."], "en", "de", sampling=True, beam=3, nbest=3, seed=3)
    with open(os.path.join(folder, "dict.txt"), "a", encoding="utf-8") as f:
        f.write("planted 1\n")  # the folder changed after its load: its models are not loaded again
    with pytest.raises(HltmtError, match="dict.txt"):
        mt.translate(["The file is open."], "en", "de", sampling=True, seed=3)


def test_fairseqs_scores_take_one_scoring_pass_of_what_needs_it_in_token_batches(tmp_path):
    """ct2_engine._scores: CTranslate2's scores leave out the forced language token and, for a
    hypothesis cut at max_len, the end of sentence fairseq forces there. A cut hypothesis is
    scored again whole (prefix included); the prefix alone only for the sentences with a
    hypothesis that ended; each a call of score_batch in CTranslate2's token batches (one batch
    of all would pad every source to the longest). The scores are those of scoring everything.
    The study's trained MNMT, whose sentences end."""
    from hltmt_plugin.hub import arguments
    from hltmt_plugin.hub.ct2_engine import ENGINE_BATCH_TOKENS, _scores, decoding

    folder = str(tmp_path / "mnmt")
    export(os.path.join(ROOT, "docs", "results", "cpu-study", "models", "mnmt.pt"), folder)
    served = HltmtTranslator.load(folder, threads=1)
    model, calls = next(iter(served.models.values())), []

    class Recording:  # the model, its scoring calls written down
        def score_batch(self, sources, targets, **options):
            calls.append((len(sources), [len(t) for t in targets], options))
            return model.score_batch(sources, targets, **options)

    _, prepared = served._prepare_items([("en", "de", text) for text in sentences("en", "de", 8)], 1)
    sources = [tokens for _, tokens in prepared]
    prefix = [[served.record["language_tokens"]["de"]]] * len(sources)
    for max_len, min_len in ((6, 6), (12, 1)):  # every hypothesis cut; some ended, some cut
        search = arguments.search(beam=3, max_len=max_len, min_len=min_len)
        outputs = model.translate_batch(
            sources,
            target_prefix=prefix,
            return_scores=True,
            **decoding(search, True),
        )
        calls.clear()
        scores = _scores(Recording(), sources, prefix, outputs, max_len, 1.0)
        cut = sum(len(h) >= max_len for o in outputs for h in o.hypotheses)
        ended = [k for k, o in enumerate(outputs) if any(len(h) < max_len for h in o.hypotheses)]
        assert cut and bool(ended) == (min_len == 1), (max_len, cut, ended)
        expected = ([(len(ended), [1] * len(ended))] if ended else []) + [(cut, [max_len] * cut)]
        assert [(n, lengths) for n, lengths, _ in calls] == expected, (max_len, calls)
        assert all(o == {"max_batch_size": ENGINE_BATCH_TOKENS, "batch_type": "tokens"} for _, _, o in calls)
        # against scoring every hypothesis whole: the same scores
        whole = model.score_batch(
            [s for s, o in zip(sources, outputs) for _ in o.hypotheses], [h for o in outputs for h in o.hypotheses]
        )
        assert [x for row in scores for x in row] == pytest.approx(
            [sum(w.log_probs) / len(w.log_probs) for w in whole], abs=1e-4
        )
