"""The SLP on the decoder's top, wired in one place: :class:`PoolHead` builds the pool and its
router, installs them on the decoder under the names of :mod:`~hltmt_plugin.pool.keys` (a
checkpoint holds ``decoder.slp.*`` and ``decoder.slp_router.*``), hands the router what it
reads (the rows' target languages, the decoder's embedding table, the pass's rows) and runs the
pool by the router's decision. The decoder calls it once per pass, after its last layer and
before the output projection (:meth:`PoolHead.__call__`); a pre-norm decoder's final layer norm
moves above the pool (``slp_output_norm``), so the output projection still reads normalised
features. :func:`upgrade_pool_state` reads a checkpoint's pool for the decoder: refused by a
decoder without one, started as the identity from a plain transformer's."""

import logging
from typing import Dict, Optional, Tuple

from torch import Tensor

from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.languages import TGT, LanguageTable
from hltmt_plugin.pool.keys import POOL, ROUTER
from hltmt_plugin.pool.modules import SelectiveLanguagePool
from hltmt_plugin.pool.router import LanguageRouter

logger = logging.getLogger(__name__)
OUTPUT_NORM = "slp_output_norm"  # the pre-norm decoder's final layer norm, above the pool


class PoolHead:
    """The pool (``decoder.slp``), its router (``decoder.slp_router``) and, pre-norm, the
    decoder's final layer norm above them (``decoder.slp_output_norm``): the modules are the
    decoder's (their state, their device, train or eval), the wiring is here.

    Built by :meth:`install`; the router keeps a hard step's plan in the decoder's pass rows
    (one per forward pass, or per beam search)."""

    def __init__(self, decoder, pool: SelectiveLanguagePool, router: LanguageRouter, output_norm=None):
        self.pool, self.router, self.output_norm = pool, router, output_norm
        self.embed_tokens, self.dictionary = decoder.embed_tokens, decoder.dictionary
        self.top_norm = f"layers.{len(decoder.layers) - 1}.final_layer_norm."  # the top layer's, post-norm

    @classmethod
    def install(cls, decoder, cfg, slp_cfg, high_langs, seed: int = 1) -> Optional["PoolHead"]:
        """The pool of ``--high-resource-langs`` ``high_langs`` on ``decoder`` (a fairseq
        ``TransformerDecoderBase`` built from ``cfg``), or None without them (fairseq's own top)."""
        normalize_before = cfg.decoder.normalize_before
        if normalize_before and decoder.project_out_dim is not None:
            raise HltmtConfigError(
                "a pre-norm decoder with --decoder-output-dim different from "
                "--decoder-embed-dim is not supported by the SLP"
            )
        setattr(decoder, POOL, None)
        setattr(decoder, ROUTER, None)
        setattr(decoder, OUTPUT_NORM, None)
        if not high_langs:
            return None
        dim = decoder.output_embed_dim
        pool = SelectiveLanguagePool(
            dim,
            slp_cfg.slp_hidden_dim or cfg.decoder.ffn_embed_dim,
            slp_cfg.slp_pool_size,
            activation_fn=cfg.activation_fn,
            dropout=cfg.dropout,
            activation_dropout=cfg.activation_dropout,
            normalize_before=normalize_before,
        )
        router = LanguageRouter(dim, slp_cfg.slp_pool_size, high_langs, hard_prob=slp_cfg.slp_hard_prob, seed=seed)
        setattr(decoder, POOL, pool)
        setattr(decoder, ROUTER, router)
        if normalize_before and decoder.layer_norm is not None:
            setattr(decoder, OUTPUT_NORM, decoder.layer_norm)
            decoder.layer_norm = None
        return cls(decoder, pool, router, getattr(decoder, OUTPUT_NORM))

    def set_languages(self, languages: LanguageTable) -> None:
        """The task's languages (the encoder's table): the router's ``--langs``, and where the
        high-resource language tokens lie in the decoder's embedding table (the gate's input)."""
        rows = [languages.token_index(lang, self.dictionary) for lang in self.router.high_langs]
        self.router.set_languages(languages.langs, rows)

    def __call__(self, x: Tensor, record: Tensor, rows) -> Tuple[Tensor, Dict[str, Optional[Tensor]]]:
        """The pool on ``x`` (B x T x C, the last layer's output) for rows of ``record`` in the
        decoder's pass ``rows``: the router's decision (soft or hard, made once), the pool, the
        norm above it; and the decision for the decoder's extra (``slp_module``, ``slp_gate``)."""
        decision = self.router(record[:, TGT], self.embed_tokens.weight, rows)
        x = self.pool(x, decision)
        if self.output_norm is not None:
            x = self.output_norm(x)
        return x, {"slp_module": decision.module_ids, "slp_gate": decision.gate_probs}

    # the router's table, the routing map and the gate, by language name (the model's surface reads these)
    def routes(self) -> Dict[str, str]:
        return self.router.routes(self.embed_tokens.weight)

    def map_by_language(self) -> Dict[str, int]:
        return self.router.map_by_language(self.embed_tokens.weight)

    def gate_probs(self) -> Tensor:
        return self.router.gate_probs(self.embed_tokens.weight)

    def fix_map(self) -> Dict[str, int]:
        self.router.fix_map(self.router.map_ids(self.embed_tokens.weight))
        return self.map_by_language()

    def start_from_dense(self, state_dict, prefix: str) -> None:
        """A checkpoint of fairseq's plain ``transformer`` (no pool) loads with the pool added as
        the identity on top of its decoder: each pool module and the universal layer start with
        ``fc2`` at zero (the residual passes the top layer's output through) and, post-norm,
        with the top layer's final layer norm as their own; ``fc1`` and the gate keep their
        fresh initialisation. Pre-norm, the decoder's final layer norm becomes the one above the pool."""
        if any(key.startswith(prefix + POOL + ".") for key in state_dict):
            return
        top = prefix + self.top_norm
        fresh_state = {f"{POOL}.{k}": v for k, v in self.pool.state_dict().items()}
        fresh_state.update({f"{ROUTER}.{k}": v for k, v in self.router.state_dict().items()})
        for key, value in fresh_state.items():
            if prefix + key in state_dict:
                continue
            fresh = value.detach().clone()
            if key.endswith(".fc2.weight") or key.endswith(".fc2.bias"):
                fresh.zero_()
            elif ".layer_norm." in key and self.output_norm is None and top + key.rsplit(".", 1)[1] in state_dict:
                fresh = state_dict[top + key.rsplit(".", 1)[1]].clone()
            state_dict[prefix + key] = fresh
        if self.output_norm is not None:
            for suffix in ("weight", "bias"):
                if prefix + "layer_norm." + suffix in state_dict:
                    state_dict[f"{prefix}{OUTPUT_NORM}.{suffix}"] = state_dict.pop(prefix + "layer_norm." + suffix)
        logger.info(
            "HLT-MT: the checkpoint has no pool (a plain transformer): the pool modules and the universal "
            "layer start as the identity on its top decoder layer (fc2 at zero), the gate fresh"
        )


def upgrade_pool_state(head: Optional[PoolHead], state_dict, name: str) -> None:
    """The pool's part of the decoder's ``upgrade_state_dict_named`` (``name``: the decoder's,
    ``"decoder"``): a checkpoint's pool refused by a decoder without one; a plain transformer's
    checkpoint started with the pool as the identity. The router reads its own state's older
    forms (:meth:`LanguageRouter.upgrade_state_dict_named`)."""
    prefix = f"{name}." if name else ""
    if head is not None:
        head.start_from_dense(state_dict, prefix)
    elif any(key.startswith((prefix + POOL + ".", prefix + ROUTER + ".")) for key in state_dict):
        raise HltmtInputError(
            "the checkpoint has an HLT-MT pool and these options build none: pass the training "
            "run's --high-resource-langs"
        )
