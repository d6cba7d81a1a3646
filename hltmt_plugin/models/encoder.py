"""The HLT-MT encoder: fairseq's ``TransformerEncoderBase`` that makes each batch's language
record (:mod:`hltmt_plugin.languages`) once per forward pass, runs its layers with it, and
hands it on in ``encoder_out``."""

from typing import Dict, List, Optional

from fairseq.distributed import fsdp_wrap
from fairseq.models.transformer import TransformerEncoderBase
from torch import Tensor

from hltmt_plugin.adapters.feature import fill_missing_weights
from hltmt_plugin.languages import ROWS, reorder_rows
from hltmt_plugin.models.layers import Layouts, encoder_layer
from hltmt_plugin.routing import PassRows


class HltmtTransformerEncoder(TransformerEncoderBase):
    """Set up by the model: ``languages`` (the :class:`~hltmt_plugin.languages.LanguageTable`),
    and by the features: adapters (``adapter_layout``, ``invertible_adapters``), skills
    (``skill_layout``, ``skill_directions``)."""

    def __init__(self, cfg, dictionary, embed_tokens, layouts: Optional[Layouts] = None, return_fc: bool = False):
        # read by build_encoder_layer, which fairseq's __init__ calls once per layer, in order
        self.layouts = layouts or Layouts()
        self.rows = PassRows("encoder")
        self._layers_built = 0
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)
        self.languages = None
        self.adapter_layout = self.skill_layout = None
        self.invertible_adapters = None

    def build_encoder_layer(self, cfg):
        index, self._layers_built = self._layers_built, self._layers_built + 1
        layer = encoder_layer(cfg, index, self.rows, self.layouts, self.return_fc)
        if layer is None:
            return super().build_encoder_layer(cfg)
        return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap)

    def forward(
        self,
        src_tokens,
        src_lengths: Optional[Tensor] = None,
        return_all_hiddens: bool = False,
        token_embeddings: Optional[Tensor] = None,
        src_lang_id: Optional[Tensor] = None,
        tgt_lang_id: Optional[Tensor] = None,
        **unused,
    ):
        # src_lang_id / tgt_lang_id: --enable-lang-ids puts them in net_input (tasks.collation).
        record = self.languages.record(src_tokens, src_lang_id, tgt_lang_id)
        with self.rows.use(record):
            out = super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        out[ROWS] = [record]
        return out

    def forward_embedding(self, src_tokens, token_embedding: Optional[Tensor] = None):
        x, embed = super().forward_embedding(src_tokens, token_embedding)
        if self.invertible_adapters is not None:  # B x T x C, what the first layer receives
            x = self.invertible_adapters(x, self.rows, dim=0)
        return x, embed

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order):
        return reorder_rows(encoder_out, super().reorder_encoder_out(encoder_out, new_order), new_order)

    def upgrade_state_dict_named(self, state_dict, name):
        super().upgrade_state_dict_named(state_dict, name)
        fill_missing_weights(self, state_dict, name)
        return state_dict
