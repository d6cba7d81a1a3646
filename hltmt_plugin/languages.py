"""A sentence's languages, from the batch to the modules they select.

One owner, one record, one key:

- :class:`LanguageTable` (built once from the task, owned by the encoder) knows the names of
  ``--langs``, the dictionary index of each language token ``__xx__`` and fairseq's language
  ids (``--enable-lang-ids``). From a batch it makes the **record**: a ``LongTensor (B, 2)``
  holding each row's source and target language as an index into ``--langs``
  (:data:`SRC`, :data:`TGT`; the source is ``-1`` when nothing needs it and the batch does
  not say).
- The encoder makes the record once per forward pass and hands it on in
  ``encoder_out[ROWS]``; :func:`reorder_rows` is the one place it is reordered (beam search).
- Every consumer reads the record: the SLP (``module of tgt``), adapters (source language in
  the encoder, target language in the decoder), skills (source language; the direction's
  skill set) and the criterion (loss per target language). Within an encoder or decoder
  pass the layers reach it through :class:`~hltmt_plugin.routing.PassRows`, which also makes each consumer's
  :class:`~hltmt_plugin.routing.RoutePlan` once per pass (or once per beam search).

With ``--encoder-langtok src --decoder-langtok`` (fairseq's examples/multilingual) the token on
the source is the source language's and each row's target comes from its ``tgt_lang_id``
(``net_input``, :mod:`hltmt_plugin.tasks.collation`; ``-t`` when decoding one direction):
the encoder still makes the record before the decoder runs, for a full forward pass and a
beam search alike.

The path of a target language: ``__xx__`` in ``src_tokens`` (or ``tgt_lang_id``) -> ``record[:, TGT]``
(:meth:`LanguageTable.record`) -> the SLP's module table (``LanguageRouter.module_ids``).
"""

from typing import Dict, List, Optional, Sequence

import torch
from fairseq.data.multilingual.multilingual_utils import get_lang_tok
from torch import Tensor, nn

from hltmt_plugin.errors import HltmtConfigError, HltmtInputError

ROWS = "hltmt_languages"  # encoder_out key: [LongTensor (B, 2)], each row's (source, target) index in --langs
SRC, TGT = 0, 1
UNKNOWN = -1


def split_list(value) -> List[str]:
    """A comma-separated option (or a list) as a list of stripped, non-empty names."""
    if value is None:
        return []
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    return [str(v).strip() for v in items if str(v).strip()]


def unknown_languages(names: Sequence[str], langs: Sequence[str]) -> List[str]:
    """The names that are not languages of ``--langs``."""
    return [name for name in names if name not in langs]


def check_known(names: Sequence[str], langs: Sequence[str], option: str, what: str = "") -> None:
    """Every name is a language of ``--langs`` and none is listed twice."""
    unknown = unknown_languages(names, langs)
    if unknown:
        raise HltmtConfigError(
            f"{option} names {what}{','.join(unknown)}, not in the language list "
            f"({','.join(langs)}) given by --langs / --lang-dict"
        )
    if len(set(names)) != len(names):
        raise HltmtConfigError(f"{option} lists a language twice: {','.join(names)}")


def task_pairs(task) -> List[str]:
    """The task's directions ``src-tgt`` as a list."""
    return split_list(getattr(task, "lang_pairs", None))


def single_source_language(task) -> Optional[str]:
    """The source language of every direction of ``task``, if they share one (``-s`` at
    generation), else None."""
    sources = {pair.split("-")[0] for pair in task_pairs(task)}
    return sources.pop() if len(sources) == 1 else None


class LanguageTable(nn.Module):
    """The task's languages and how a batch names them (no parameters; lookup buffers only).

    Args:
        langs: ``--langs`` in order (the record holds indices into it).
        dictionary: the source dictionary (holds the language tokens).
        lang_tok_style: fairseq's ``--lang-tok-style``.
        langtok_at_end: the language token replaces the final eos (``--lang-tok-replacing-bos-eos``).
        lang_dict: fairseq's language dictionary, whose indices ``--enable-lang-ids`` puts in batches.
        default_source: the source language of a batch without ids (a task with one source).
        target_on_source: the language token on the source is the target's (``--encoder-langtok
            tgt``); otherwise it is the source's (``--encoder-langtok src --decoder-langtok``) and
            each row's target comes from its ``tgt_lang_id`` (or ``default_target``, ``-t``).
    """

    def __init__(
        self,
        langs: Sequence[str],
        dictionary,
        lang_tok_style: str,
        langtok_at_end: bool = False,
        lang_dict=None,
        default_source: Optional[str] = None,
        target_on_source: bool = True,
        default_target: Optional[str] = None,
    ):
        super().__init__()
        self.langs = list(langs)
        self.dictionary = dictionary
        self.langtok_at_end = langtok_at_end
        self.need_source = False  # set by the features that choose by source language
        of_token = torch.full((len(dictionary),), UNKNOWN, dtype=torch.long)
        for i, lang in enumerate(self.langs):
            of_token[dictionary.index(get_lang_tok(lang, lang_tok_style))] = i
        self.register_buffer("lang_of_token", of_token, persistent=False)
        of_id = torch.full((len(lang_dict) if lang_dict is not None else 0,), UNKNOWN, dtype=torch.long)
        for i, lang in enumerate(self.langs if lang_dict is not None else []):
            if lang_dict.index(lang) != lang_dict.unk():
                of_id[lang_dict.index(lang)] = i
        self.register_buffer("lang_of_lang_id", of_id, persistent=False)
        # --langs by name, in order, saved with the weights: a checkpoint's language indices and
        # language-token rows mean these languages (checked when it is loaded)
        self.register_buffer("lang_names", names_tensor(self.langs))
        self.default_source = self.langs.index(default_source) if default_source in self.langs else None
        self.target_on_source = target_on_source
        self.default_target = self.langs.index(default_target) if default_target in self.langs else None

    @classmethod
    def from_task(cls, task, dictionary) -> "LanguageTable":
        args = task.args
        on_source = getattr(args, "encoder_langtok", None) == "tgt"
        at_end = bool(getattr(args, "lang_tok_replacing_bos_eos", False))
        return cls(
            task.langs,
            dictionary,
            args.lang_tok_style,
            at_end,
            task.data_manager.lang_dict,
            single_source_language(task),
            on_source,
            None if on_source else getattr(args, "target_lang", None),
        )

    def upgrade_state_dict_named(self, state_dict, name):
        """Refuse a checkpoint trained with another language list (order, style, dictionary);
        one from before the list was saved loads as it is."""
        key = f"{name}.lang_names"
        saved = state_dict.get(key)
        if saved is not None and names_of(saved) != self.langs:
            raise HltmtInputError(
                f"the checkpoint was trained with the languages {','.join(names_of(saved))} (in this order) and "
                f"these options give {','.join(self.langs)}: pass the training run's --langs / --lang-dict"
            )
        state_dict[key] = self.lang_names.clone()

    def index(self, lang: str) -> int:
        return self.langs.index(lang)

    def token_index(self, lang: str, dictionary=None) -> int:
        """The index of ``__lang__`` in the source dictionary, or in ``dictionary`` (the
        decoder's, when it is another)."""
        hits = (self.lang_of_token == self.index(lang)).nonzero().view(-1)
        if hits.numel() != 1:
            raise HltmtInputError(f"the encoder dictionary has no single token for language {lang!r}")
        index = int(hits[0])
        return index if dictionary is None else dictionary.index(self.dictionary[index])

    def token(self, lang: str) -> str:
        """The language token of ``lang`` (``__lang__`` in the task's style), as the dictionary holds it."""
        return self.dictionary[self.token_index(lang)]

    def lang_id(self, lang: str) -> int:
        """fairseq's language id of ``lang`` (what ``--enable-lang-ids`` puts in ``src_lang_id``)."""
        hits = (self.lang_of_lang_id == self.index(lang)).nonzero().view(-1)
        if hits.numel() != 1:
            raise HltmtInputError(f"the model's language dictionary has no single id for {lang!r}")
        return int(hits[0])

    def token_languages(self, src_tokens: Tensor, side: str) -> Tensor:
        """(B,) the language of each row's ``__xx__`` token on the source; error if a row has none."""
        not_pad = src_tokens.ne(self.dictionary.pad()).long()
        if self.langtok_at_end:  # the token replaces the final eos
            pos = src_tokens.size(1) - 1 - not_pad.flip(1).argmax(dim=1)
        else:  # the first non-pad token (sources are usually left-padded)
            pos = not_pad.argmax(dim=1)
        tokens = src_tokens.gather(1, pos.unsqueeze(1)).squeeze(1)
        langs = self.lang_of_token[tokens]
        if not valid_rows(self, langs >= 0):
            bad = tokens[langs < 0]
            raise HltmtInputError(
                f"{bad.numel()} of {tokens.numel()} sentences in this batch carry no {side}-language "
                f"token (found {self.dictionary[int(bad[0])]!r} where __xx__ should be): train and "
                f"decode with --encoder-langtok {'tgt' if side == 'target' else 'src'} (as the model was trained), "
                "and list every language in --langs / --lang-dict"
            )
        return langs

    def of_ids(self, ids: Tensor, rows: int, name: str) -> Tensor:
        """(B,) languages from fairseq's language ids (``src_lang_id`` / ``tgt_lang_id``)."""
        ids = ids.reshape(-1).long()
        langs = torch.full_like(ids, UNKNOWN)
        known = (ids >= 0) & (ids < self.lang_of_lang_id.numel())
        langs[known] = self.lang_of_lang_id[ids[known]]
        if ids.numel() != rows or not valid_rows(self, langs >= 0):
            raise HltmtInputError(
                f"{name} {ids.tolist()} does not give a language of --langs "
                f"({','.join(self.langs)}) for every sentence of the batch"
            )
        return langs

    def targets(self, src_tokens: Tensor, tgt_lang_id: Optional[Tensor] = None) -> Tensor:
        """(B,) each row's target language: its ``__tgt__`` token (``--encoder-langtok tgt``) or
        its ``tgt_lang_id`` (``--encoder-langtok src --decoder-langtok``); error if a row has none."""
        if self.target_on_source:
            return self.token_languages(src_tokens, "target")
        if tgt_lang_id is not None:
            return self.of_ids(tgt_lang_id, src_tokens.size(0), "tgt_lang_id")
        if self.default_target is not None:
            return torch.full((src_tokens.size(0),), self.default_target, dtype=torch.long, device=src_tokens.device)
        raise HltmtInputError(
            "with --encoder-langtok src --decoder-langtok the model reads each sentence's target language from "
            "its language id, and this batch carries none: train and decode with --enable-lang-ids (or give -t)"
        )

    def sources(self, src_tokens: Tensor, src_lang_id: Optional[Tensor]) -> Tensor:
        """(B,) each row's source language: its ``__src__`` token (``--encoder-langtok src``), fairseq's
        ``src_lang_id`` or the task's single source."""
        if not self.target_on_source:
            return self.token_languages(src_tokens, "source")
        if src_lang_id is not None:
            return self.of_ids(src_lang_id, src_tokens.size(0), "src_lang_id")
        if self.default_source is not None:
            return torch.full((src_tokens.size(0),), self.default_source, dtype=torch.long, device=src_tokens.device)
        raise HltmtInputError(
            "language / invertible adapters and encoder skills choose by each sentence's source language, and this "
            "batch carries none: train and decode with --enable-lang-ids (or give -s when decoding a single source "
            "language)"
        )

    def record(
        self, src_tokens: Tensor, src_lang_id: Optional[Tensor] = None, tgt_lang_id: Optional[Tensor] = None
    ) -> Tensor:
        """The per-row record ``(B, 2)``: source (``-1`` unless needed) and target language."""
        tgt = self.targets(src_tokens, tgt_lang_id)
        src = self.sources(src_tokens, src_lang_id) if self.need_source else torch.full_like(tgt, UNKNOWN)
        return torch.stack([src, tgt], dim=1)


def valid_rows(module: nn.Module, ok: Tensor) -> bool:
    """Whether every row is valid (``ok``, a bool tensor), checked on the host (one clear error)
    outside training and on the first training batch; later training batches check with a
    device-side assert instead, so a training step waits for no host synchronisation."""
    if module.training and getattr(module, "_checked_in_training", False):
        torch._assert_async(ok.all())
        return True
    valid = bool(ok.all())
    if valid and module.training:
        module._checked_in_training = True
    return valid


def names_tensor(names: Sequence[str]) -> Tensor:
    """Language names as a tensor (bytes of the comma-separated list), to save with weights."""
    return torch.tensor(list(",".join(names).encode("utf-8")), dtype=torch.uint8)


def names_of(saved: Tensor) -> List[str]:
    return split_list(bytes(saved.tolist()).decode("utf-8", errors="replace"))


def rows_of(encoder_out: Optional[Dict[str, List[Tensor]]]) -> Optional[Tensor]:
    """The record in an encoder output, or None."""
    if encoder_out is None or not encoder_out.get(ROWS):
        return None
    return encoder_out[ROWS][0]


def reorder_rows(encoder_out: Dict[str, List[Tensor]], reordered: Dict[str, List[Tensor]], new_order: Tensor):
    """Carry the record into a reordered encoder output (beam search)."""
    if encoder_out.get(ROWS):
        reordered[ROWS] = [encoder_out[ROWS][0].index_select(0, new_order)]
    return reordered
