"""Per-sentence language ids from fairseq's ``--enable-lang-ids`` in mixed-direction batches.

With ``--enable-lang-ids`` each direction's ``LanguagePairDataset`` knows its
``src_lang_id`` / ``tgt_lang_id`` and its collater writes that one id for *every* row of
the batch. ``translation_multi_simple_epoch`` collates a mixed batch with the collater of
its first dataset (``SampledMultiDataset`` with ``shared_collater``, the default, and
``ConcatDataset`` for valid/test), so fairseq 0.12 labels every row of a mixed batch with
the first direction's languages. The source-language adapters need the right id per row.

The fix, installed at import: each item carries its dataset's ids, and the collater builds
the batch's ids from its items, in the batch's (length-sorted) order. Datasets without
ids are untouched.
"""
import functools

import torch

from fairseq.data.language_pair_dataset import LanguagePairDataset

KEYS = ("src_lang_id", "tgt_lang_id")


def _wrap_getitem(getitem):
    @functools.wraps(getitem)
    def __getitem__(self, index):
        item = getitem(self, index)
        for key in KEYS:
            value = getattr(self, key, None)
            if value is not None:
                item[key] = value
        return item

    return __getitem__


def _wrap_collater(collater):
    @functools.wraps(collater)
    def collater_per_row(self, samples, *args, **kwargs):
        keys = [k for k in KEYS if samples and k in samples[0]]
        if not keys:
            return collater(self, samples, *args, **kwargs)
        # collate sorts the rows by length: give each sample its position as id to learn the order
        batch = collater(self, [dict(s, id=i) for i, s in enumerate(samples)], *args, **kwargs)
        if not batch:
            return batch
        order = batch["id"]
        batch["id"] = torch.tensor([s["id"] for s in samples], dtype=order.dtype).index_select(0, order)
        for key in keys:
            ids = torch.tensor([int(s[key]) for s in samples], dtype=torch.long).index_select(0, order).view(-1, 1)
            src_tokens = batch["net_input"]["src_tokens"]
            ids = ids.to(src_tokens)
            if key == "src_lang_id":
                batch["net_input"][key] = ids
            else:
                batch[key] = ids
        return batch

    return collater_per_row


def install_per_row_lang_ids() -> None:
    """Make fairseq's language ids per row in mixed batches (idempotent)."""
    if getattr(LanguagePairDataset.collater, "hltmt_per_row", False):
        return
    LanguagePairDataset.__getitem__ = _wrap_getitem(LanguagePairDataset.__getitem__)
    LanguagePairDataset.collater = _wrap_collater(LanguagePairDataset.collater)
    LanguagePairDataset.collater.hltmt_per_row = True
