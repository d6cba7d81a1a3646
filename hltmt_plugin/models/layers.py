"""Which layer class each encoder / decoder layer is, from the features' layouts: fairseq's
own layer when no feature touches it, else the subclass that holds exactly those features."""

from dataclasses import dataclass
from typing import Optional

from hltmt_plugin.adapters.config import AdapterLayout
from hltmt_plugin.adapters.layers import AdapterDecoderLayer, AdapterEncoderLayer
from hltmt_plugin.routing import PassRows
from hltmt_plugin.skills.config import SkillLayout
from hltmt_plugin.skills.layers import SkillEncoderLayer, SkillLayerMixin, layer_spec


class SkillAdapterEncoderLayer(SkillLayerMixin, AdapterEncoderLayer):
    """Skills inside, adapters after the sublayers: the two features in one encoder layer."""


@dataclass
class Layouts:
    """What the optional features resolved to for one model (None: the feature is off)."""

    adapters: Optional[AdapterLayout] = None
    skills: Optional[SkillLayout] = None


def encoder_layer(cfg, index: int, rows: PassRows, layouts: Layouts, return_fc: bool):
    """Layer ``index`` of the encoder, or None for fairseq's own."""
    hooks = layouts.adapters is not None and layouts.adapters.encoder_hooks
    skilled = layouts.skills is not None and index in layouts.skills.layers
    kwargs = dict(placement=layouts.adapters.cfg.adapter_placement, rows=rows) if hooks else {}
    if skilled:
        cls = SkillAdapterEncoderLayer if hooks else SkillEncoderLayer
        return cls(cfg, skills=layer_spec(layouts.skills, rows), return_fc=return_fc, **kwargs)
    if hooks:
        return AdapterEncoderLayer(cfg, return_fc=return_fc, **kwargs)
    return None


def decoder_layer(cfg, rows: PassRows, layouts: Layouts, no_encoder_attn: bool):
    """A decoder layer, or None for fairseq's own."""
    adapters = layouts.adapters
    if adapters is None or not adapters.decoder_hooks:
        return None
    return AdapterDecoderLayer(cfg, adapters.cfg.adapter_placement, rows, no_encoder_attn)
