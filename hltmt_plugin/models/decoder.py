"""The HLT-MT decoder: fairseq's ``TransformerDecoderBase`` with the SLP after its last layer,
before the output projection (:class:`~hltmt_plugin.pool.head.PoolHead`, called once per pass
with the record in ``encoder_out``: each row's target language). Its language modules (the
SLP, target-language adapters) share the pass's rows (:class:`~hltmt_plugin.routing.PassRows`);
in a beam search their route plans are made at the first step and kept with the beams
(:class:`~hltmt_plugin.routing.SearchPlans`)."""

from typing import Dict, List, Optional

from fairseq.distributed import fsdp_wrap
from fairseq.models.transformer import TransformerConfig, TransformerDecoderBase
from torch import Tensor

from hltmt_plugin.adapters.feature import fill_missing_weights
from hltmt_plugin.errors import HltmtInputError
from hltmt_plugin.languages import ROWS, rows_of
from hltmt_plugin.models.layers import Layouts, decoder_layer
from hltmt_plugin.pool.head import PoolHead, upgrade_pool_state
from hltmt_plugin.routing import PassRows, SearchPlans


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
        self.pool_head = PoolHead.install(self, cfg, slp_cfg, high_langs, seed)  # slp, slp_router, slp_output_norm

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        layer = decoder_layer(cfg, self.rows, self.layouts, no_encoder_attn)
        if layer is None:
            return super().build_decoder_layer(cfg, no_encoder_attn)
        return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap)

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
            if self.pool_head is not None:
                x, routing = self.pool_head(x, record, self.rows)
            if self.invertible_adapters is not None:  # B x T x C, just before the tied output projection
                x = self.invertible_adapters.inverse(x, self.rows, dim=0)
        extra.update(routing)
        extra[ROWS] = record
        return x, extra

    def upgrade_state_dict_named(self, state_dict, name):
        super().upgrade_state_dict_named(state_dict, name)
        fill_missing_weights(self, state_dict, name)
        upgrade_pool_state(self.pool_head, state_dict, name)
        return state_dict
