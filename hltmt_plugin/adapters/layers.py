"""fairseq's Transformer layers with adapter stacks after their sublayers.

fairseq's layers add each sublayer's output to its input through ``residual_connection``;
the adapter layers override it. Which sublayer a residual belongs to: the attention that ran
since the last residual (a forward hook on ``self_attn`` / ``encoder_attn`` marks it), or
the FFN when none did. Placement (``x``: the sublayer's output after dropout, ``res``: its
input, ``LN``: the layer norm that follows):

- **houlsby** (Houlsby et al. 2019): after self-attention and after the FFN, on the
  sublayer's output, before the residual add and layer norm: ``LN(res + A(x))``.
- **pfeiffer** (MAD-X eq. 1): after the FFN only. With ``r = res + x`` and ``h = LN(r)``:
  ``LN(delta(h) + r)``, the layer's own layer norm applied again, as in AdapterHub. In a
  pre-norm layer it sits where Houlsby's FFN adapter sits.

Layers whose index the options leave out hold no stack (``adapters`` stays empty) and compute
exactly fairseq's layer. Which sublayer ran is kept per thread (:class:`SublayerMark`), as the
pass's rows are: one model serves passes in several threads at once.
"""

import threading
from typing import Callable, Optional

from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase
from torch import Tensor, nn

from hltmt_plugin.adapters.config import ENCODER_ATTN, FFN, PFEIFFER, SELF_ATTN
from hltmt_plugin.routing import PassRows


class SublayerMark:
    """Which sublayer of a layer ran since its last residual, per thread: marked by the
    attentions' forward hooks, taken (and reset to the FFN) by ``residual_connection``. A copy of
    the model (deepcopy, pickle) is made outside any pass and starts unmarked."""

    def __init__(self):
        self._thread = threading.local()

    def __getstate__(self):
        return {}

    def __setstate__(self, state):
        self.__init__()

    def mark(self, site: str) -> None:
        self._thread.site = site

    def take(self) -> str:
        site = getattr(self._thread, "site", FFN)
        self._thread.site = FFN
        return site


class AdapterLayerMixin:
    """``residual_connection`` through the adapter stack of the sublayer that just ran."""

    def _init_adapters(self, placement: str, rows: PassRows) -> None:
        self.placement = placement
        self.rows = rows
        self.adapters = nn.ModuleDict()  # site -> AdapterStack, filled when adapters are installed
        self._site = SublayerMark()
        self.self_attn.register_forward_hook(self._after_self_attn)
        if getattr(self, "encoder_attn", None) is not None:
            self.encoder_attn.register_forward_hook(self._after_encoder_attn)

    def _after_self_attn(self, *_):
        self._site.mark(SELF_ATTN)

    def _after_encoder_attn(self, *_):
        self._site.mark(ENCODER_ATTN)

    def residual_connection(self, x: Tensor, residual: Tensor) -> Tensor:
        site = self._site.take()
        stack = self.adapters[site] if site in self.adapters else None
        if stack is None:
            return residual + x
        if site == FFN and self.placement == PFEIFFER and not self.normalize_before:
            r = residual + x  # MAD-X: r = the FFN block's output, h = its layer norm; the layer normalises again
            return stack(self.final_layer_norm(r), r, self.rows)
        return residual + stack(x, x, self.rows)


class AdapterEncoderLayer(AdapterLayerMixin, TransformerEncoderLayerBase):
    """fairseq's encoder layer with adapter stacks after its sublayers."""

    def __init__(self, cfg, placement: str, rows: PassRows, return_fc: bool = False, **kwargs):
        super().__init__(cfg, return_fc=return_fc, **kwargs)
        self._init_adapters(placement, rows)


class AdapterDecoderLayer(AdapterLayerMixin, TransformerDecoderLayerBase):
    """fairseq's decoder layer with adapter stacks after its sublayers; the first layer also
    runs the decoder's invertible adapters on its input (the embedding layer's output)."""

    def __init__(self, cfg, placement: str, rows: PassRows, no_encoder_attn: bool = False):
        super().__init__(cfg, no_encoder_attn=no_encoder_attn)
        self._init_adapters(placement, rows)
        self.input_adapters: Optional[Callable[[Tensor], Tensor]] = None  # the decoder sets it on layer 0

    def forward(
        self,
        x,
        encoder_out: Optional[Tensor] = None,
        encoder_padding_mask: Optional[Tensor] = None,
        incremental_state=None,
        *args,
        **kwargs,
    ):
        if self.input_adapters is not None:
            x = self.input_adapters(x)
        return super().forward(x, encoder_out, encoder_padding_mask, incremental_state, *args, **kwargs)
