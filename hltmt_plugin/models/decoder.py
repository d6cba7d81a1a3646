"""The HLT-MT decoder: fairseq's ``TransformerDecoderBase`` with the SLP after its last layer,
before the output projection, routed by each row's target language from the record in
``encoder_out``: the SLP's router (``slp_router``) decides each pass's routing, the pool
(``slp``) routes the rows by that decision. In a beam search the route plans (SLP,
target-language adapters) are made at the first step and kept with the beams
(:class:`~hltmt_plugin.modules.routing.SearchPlans`)."""

import logging
from typing import Dict, List, Optional

import torch
from torch import Tensor

from fairseq.data.multilingual.multilingual_utils import get_lang_tok
from fairseq.distributed import fsdp_wrap
from fairseq.models.transformer import TransformerConfig, TransformerDecoderBase

from hltmt_plugin.adapters.feature import fill_missing_weights
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.languages import ROWS, TGT, PassRows, names_of, names_tensor, rows_of
from hltmt_plugin.models.layers import Layouts, decoder_layer
from hltmt_plugin.modules.language_pool import SelectiveLanguagePool
from hltmt_plugin.modules.language_router import LanguageRouter
from hltmt_plugin.modules.routing import SearchPlans

logger = logging.getLogger(__name__)

SLP_IDS = "slp"  # PassRows ids: each row's SLP module under hard routing


class HltmtTransformerDecoder(SearchPlans, TransformerDecoderBase):
    def __init__(
        self,
        cfg: TransformerConfig,
        dictionary,
        embed_tokens,
        slp_cfg,
        num_high: int,
        seed: int = 1,
        no_encoder_attn: bool = False,
        layouts: Optional[Layouts] = None,
    ):
        self.layouts = layouts or Layouts()  # read by build_decoder_layer during fairseq's __init__
        self.rows = PassRows("decoder")
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        self.adapter_layout = self.invertible_adapters = None
        normalize_before = cfg.decoder.normalize_before
        if normalize_before and self.project_out_dim is not None:
            raise HltmtConfigError(
                "a pre-norm decoder with --decoder-output-dim different from "
                "--decoder-embed-dim is not supported by the SLP"
            )
        self.slp = self.slp_router = self.slp_output_norm = None
        if num_high == 0:  # no --high-resource-langs: no pool, fairseq's own decoder top
            return
        self.slp = SelectiveLanguagePool(
            self.output_embed_dim,
            slp_cfg.slp_hidden_dim or cfg.decoder.ffn_embed_dim,
            slp_cfg.slp_pool_size,
            activation_fn=cfg.activation_fn,
            dropout=cfg.dropout,
            activation_dropout=cfg.activation_dropout,
            normalize_before=normalize_before,
        )
        # its tensors live on the pool: decoder.slp.gate.*, decoder.slp.fixed_map_onehot, decoder.slp.gate_steps
        self.slp_router = LanguageRouter(
            self.slp, self.output_embed_dim, slp_cfg.slp_pool_size, num_high, hard_prob=slp_cfg.slp_hard_prob, seed=seed
        )
        # Pre-norm: the decoder's final layer norm moves above the SLP, so the output
        # projection still sees normalised features.
        if normalize_before and self.layer_norm is not None:
            self.slp_output_norm, self.layer_norm = self.layer_norm, None
        self.rows.define(SLP_IDS, self.slp_module_ids)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        layer = decoder_layer(cfg, self.rows, self.layouts, no_encoder_attn)
        if layer is None:
            return super().build_decoder_layer(cfg, no_encoder_attn)
        return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap)

    def set_languages(self, langs: List[str], high: List[str], lang_tok_style: str):
        if self.slp is None:
            return
        self.slp_router.set_languages(langs, high, self.high_lang_embeddings)
        self.register_buffer(
            "high_tokens",
            torch.tensor(
                [self.dictionary.index(get_lang_tok(lang, lang_tok_style)) for lang in high], dtype=torch.long
            ),
            persistent=False,
        )
        # saved with the weights: the map's entries belong to these languages, in this order
        self.register_buffer("high_langs", names_tensor(high))

    def high_lang_embeddings(self) -> Tensor:
        """The model's own embedding rows of the high-resource language tokens (H x d)."""
        return self.embed_tokens.weight.index_select(0, self.high_tokens)

    def slp_module_ids(self, record: Tensor) -> Tensor:
        return self.slp_router.module_ids(record[:, TGT])

    def set_num_updates(self, num_updates: int) -> None:
        """fairseq hands every module of the model the update count before each training step:
        the router draws the step's routing."""
        if self.slp_router is not None:
            self.slp_router.set_num_updates(num_updates)

    def invertible_input(self, x: Tensor) -> Tensor:  # T x B x C: the first layer's input
        return self.invertible_adapters(x, self.rows, dim=1)

    def extract_features(
        self,
        prev_output_tokens,
        encoder_out: Optional[Dict[str, List[Tensor]]],
        incremental_state=None,
        full_context_alignment: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
    ):
        record = rows_of(encoder_out)
        if record is None:
            raise HltmtInputError(
                "the decoder got no target language per sentence: HLT-MT needs the "
                "hltmt_transformer encoder's output (and --encoder-langtok tgt)"
            )
        with self.rows.use(record, self.search_plans(incremental_state)):
            x, extra = super().extract_features(
                prev_output_tokens,
                encoder_out,
                incremental_state,
                full_context_alignment,
                alignment_layer,
                alignment_heads,
            )
            routing = {}
            if self.slp is not None:  # a hard step's plan: one per forward pass, or per beam search
                decision = self.slp_router.decide(record[:, TGT], plan=lambda: self.rows.plan(SLP_IDS))
                x = self.slp(x, decision)
                routing = {"slp_module": decision.module_ids, "slp_gate": decision.gate_probs}
            if self.slp_output_norm is not None:
                x = self.slp_output_norm(x)
            if self.invertible_adapters is not None:  # B x T x C, just before the tied output projection
                x = self.invertible_adapters.inverse(x, self.rows, dim=0)
        extra.update(routing)
        extra[ROWS] = record
        return x, extra

    def upgrade_state_dict_named(self, state_dict, name):
        super().upgrade_state_dict_named(state_dict, name)
        fill_missing_weights(self, state_dict, name)
        if self.slp is None:
            if any(key.startswith(f"{name}.slp." if name else "slp.") for key in state_dict):
                raise HltmtInputError(
                    "the checkpoint has an HLT-MT pool and these options build none: pass the "
                    "training run's --high-resource-langs"
                )
            return state_dict
        self._start_pool_from_dense(state_dict, f"{name}." if name else "")
        self._map_by_language(state_dict, f"{name}." if name else "")
        return state_dict

    def _start_pool_from_dense(self, state_dict, prefix: str) -> None:
        """A checkpoint of fairseq's plain ``transformer`` (no pool) loads with the pool added as
        the identity on top of its decoder: each pool module and the universal layer start with
        ``fc2`` at zero (the residual passes the top layer's output through) and, post-norm,
        with the top layer's final layer norm as their own; ``fc1`` and the gate keep their
        fresh initialisation. Pre-norm, the decoder's final layer norm becomes the one above the pool."""
        if any(key.startswith(prefix + "slp.") for key in state_dict):
            return
        top = f"{prefix}layers.{len(self.layers) - 1}.final_layer_norm."
        for key, value in self.state_dict().items():
            if key.startswith("slp.") and prefix + key not in state_dict:
                fresh = value.detach().clone()
                if key.endswith(".fc2.weight") or key.endswith(".fc2.bias"):
                    fresh.zero_()
                elif (
                    ".layer_norm." in key and self.slp_output_norm is None and top + key.rsplit(".", 1)[1] in state_dict
                ):
                    fresh = state_dict[top + key.rsplit(".", 1)[1]].clone()
                state_dict[prefix + key] = fresh
        if self.slp_output_norm is not None:
            for suffix in ("weight", "bias"):
                if prefix + "layer_norm." + suffix in state_dict:
                    state_dict[prefix + "slp_output_norm." + suffix] = state_dict.pop(prefix + "layer_norm." + suffix)
        logger.info(
            "HLT-MT: the checkpoint has no pool (a plain transformer): the pool modules and the universal "
            "layer start as the identity on its top decoder layer (fc2 at zero), the gate fresh"
        )

    def _map_by_language(self, state_dict, prefix: str) -> None:
        """The checkpoint's routing map, reordered to this model's --high-resource-langs (the
        same languages in another order); other languages are refused, naming both lists."""
        key = prefix + "high_langs"
        saved, ours = state_dict.get(key), self.slp_router.high
        state_dict[key] = self.high_langs.clone()
        if saved is None or names_of(saved) == ours:  # (None: a checkpoint from before the names were saved)
            return
        saved = names_of(saved)
        if sorted(saved) != sorted(ours):
            raise HltmtInputError(
                f"the checkpoint's pool serves --high-resource-langs {','.join(saved)} and these "
                f"options name {','.join(ours)}: pass the training run's --high-resource-langs"
            )
        for mapping in (prefix + "slp.fixed_map_onehot", prefix + "slp.fixed_map"):  # (fixed_map: older checkpoints)
            if mapping in state_dict:
                state_dict[mapping] = state_dict[mapping].index_select(0, torch.tensor([saved.index(x) for x in ours]))
