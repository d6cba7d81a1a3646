"""Adapters as a feature of ``hltmt_transformer``: the layer classes the encoder and decoder
build, installing the planned adapters into a built model, and loading checkpoints without them.

Rows choose by language through the record (:mod:`hltmt_plugin.languages`): the encoder's
adapters by the source language, the decoder's by the target language.
"""

import logging
from typing import Dict, Optional

from torch import nn

from hltmt_plugin.adapters.config import SITES, AdapterLayout
from hltmt_plugin.adapters.modules import ADAPTER_IDS, AdapterStack, InvertibleAdapters
from hltmt_plugin.adapters.report import (
    adapter_language,
    format_parameter_report,
    is_adapter_parameter,
    parameter_report,
)
from hltmt_plugin.languages import SRC, TGT

logger = logging.getLogger(__name__)


def source_ids(record):
    return record[:, SRC]


def target_ids(record):
    return record[:, TGT]


def _install_side(side: nn.Module, layout: AdapterLayout, layers, dim: int) -> None:
    cfg = layout.cfg
    for i in layers:
        for site in SITES[cfg.adapter_placement]:
            side.layers[i].adapters[site] = AdapterStack(
                dim,
                layout.language_dim if cfg.language_adapters else None,
                layout.adapter_langs,
                layout.shared_dim if cfg.shared_adapters else None,
                layout.langs,
            )
    if cfg.invertible_adapters:
        side.invertible_adapters = InvertibleAdapters(dim, layout.invertible_dim, layout.adapter_langs, layout.langs)
    side.adapter_layout = layout


def install(model, layout: Optional[AdapterLayout]) -> None:
    """Add the planned adapters to a freshly built hltmt_transformer and log the report."""
    if layout is None:
        return
    encoder, decoder = model.encoder, model.decoder
    _install_side(encoder, layout, layout.encoder_layers, layout.encoder_dim)
    encoder.rows.define(ADAPTER_IDS, source_ids)
    if layout.cfg.needs_source_language():
        encoder.languages.need_source = True
    if layout.decoder_hooks:
        _install_side(decoder, layout, layout.decoder_layers, layout.decoder_dim)
        decoder.rows.define(ADAPTER_IDS, target_ids)
        if decoder.invertible_adapters is not None:
            decoder.layers[0].input_adapters = decoder.invertible_input
    for line in format_parameter_report(parameter_report(model)):
        logger.info(line)


def add_language(side: nn.Module, lang: str) -> None:
    """Give ``lang`` its own (identity-initialised) language and invertible adapters."""
    for layer in side.layers:
        for stack in getattr(layer, "adapters", {}).values():
            stack.add_language(lang)
    if side.invertible_adapters is not None:
        side.invertible_adapters.add_language(lang)


def fill_missing_weights(side: nn.Module, state_dict: Dict, name: str) -> None:
    """A checkpoint without (some of) this side's adapter weights loads with them at their
    fresh, identity initialisation: adapters added to a trained model, or a new language."""
    if side.adapter_layout is None:
        return
    prefix = f"{name}." if name else ""
    missing = []
    for key, value in side.state_dict().items():
        if is_adapter_parameter(key) and prefix + key not in state_dict:
            state_dict[prefix + key] = value.detach().clone()
            missing.append(key)
    if missing:
        langs = sorted({lang for key in missing for lang in [adapter_language(key)] if lang})
        logger.info(
            f"adapters: the checkpoint has no weights for {len(missing)} {name or 'model'} adapter tensors"
            f"{' (languages ' + ','.join(langs) + ')' if langs else ''}; they start at identity"
        )
