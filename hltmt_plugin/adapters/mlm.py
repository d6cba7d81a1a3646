"""MAD-X's language adapters from monolingual text: masked language modelling (MLM) on the
translation model's own encoder, training one language's encoder language adapters and
invertible adapter with everything else frozen (Pfeiffer et al. 2020, sections 4.1 and 4.3).

fairseq's masked-LM machinery does the work:

- masking: :class:`fairseq.data.MaskTokensDataset` (BERT's 15%, of which 80% ``<mask>``, 10%
  a random token, 10% left as they are); a random token is never a language token;
- loss: fairseq's ``masked_lm`` criterion (:class:`~fairseq.criterions.masked_lm.MaskedLmLoss`,
  cross-entropy summed over the masked tokens) on :class:`EncoderMLM`, whose logits are the
  encoder's output features, through the inverse of the language's invertible adapter (MAD-X
  figure 1), times the encoder's embedding table (the tied output embedding:
  ``logits = features @ E^T``).

The sentence's language reaches the adapters through the model's language record
(:meth:`hltmt_plugin.languages.LanguageTable.record`): each row carries fairseq's
``src_lang_id`` of the language, and the encoder input starts (or, with
``--lang-tok-replacing-bos-eos``, ends) with the language's own token ``__xx__``, where a
translation batch has its target-language token. The translation dictionary has no
``<mask>`` (XLM-R's has): ``<s>`` stands in for it, a symbol that no encoder input of the
translation task holds.
"""

from types import SimpleNamespace
from typing import Dict, Iterator, Optional, Sequence

import numpy as np
import torch.nn.functional as F
from fairseq.criterions.masked_lm import MaskedLmConfig, MaskedLmLoss
from fairseq.data import (
    AppendTokenDataset,
    IdDataset,
    LeftPadDataset,
    ListDataset,
    MaskTokensDataset,
    NestedDictionaryDataset,
    NumelDataset,
    NumSamplesDataset,
    PrependTokenDataset,
    RawLabelDataset,
    data_utils,
)
from torch import Tensor, nn

from hltmt_plugin.adapters.files import language_parameters
from hltmt_plugin.errors import HltmtInputError
from hltmt_plugin.languages import ROWS

MASK = "<mask>"


def mask_index(dictionary) -> int:
    """``<mask>`` if the dictionary has it, else ``<s>`` (never in a translation encoder input)."""
    index = dictionary.index(MASK)
    return dictionary.bos() if index == dictionary.unk() else index


def encoder_language_parameters(model, lang: str) -> Dict[str, nn.Parameter]:
    """``lang``'s encoder language adapters and invertible adapter, by state-dict name."""
    params = {n: p for n, p in language_parameters(model, lang).items() if n.startswith("encoder.")}
    if not params:
        raise HltmtInputError(
            f"this model has no encoder language or invertible adapters for {lang!r}: MLM "
            "trains those (build the base with --language-adapters and/or --invertible-adapters)"
        )
    return params


def freeze_all_but_language(model, lang: str) -> Dict[str, nn.Parameter]:
    """``requires_grad`` only on ``lang``'s encoder language + invertible adapters; returns them."""
    trained = encoder_language_parameters(model, lang)
    for name, p in model.named_parameters():
        p.requires_grad_(name in trained)
    return trained


class EncoderMLM(nn.Module):
    """The translation model's encoder as a masked LM: a model for fairseq's ``masked_lm``
    criterion (``model(**net_input, masked_tokens=...)[0]`` are the logits)."""

    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder

    def forward(
        self,
        src_tokens: Tensor,
        src_lengths: Tensor,
        src_lang_id: Optional[Tensor] = None,
        masked_tokens: Optional[Tensor] = None,
    ):
        out = self.encoder(src_tokens, src_lengths, src_lang_id=src_lang_id)
        x = out["encoder_out"][0].transpose(0, 1)  # B x T x C
        inverse = self.encoder.invertible_adapters
        if inverse is not None:  # the row's language's inverse precedes the tied output embedding
            with self.encoder.rows.use(out[ROWS][0]):
                x = inverse.inverse(x, self.encoder.rows, dim=0)
        if masked_tokens is not None:
            x = x[masked_tokens]
        return F.linear(x, self.encoder.embed_tokens.weight), {}

    def get_targets(self, sample, net_output):
        return sample["target"]


def mlm_criterion(encoder) -> MaskedLmLoss:
    """fairseq's ``masked_lm`` criterion over the encoder's dictionary (its padding index)."""
    return MaskedLmLoss(MaskedLmConfig(tpu=False), SimpleNamespace(target_dictionary=encoder.dictionary))


def mlm_dataset(
    items: Sequence[Tensor],
    model,
    lang: str,
    seed: int = 1,
    mask_prob: float = 0.15,
    leave_unmasked_prob: float = 0.1,
    random_token_prob: float = 0.1,
) -> NestedDictionaryDataset:
    """Masked-LM samples of ``lang`` from token sentences (no eos, no language token) in the
    layout of the translation encoder's input: ``__xx__ w1 .. wn </s>``, left-padded (or
    ``w1 .. wn __xx__`` with ``--lang-tok-replacing-bos-eos``); ``target`` holds the original
    tokens at the masked positions and padding elsewhere."""
    encoder = model.encoder
    d, languages = encoder.dictionary, encoder.languages
    lang_token = languages.token_index(lang)
    at_end = bool(languages.langtok_at_end)
    base = ListDataset(list(items), np.array([len(t) for t in items]))
    if not at_end:
        base = AppendTokenDataset(base, d.eos())
    masking = dict(
        vocab=d,
        pad_idx=d.pad(),
        mask_idx=mask_index(d),
        seed=seed,
        mask_prob=mask_prob,
        leave_unmasked_prob=leave_unmasked_prob,
        random_token_prob=random_token_prob,
    )
    src = MaskTokensDataset(base, **masking, return_masked_tokens=False)
    tgt = MaskTokensDataset(base, **masking, return_masked_tokens=True)
    if random_token_prob > 0:  # a random replacement is a word, never a language token
        src.weights[languages.lang_of_token.ge(0).cpu().numpy()] = 0
        src.weights /= src.weights.sum()
    add = AppendTokenDataset if at_end else PrependTokenDataset
    src, tgt = add(src, lang_token), add(tgt, d.pad())
    lang_ids = RawLabelDataset([[languages.lang_id(lang)]] * len(items))
    return NestedDictionaryDataset(
        {
            "id": IdDataset(),
            "net_input": {
                "src_tokens": LeftPadDataset(src, d.pad()),
                "src_lengths": NumelDataset(src, reduce=False),
                "src_lang_id": lang_ids,
            },
            "target": LeftPadDataset(tgt, d.pad()),
            "nsentences": NumSamplesDataset(),
            "ntokens": NumelDataset(src, reduce=True),
        },
        sizes=[src.sizes],
    )


def epoch_batches(
    dataset: NestedDictionaryDataset, epoch: int, seed: int, max_sentences: int, max_tokens: Optional[int] = None
) -> Iterator[dict]:
    """One epoch of collated batches (fresh masks per epoch), similar lengths together
    (fairseq's ``batch_by_size``), in a seeded random order."""
    dataset.set_epoch(epoch)
    sizes = dataset.sizes[0]
    indices = np.argsort(sizes, kind="mergesort")
    batches = data_utils.batch_by_size(indices, dataset.num_tokens, max_tokens=max_tokens, max_sentences=max_sentences)
    order = np.random.default_rng((seed, epoch)).permutation(len(batches))
    for b in order:
        yield dataset.collater([dataset[int(i)] for i in batches[b]])
