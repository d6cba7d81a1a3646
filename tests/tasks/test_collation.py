"""``--enable-lang-ids`` gives each sentence of a mixed-direction batch its own language ids
(fairseq 0.12 gives every row the first direction's; the task's datasets fix that for this
task only: hltmt_plugin.tasks.collation)."""

import pytest
import torch
from fairseq.data import ConcatDataset
from fairseq.data.language_pair_dataset import LanguagePairDataset

from conftest import PAIRS, build
from hltmt_plugin.tasks.collation import RowLanguageIdDataset

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)


def batches(task, split, **kwargs):
    if split not in task.datasets:
        task.load_dataset(split)
    itr = task.get_batch_iterator(task.dataset(split), max_tokens=2000, seed=1, **kwargs)
    return list(itr.next_epoch_itr(shuffle=False))


def check_rows(task, batch):
    """Every row's ids name the direction its tokens come from: the target from the
    __xx__ token on the source, the source as the only direction with that target, or
    one of de / gu for English targets (en-de, en-fr, en-gu, en-hi, de-en, gu-en)."""
    lang_dict = task.data_manager.lang_dict
    name = {lang_dict.index(lang): lang for lang in task.langs}
    pad = task.source_dictionary.pad()
    src = batch["net_input"]["src_tokens"]
    first = src.gather(1, src.ne(pad).long().argmax(1, keepdim=True)).view(-1)
    seen = set()
    for b in range(src.size(0)):
        tgt = task.source_dictionary[int(first[b])].strip("_")
        src_lang = name[int(batch["net_input"]["src_lang_id"][b])]
        assert name[int(batch["tgt_lang_id"][b])] == tgt
        assert f"{src_lang}-{tgt}" in PAIRS.split(","), (src_lang, tgt)
        seen.add(f"{src_lang}-{tgt}")
    return seen


def test_training_and_validation_batches_carry_each_rows_own_languages(data_bin):
    _, task, _ = build(
        data_bin,
        "--enable-lang-ids",
        "--hlt-stage",
        "all",
        "--sampling-method",
        "temperature",
        "--sampling-temperature",
        "5",
    )
    seen = set()
    for split in ("train", "valid"):
        for batch in batches(task, split)[:20]:
            seen |= check_rows(task, batch)
    assert {"de-en", "gu-en"} <= seen and len(seen) >= 4  # English targets from two sources: ids must differ


def test_without_the_fix_fairseq_labels_a_mixed_batch_with_one_direction(data_bin):
    _, task, _ = build(data_bin, "--enable-lang-ids", "--hlt-stage", "all")
    task.load_dataset("valid")
    parts = task.dataset("valid").datasets
    assert all(type(d) is RowLanguageIdDataset for d in parts)
    assert LanguagePairDataset.collater is not RowLanguageIdDataset.collater  # other tasks keep fairseq's
    try:
        for d in parts:
            d.__class__ = LanguagePairDataset  # fairseq's own collation
        batch = batches(task, "valid")[0]
        assert batch["net_input"]["src_lang_id"].unique().numel() == 1  # fairseq 0.12: one id for every row
    finally:
        for d in parts:
            d.__class__ = RowLanguageIdDataset
    ids = batches(task, "valid")[0]["net_input"]["src_lang_id"]
    assert ids.unique().numel() > 1 and ids.dtype == torch.long and ids.shape[1] == 1
    assert isinstance(task.dataset("valid"), ConcatDataset)


@pytest.mark.parametrize("world", [2, 4])
def test_a_shorter_shard_gets_fairseqs_empty_batch(data_bin, world):
    """With several workers fairseq pads the shorter shards of an epoch's batches with empty
    lists, so that every worker steps as often; they collate to fairseq's empty batch, in whose
    place the trainer runs its dummy batch (the epoch's first batch, loss zeroed), never to
    fairseq 0.12's KeyError of a dataset with language ids."""
    _, task, _ = build(data_bin, "--enable-lang-ids", "--hlt-stage", "all")
    task.load_dataset("valid")
    valid = task.dataset("valid")  # 6 directions x 60 sentences in batches of 8: 45 batches
    per_worker = -(-45 // world)
    for shard in range(world):
        itr = task.get_batch_iterator(valid, max_sentences=8, seed=1, num_shards=world, shard_id=shard)
        got = list(itr.next_epoch_itr(shuffle=False))
        assert len(got) == per_worker
        assert sum(not b for b in got) == per_worker - len(range(shard, 45, world))
        assert all("src_lang_id" in b["net_input"] for b in got if b)
    assert valid.collater([]) == {} and valid.datasets[0].collater([]) == {}
    with pytest.raises(KeyError, match="net_input"):  # fairseq 0.12's own collater with language ids
        LanguagePairDataset.collater(valid.datasets[0], [])
