"""Per-sentence language ids (``--enable-lang-ids``) in this task's mixed-direction batches.

With ``--enable-lang-ids`` each direction's ``LanguagePairDataset`` knows its ``src_lang_id``
/ ``tgt_lang_id`` and its collater writes that one id for *every* row of the batch.
``translation_multi_simple_epoch`` collates a mixed batch with the collater of its first
dataset (``SampledMultiDataset`` with ``shared_collater``, and ``ConcatDataset`` for
valid/test), so fairseq 0.12 labels every row of a mixed batch with the first direction's
languages (the behaviour of fairseq 0.12.2 and its main branch; no upstream fix). The
source-language adapters and skills need the right id per row.

The task's data manager gives its datasets this subclass (:func:`with_row_ids`): each item
carries its dataset's ids and the collater builds the batch's ids from its items, in the
batch's (length-sorted) order. Other tasks in the process are untouched.

An empty list of samples collates to an empty batch, whatever the dataset's ids: with several
workers fairseq pads the shorter shards of an epoch's batches with empty lists (``ShardedIterator``'s
``fill_value=[]``, training and validation alike), and its trainer runs its dummy batch (the
epoch's first batch, its loss and statistics zeroed) for an empty one, so every worker steps and
all-reduces in step. fairseq 0.12's ``LanguagePairDataset.collater`` with language ids indexes
the empty batch's ``net_input`` instead (a ``KeyError`` on the worker with the short shard).
"""

import torch
from fairseq.data.language_pair_dataset import LanguagePairDataset

KEYS = ("src_lang_id", "tgt_lang_id")


class RowLanguageIdDataset(LanguagePairDataset):
    """A ``LanguagePairDataset`` whose batches carry each row's own language ids."""

    def __getitem__(self, index):
        item = super().__getitem__(index)
        for key in KEYS:
            value = getattr(self, key, None)
            if value is not None:
                item[key] = value
        return item

    def collater(self, samples, pad_to_length=None):
        if not samples:
            return {}  # fairseq's empty batch: the trainer runs its dummy batch in its place
        keys = [k for k in KEYS if k in samples[0]]
        if not keys:
            return super().collater(samples, pad_to_length)
        # collate sorts the rows by length: give each sample its position as id to learn the order
        batch = super().collater([dict(s, id=i) for i, s in enumerate(samples)], pad_to_length)
        if not batch:
            return batch
        order = batch["id"]
        batch["id"] = torch.tensor([s["id"] for s in samples], dtype=order.dtype).index_select(0, order)
        src_tokens = batch["net_input"]["src_tokens"]
        for key in keys:
            ids = torch.tensor([int(s[key]) for s in samples], dtype=torch.long).index_select(0, order).view(-1, 1)
            # fairseq puts the source id in net_input, the target id at the top; the target id
            # goes to net_input too, where the encoder reads it (--encoder-langtok src --decoder-langtok)
            batch["net_input"][key] = ids.to(src_tokens)
            if key == "tgt_lang_id":
                batch[key] = ids.to(src_tokens)
        return batch


def with_row_ids(dataset):
    """``dataset`` (a ``LanguagePairDataset`` just built by fairseq) as a :class:`RowLanguageIdDataset`."""
    if type(dataset) is LanguagePairDataset:
        dataset.__class__ = RowLanguageIdDataset  # the same object and state, the subclass's methods
    return dataset
