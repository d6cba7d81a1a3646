"""``hltmt_transformer``: a fairseq Transformer whose decoder top holds the SLP (HLT-MT).

The encoder reads each sentence's target-language token (``--encoder-langtok tgt`` puts
``__xx__`` at the start of the source) and hands the language on in ``encoder_out``, so a
full forward pass and beam search (which reorders ``encoder_out``) route identically.
After the last decoder layer, before the output projection, the
:class:`~hltmt_plugin.modules.language_pool.SelectiveLanguagePool` routes every row.
"""
import logging
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
from torch import Tensor

from fairseq.data.multilingual.multilingual_utils import get_lang_tok
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
)
from fairseq.models.transformer.transformer_legacy import base_architecture, transformer_wmt_en_de_big
from fairseq.tasks.translation_multi_simple_epoch import TranslationMultiSimpleEpochTask

from hltmt_plugin.config import OptionGroup
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.modules.adapters import (
    AdapterConfig, AdapterDecoderMixin, AdapterEncoderMixin, install_adapters, plan_adapters, single_source_language)
from hltmt_plugin.modules.language_pool import SelectiveLanguagePool
from hltmt_plugin.modules.routing import SearchPlans
from hltmt_plugin.modules.skills import SkillConfig, SkillEncoderMixin, install_skills, plan_skills
from hltmt_plugin.pretrained import PretrainedConfig
from hltmt_plugin.peft import PeftConfig, apply_train_only

logger = logging.getLogger(__name__)

TGT_LANG = "tgt_lang"  # encoder_out key: (B,) index of each row's target language in --langs
SRC_LANG = "src_lang"  # encoder_out key (with source-language adapters): (B,) source language in --langs


def split_langs(value) -> List[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [v.strip() for v in value if v.strip()]
    return [v.strip() for v in str(value).split(",") if v.strip()]


@dataclass
class SlpConfig(OptionGroup):
    high_resource_langs: Optional[str] = field(
        default=None,
        metadata={"help": "comma-separated target languages routed into the selective "
                          "language-specific pool; every other target language goes through "
                          "the universal layer (e.g. fr,cs,de,fi,et,tr)"},
    )
    slp_pool_size: int = field(
        default=3, metadata={"help": "T, the number of modules in the pool (1 <= T <= number of "
                                     "high-resource languages)"})
    slp_hidden_dim: Optional[int] = field(
        default=None, metadata={"help": "inner dimension h of each pool / universal module "
                                        "(default: --decoder-ffn-embed-dim)"})
    slp_hard_prob: float = field(
        default=0.5, metadata={"help": "probability that a training update routes hard (argmax "
                                       "module only) rather than soft while the gate is learning"})
    slp_language_specific: bool = field(
        default=False, metadata={"help": "LS-MNMT baseline: one pool module per language of "
                                         "--high-resource-langs (in that order), no gate: the routing map is "
                                         "the identity from the start; needs --slp-pool-size equal to their number"})


def validate(slp: SlpConfig, task) -> List[str]:
    """Check the SLP options against the task; return the high-resource languages."""
    if not isinstance(task, TranslationMultiSimpleEpochTask):
        raise HltmtConfigError(
            f"--arch hltmt_transformer needs --task hltmt_translation (got {type(task).__name__})")
    high = split_langs(slp.high_resource_langs)
    if not high:
        raise HltmtConfigError("--high-resource-langs is required: the comma-separated target "
                               "languages that the pool serves, e.g. --high-resource-langs fr,de,cs")
    unknown = [lang for lang in high if lang not in task.langs]
    if unknown:
        raise HltmtConfigError(f"--high-resource-langs names {','.join(unknown)}, not in the language "
                               f"list ({','.join(task.langs)}) given by --langs / --lang-dict")
    if len(set(high)) != len(high):
        raise HltmtConfigError(f"--high-resource-langs lists a language twice: {','.join(high)}")
    if not 1 <= slp.slp_pool_size <= len(high):
        raise HltmtConfigError(f"--slp-pool-size must lie in [1, {len(high)}] (the number of "
                               f"high-resource languages), got {slp.slp_pool_size}")
    if slp.slp_hidden_dim is not None and slp.slp_hidden_dim < 1:
        raise HltmtConfigError(f"--slp-hidden-dim must be positive, got {slp.slp_hidden_dim}")
    if slp.slp_language_specific and slp.slp_pool_size != len(high):
        raise HltmtConfigError(f"--slp-language-specific gives each of the {len(high)} languages of "
                               f"--high-resource-langs its own module: set --slp-pool-size {len(high)}")
    if not 0.0 <= slp.slp_hard_prob <= 1.0:
        raise HltmtConfigError(f"--slp-hard-prob must lie in [0, 1], got {slp.slp_hard_prob}")
    encoder_langtok = getattr(task.args, "encoder_langtok", None)
    if encoder_langtok != "tgt":
        raise HltmtConfigError(
            "HLT-MT routes each sentence by its target language, read from the target-language "
            "token that --encoder-langtok tgt puts on the source; "
            f"add --encoder-langtok tgt (got --encoder-langtok {encoder_langtok})")
    return high


class HltmtTransformerEncoder(SkillEncoderMixin, AdapterEncoderMixin, TransformerEncoderBase):
    """The fairseq encoder, plus each row's target language in ``encoder_out[TGT_LANG]``.

    With ``adapter_cfg`` (``--language-adapters`` ...), its layers call adapters chosen by each
    row's source language (``src_lang_id`` from ``--enable-lang-ids``), also handed on in
    ``encoder_out[SRC_LANG]``; see :mod:`hltmt_plugin.modules.adapters`. With ``skill_cfg``
    (``--skill-ffn``, ``--skill-attention``), the chosen layers hold SkillNet-X skills chosen by
    each row's direction; see :mod:`hltmt_plugin.modules.skills`.
    """

    def set_languages(self, langs: List[str], lang_tok_style: str, langtok_at_end: bool):
        table = torch.full((len(self.dictionary),), -1, dtype=torch.long)
        for i, lang in enumerate(langs):
            table[self.dictionary.index(get_lang_tok(lang, lang_tok_style))] = i
        self.register_buffer("lang_of_token", table, persistent=False)
        self.langtok_at_end = langtok_at_end

    def target_languages(self, src_tokens: Tensor) -> Tensor:
        """(B,) index in --langs of each row's target-language token; error if a row has none."""
        not_pad = src_tokens.ne(self.padding_idx).long()
        if self.langtok_at_end:  # --lang-tok-replacing-bos-eos: the token replaces the final eos
            pos = src_tokens.size(1) - 1 - not_pad.flip(1).argmax(dim=1)
        else:  # the first non-pad token (sources are usually left-padded)
            pos = not_pad.argmax(dim=1)
        tokens = src_tokens.gather(1, pos.unsqueeze(1)).squeeze(1)
        langs = self.lang_of_token[tokens]
        if bool((langs < 0).any()):
            bad = tokens[langs < 0]
            raise HltmtInputError(
                f"{bad.numel()} of {tokens.numel()} sentences in this batch carry no target-language "
                f"token (found {self.dictionary[int(bad[0])]!r} where __xx__ should be): train and "
                "decode with --encoder-langtok tgt, and list every language in --langs / --lang-dict")
        return langs

    def forward(self, src_tokens, src_lengths: Optional[Tensor] = None, return_all_hiddens: bool = False,
                token_embeddings: Optional[Tensor] = None, src_lang_id: Optional[Tensor] = None, **unused):
        # src_lang_id: fairseq's --enable-lang-ids adds it (and tgt_lang_id) to net_input.
        tgt_lang = self.target_languages(src_tokens)
        skills = self.skill_plan is not None
        src_lang = (self.source_languages(src_tokens, src_lang_id)
                    if self.needs_source_language() or skills else None)
        with self.adapter_rows.use(src_lang), self.skill_rows.use(src_lang if skills else None, tgt_lang):
            out = super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        out[TGT_LANG] = [tgt_lang]
        if src_lang is not None:
            out[SRC_LANG] = [src_lang]
        return out

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order):
        out = super().reorder_encoder_out(encoder_out, new_order)
        for key in (TGT_LANG, SRC_LANG):
            if key in encoder_out:
                out[key] = [t.index_select(0, new_order) for t in encoder_out[key]]
        return out


class HltmtTransformerDecoder(SearchPlans, TransformerDecoderBase):
    """The fairseq decoder with the SLP after its last layer, before the output projection.

    In a beam search the SLP's routing plan is made at the first step and kept with the beams
    (:class:`~hltmt_plugin.modules.routing.SearchPlans`), not recomputed per token."""

    def __init__(self, cfg: TransformerConfig, dictionary, embed_tokens, slp: SlpConfig, num_high: int,
                 seed: int = 1, no_encoder_attn: bool = False):
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        normalize_before = cfg.decoder.normalize_before
        if normalize_before and self.project_out_dim is not None:
            raise HltmtConfigError("a pre-norm decoder with --decoder-output-dim different from "
                                   "--decoder-embed-dim is not supported by the SLP")
        self.slp = SelectiveLanguagePool(
            self.output_embed_dim, slp.slp_hidden_dim or cfg.decoder.ffn_embed_dim, slp.slp_pool_size,
            num_high, hard_prob=slp.slp_hard_prob, seed=seed, activation_fn=cfg.activation_fn, dropout=cfg.dropout,
            activation_dropout=cfg.activation_dropout, normalize_before=normalize_before)
        # Pre-norm: the decoder's final layer norm moves above the SLP, so the output
        # projection still sees normalised features.
        self.slp_output_norm = None
        if normalize_before and self.layer_norm is not None:
            self.slp_output_norm, self.layer_norm = self.layer_norm, None

    def set_languages(self, langs: List[str], high: List[str], lang_tok_style: str):
        self.register_buffer("high_of_lang", torch.tensor(
            [high.index(lang) if lang in high else -1 for lang in langs], dtype=torch.long), persistent=False)
        self.register_buffer("high_tokens", torch.tensor(
            [self.dictionary.index(get_lang_tok(lang, lang_tok_style)) for lang in high],
            dtype=torch.long), persistent=False)

    def high_lang_embeddings(self) -> Tensor:
        """The model's own embedding rows of the high-resource language tokens (H x d)."""
        return self.embed_tokens.weight.index_select(0, self.high_tokens)

    def extract_features(self, prev_output_tokens, encoder_out: Optional[Dict[str, List[Tensor]]],
                         incremental_state=None, full_context_alignment: bool = False,
                         alignment_layer: Optional[int] = None, alignment_heads: Optional[int] = None):
        x, extra = super().extract_features(prev_output_tokens, encoder_out, incremental_state,
                                            full_context_alignment, alignment_layer, alignment_heads)
        if encoder_out is None or not encoder_out.get(TGT_LANG):
            raise HltmtInputError("the decoder got no target language per sentence: HLT-MT needs the "
                                  "hltmt_transformer encoder's output (and --encoder-langtok tgt)")
        tgt_lang = encoder_out[TGT_LANG][0]
        if self.slp.use_soft_routing():
            x, routing = self.slp(x, self.high_of_lang.index_select(0, tgt_lang), self.high_lang_embeddings())
        else:  # hard: one plan per forward pass, or per beam search
            plan = self.search_plan(incremental_state, "slp", lambda: self.slp.module_ids(
                self.high_of_lang.index_select(0, tgt_lang), self.high_lang_embeddings()))
            x, routing = self.slp(x, None, None, plan)
        if self.slp_output_norm is not None:
            x = self.slp_output_norm(x)
        extra.update(routing)
        extra[TGT_LANG] = tgt_lang
        return x, extra


class HltmtAdapterDecoder(AdapterDecoderMixin, HltmtTransformerDecoder):
    """The HLT-MT decoder with adapters by target language (``--decoder-adapters``,
    ``--invertible-adapters``); see :mod:`hltmt_plugin.modules.adapters`."""


@register_model("hltmt_transformer")
class HltmtTransformerModel(TransformerModel):
    """Transformer + selective language-specific pool and universal layer (HLT-MT)."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        gen_parser_from_dataclass(parser, SlpConfig())
        gen_parser_from_dataclass(parser, PretrainedConfig())
        gen_parser_from_dataclass(parser, AdapterConfig())
        gen_parser_from_dataclass(parser, PeftConfig())
        gen_parser_from_dataclass(parser, SkillConfig())

    @classmethod
    def build_model(cls, args, task):
        slp = SlpConfig.from_namespace(args)
        high = validate(slp, task)
        adapters = plan_adapters(AdapterConfig.from_namespace(args), args, task)
        skills = plan_skills(SkillConfig.from_namespace(args), args, task)
        model = super().build_model(args, task)
        style = task.args.lang_tok_style
        model.encoder.set_languages(task.langs, style, bool(getattr(task.args, "lang_tok_replacing_bos_eos", False)))
        model.decoder.set_languages(task.langs, high, style)
        model.high_resource_langs = high
        if slp.slp_language_specific:
            model.decoder.slp.fix_map_to(torch.arange(len(high)))
        logger.info(f"HLT-MT: pool of {slp.slp_pool_size} modules for {','.join(high)}; universal "
                    f"layer for {','.join(lang for lang in task.langs if lang not in high) or '(none)'}")
        install_adapters(model, adapters, task.data_manager.lang_dict, single_source_language(task))
        if skills is not None:
            if adapters is None:
                model.encoder.set_source_languages(task.langs, task.data_manager.lang_dict,
                                                   single_source_language(task))
            install_skills(model, skills)
        apply_train_only(model, PeftConfig.from_namespace(args), task, args)
        return model

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return HltmtTransformerEncoder(TransformerConfig.from_namespace(args), src_dict, embed_tokens,
                                       adapter_cfg=AdapterConfig.from_namespace(args),
                                       skill_cfg=SkillConfig.from_namespace(args))

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        slp = SlpConfig.from_namespace(args)
        adapters = AdapterConfig.from_namespace(args)
        decoder_cls, extra = HltmtTransformerDecoder, {}
        if adapters.decoder_layers_need_hooks():
            decoder_cls, extra = HltmtAdapterDecoder, {"adapter_cfg": adapters}
        return decoder_cls(TransformerConfig.from_namespace(args), tgt_dict, embed_tokens, slp,
                           num_high=len(split_langs(slp.high_resource_langs)),
                           seed=getattr(args, "seed", 1),
                           no_encoder_attn=getattr(args, "no_cross_attention", False), **extra)

    def forward(self, src_tokens, src_lengths, prev_output_tokens, return_all_hiddens: bool = True,
                features_only: bool = False, alignment_layer: Optional[int] = None,
                alignment_heads: Optional[int] = None, src_lang_id: Optional[Tensor] = None, **unused):
        # src_lang_id: fairseq's --enable-lang-ids adds it (and tgt_lang_id) to net_input; the
        # encoder's source-language adapters read it. TransformerModel.forward, plus that.
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, return_all_hiddens=return_all_hiddens,
                                   src_lang_id=src_lang_id)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=features_only,
                            alignment_layer=alignment_layer, alignment_heads=alignment_heads,
                            src_lengths=src_lengths, return_all_hiddens=return_all_hiddens)

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        try:
            return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)
        except RuntimeError as error:
            details = " ".join(str(error).split())
            raise HltmtInputError("the checkpoint does not fit the model its options build (another "
                                  f"architecture, language list or version?): {details[:600]}") from None

    @property
    def slp(self) -> SelectiveLanguagePool:
        return self.decoder.slp

    def routing_map(self) -> Dict[str, int]:
        """``g(l)`` for each high-resource language: the fixed map, or the gate's argmax now."""
        current = self.slp.current_map(self.decoder.high_lang_embeddings())
        return dict(zip(self.high_resource_langs, current.tolist()))

    def fix_routing_map(self) -> Dict[str, int]:
        """Fix ``g(l) = argmax p_l`` from the current gate (stage all) and freeze the gate."""
        fixed = self.slp.fix_map(self.decoder.high_lang_embeddings())
        return dict(zip(self.high_resource_langs, fixed.tolist()))


def _slp_defaults(args):
    args.slp_pool_size = getattr(args, "slp_pool_size", 3)
    args.slp_hard_prob = getattr(args, "slp_hard_prob", 0.5)


@register_model_architecture("hltmt_transformer", "hltmt_transformer")
def hltmt_transformer(args):
    """Transformer-base sizes (d 512, FFN 2048, 6+6 layers, 8 heads)."""
    _slp_defaults(args)
    base_architecture(args)


@register_model_architecture("hltmt_transformer", "hltmt_transformer_big")
def hltmt_transformer_big(args):
    """Transformer-big sizes (d 1024, FFN 4096, 6+6 layers, 16 heads)."""
    _slp_defaults(args)
    transformer_wmt_en_de_big(args)


@register_model_architecture("hltmt_transformer", "hltmt_transformer_xlmr_base")
def hltmt_transformer_xlmr_base(args):
    """The authors' recipe: an XLM-R-base-shaped encoder (12 layers, d 768, FFN 3072, 12 heads,
    learned positions, embedding layer norm, unscaled embeddings, GELU) and a 6-layer decoder
    of the same width, for --pretrained-xlmr-checkpoint."""
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 768)
    args.encoder_ffn_embed_dim = getattr(args, "encoder_ffn_embed_dim", 3072)
    args.encoder_layers = getattr(args, "encoder_layers", 12)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 12)
    args.decoder_layers = getattr(args, "decoder_layers", 6)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 12)
    args.encoder_learned_pos = getattr(args, "encoder_learned_pos", True)
    args.decoder_learned_pos = getattr(args, "decoder_learned_pos", True)
    args.layernorm_embedding = getattr(args, "layernorm_embedding", True)
    args.no_scale_embedding = getattr(args, "no_scale_embedding", True)
    args.activation_fn = getattr(args, "activation_fn", "gelu")
    args.max_source_positions = getattr(args, "max_source_positions", 512)
    args.max_target_positions = getattr(args, "max_target_positions", 512)
    args.share_all_embeddings = getattr(args, "share_all_embeddings", True)
    hltmt_transformer(args)


# Sizes for CPU work, shared with the plain-transformer baselines (models/baselines.py).
CPU_SIZES = {
    "tiny": dict(encoder_embed_dim=128, encoder_ffn_embed_dim=256, encoder_layers=2, encoder_attention_heads=4,
                 decoder_layers=2, decoder_attention_heads=4, share_decoder_input_output_embed=True),
    "small": dict(encoder_embed_dim=256, encoder_ffn_embed_dim=1024, encoder_layers=4, encoder_attention_heads=4,
                  decoder_layers=3, decoder_attention_heads=4, share_decoder_input_output_embed=True),
}


def set_sizes(args, name: str):
    """Default the model sizes of ``args`` to ``CPU_SIZES[name]`` (what is set stays)."""
    for key, value in CPU_SIZES[name].items():
        setattr(args, key, getattr(args, key, value))


@register_model_architecture("hltmt_transformer", "hltmt_transformer_tiny")
def hltmt_transformer_tiny(args):
    """A small model for tests and CPU demos (d 128, FFN 256, 2+2 layers, 4 heads)."""
    set_sizes(args, "tiny")
    hltmt_transformer(args)


@register_model_architecture("hltmt_transformer", "hltmt_transformer_small")
def hltmt_transformer_small(args):
    """The DebMT-10 CPU benchmark size (d 256, FFN 1024, 4+3 layers, 4 heads)."""
    set_sizes(args, "small")
    hltmt_transformer(args)
