"""The HLT-MT decoder: fairseq's ``TransformerDecoderBase`` with the SLP after its last layer,
before the output projection, routed by each row's target language from the record in
``encoder_out``: the SLP's router (``slp_router``, a module of its own) decides each pass's
routing from the rows' target languages and the gate's input (the model's own embedding rows
of the high-resource language tokens, handed in by the decoder), the pool (``slp``) routes the
rows by that decision. In a beam search the route plans (SLP,
target-language adapters) are made at the first step and kept with the beams
(:class:`~hltmt_plugin.routing.SearchPlans`)."""

import logging
from typing import Dict, List, Optional

import torch
from fairseq.distributed import fsdp_wrap
from fairseq.models.transformer import TransformerConfig, TransformerDecoderBase
from torch import Tensor

from hltmt_plugin.adapters.feature import fill_missing_weights
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.languages import ROWS, TGT, LanguageTable, rows_of
from hltmt_plugin.models.layers import Layouts, decoder_layer
from hltmt_plugin.pool.keys import POOL, ROUTER
from hltmt_plugin.pool.modules import RoutingDecision, SelectiveLanguagePool
from hltmt_plugin.pool.router import LanguageRouter
from hltmt_plugin.routing import PassRows, SearchPlans

logger = logging.getLogger(__name__)


class HltmtTransformerDecoder(SearchPlans, TransformerDecoderBase):
    def __init__(
        self,
        cfg: TransformerConfig,
        dictionary,
        embed_tokens,
        slp_cfg,
        high_langs: List[str],
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
        if not high_langs:  # no --high-resource-langs: no pool, fairseq's own decoder top
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
        self.slp_router = LanguageRouter(
            self.output_embed_dim, slp_cfg.slp_pool_size, high_langs, hard_prob=slp_cfg.slp_hard_prob, seed=seed
        )
        # Pre-norm: the decoder's final layer norm moves above the SLP, so the output
        # projection still sees normalised features.
        if normalize_before and self.layer_norm is not None:
            self.slp_output_norm, self.layer_norm = self.layer_norm, None

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        layer = decoder_layer(cfg, self.rows, self.layouts, no_encoder_attn)
        if layer is None:
            return super().build_decoder_layer(cfg, no_encoder_attn)
        return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap)

    def set_languages(self, languages: LanguageTable) -> None:
        """The task's languages (the encoder's table): the router's ``--langs``, and where the
        high-resource language tokens sit in this decoder's embedding table (the gate's input)."""
        if self.slp is None:
            return
        self.slp_router.set_languages(languages.langs)
        rows = [languages.token_index(lang, self.dictionary) for lang in self.slp_router.high_langs]
        self.register_buffer("high_tokens", torch.tensor(rows, dtype=torch.long), persistent=False)

    def high_lang_embeddings(self) -> Tensor:
        """The gate's input: the model's own embedding rows of the high-resource language tokens (H x d)."""
        return self.embed_tokens.weight.index_select(0, self.high_tokens)

    def gate_input(self) -> Optional[Tensor]:
        """What the router reads to route: the embedding rows while the gate learns; nothing once
        the map is fixed (the map alone routes)."""
        return None if self.slp_router.map_is_fixed else self.high_lang_embeddings()

    def slp_decision(self, record: Tensor) -> RoutingDecision:
        """This pass's routing, decided by the router (soft or hard, once) from the rows' target
        languages and the gate's input; a hard step's plan is kept in the pass's rows (once per
        forward pass, or once per beam search)."""
        return self.slp_router(record[:, TGT], self.gate_input(), self.rows)

    # the routing map and the gate, by language name (the model's surface reads these)
    def map_by_language(self) -> Dict[str, int]:
        return {} if self.slp is None else self.slp_router.map_by_language(self.gate_input())

    def gate_probs(self) -> Tensor:
        return self.slp_router.gate_probs(self.high_lang_embeddings())

    def fix_map(self) -> Dict[str, int]:
        self.slp_router.fix_map(self.slp_router.map_ids(self.gate_input()))
        return self.map_by_language()

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
                decision = self.slp_decision(record)
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
            prefix = f"{name}." if name else ""
            if any(key.startswith((prefix + POOL + ".", prefix + ROUTER + ".")) for key in state_dict):
                raise HltmtInputError(
                    "the checkpoint has an HLT-MT pool and these options build none: pass the "
                    "training run's --high-resource-langs"
                )
            return state_dict
        self._start_pool_from_dense(state_dict, f"{name}." if name else "")
        return state_dict  # the router reads its own state's older forms (LanguageRouter.upgrade_state_dict_named)

    def _start_pool_from_dense(self, state_dict, prefix: str) -> None:
        """A checkpoint of fairseq's plain ``transformer`` (no pool) loads with the pool added as
        the identity on top of its decoder: each pool module and the universal layer start with
        ``fc2`` at zero (the residual passes the top layer's output through) and, post-norm,
        with the top layer's final layer norm as their own; ``fc1`` and the gate keep their
        fresh initialisation. Pre-norm, the decoder's final layer norm becomes the one above the pool."""
        if any(key.startswith(prefix + POOL + ".") for key in state_dict):
            return
        top = f"{prefix}layers.{len(self.layers) - 1}.final_layer_norm."
        for key, value in self.state_dict().items():
            if key.startswith((POOL + ".", ROUTER + ".")) and prefix + key not in state_dict:
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
