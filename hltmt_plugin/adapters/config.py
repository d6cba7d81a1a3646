"""Adapter options (:class:`AdapterConfig`) and what they resolve to against the task and the
model sizes (:class:`AdapterLayout`, made by :func:`layout_adapters` before the model is built)."""

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from hltmt_plugin.config import OptionGroup, check_allocation, parse_layers
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.languages import check_known, single_source_language, split_list

HOULSBY, PFEIFFER = "houlsby", "pfeiffer"
SELF_ATTN, ENCODER_ATTN, FFN = "self_attn", "encoder_attn", "ffn"
SITES = {HOULSBY: (SELF_ATTN, FFN), PFEIFFER: (FFN,)}


@dataclass
class AdapterConfig(OptionGroup):
    language_adapters: bool = field(
        default=False,
        metadata={
            "help": "MAD-X language adapters: one bottleneck adapter per language in each "
            "chosen encoder layer, chosen per sentence by its source language "
            "(needs --enable-lang-ids, or -s when decoding one source language)"
        },
    )
    shared_adapters: bool = field(
        default=False,
        metadata={
            "help": "one bottleneck adapter per chosen layer shared by all languages; "
            "stacked on top of the language adapter (MAD-X's task adapter) when "
            "--language-adapters is on, a plain Houlsby/Pfeiffer adapter otherwise"
        },
    )
    decoder_adapters: bool = field(
        default=False,
        metadata={
            "help": "put the same adapters in the decoder layers too, language adapters chosen by the target language"
        },
    )
    invertible_adapters: bool = field(
        default=False,
        metadata={
            "help": "MAD-X invertible (NICE) adapters per language on the encoder's input "
            "embeddings (source language) and the decoder's (target language); the "
            "target language's inverse runs before the tied output projection"
        },
    )
    adapter_placement: str = field(
        default=PFEIFFER,
        metadata={
            "help": "houlsby: after self-attention and after the FFN, before the "
            "residual add and layer norm; pfeiffer: after the FFN only (MAD-X)"
        },
    )
    adapter_reduction_factor: float = field(
        default=2.0, metadata={"help": "language adapter size m = d / factor (MAD-X: 2)"}
    )
    adapter_dim: Optional[int] = field(
        default=None, metadata={"help": "language adapter size m (overrides --adapter-reduction-factor)"}
    )
    shared_adapter_reduction_factor: float = field(
        default=16.0, metadata={"help": "shared adapter size m = d / factor (MAD-X task adapter: 16)"}
    )
    shared_adapter_dim: Optional[int] = field(
        default=None, metadata={"help": "shared adapter size m (overrides --shared-adapter-reduction-factor)"}
    )
    invertible_adapter_reduction_factor: float = field(
        default=2.0,
        metadata={
            "help": "inner size of the invertible adapter's F and G: (d/2) / factor (MAD-X: 2, i.e. d/2 -> d/4 -> d/2)"
        },
    )
    adapter_layers: Optional[str] = field(
        default=None, metadata={"help": "comma-separated encoder layers (0-based) that get adapters (default: all)"}
    )
    decoder_adapter_layers: Optional[str] = field(
        default=None,
        metadata={
            "help": "comma-separated decoder layers (0-based) that get adapters with --decoder-adapters (default: all)"
        },
    )
    adapter_langs: Optional[str] = field(
        default=None,
        metadata={
            "help": "comma-separated languages that get language / invertible adapters "
            "(default: every language of --langs); a sentence in another language "
            "is an error. Add a language to a trained model by listing it here"
        },
    )

    @property
    def bottleneck(self) -> bool:
        return self.language_adapters or self.shared_adapters

    @property
    def enabled(self) -> bool:
        return self.bottleneck or self.invertible_adapters

    def needs_source_language(self) -> bool:
        return self.language_adapters or self.invertible_adapters


def _size(dim: int, factor: float, explicit: Optional[int], option: str) -> int:
    if explicit is not None:
        if explicit < 1:
            raise HltmtConfigError(f"--{option}-dim must be positive, got {explicit}")
        check_allocation(f"--{option}-dim", explicit, 2 * dim * explicit)  # one adapter: down and up
        return explicit
    if not factor > 0:
        raise HltmtConfigError(f"--{option}-reduction-factor must be positive, got {factor}")
    return max(1, int(round(dim / factor)))


@dataclass
class AdapterLayout:
    """The adapter options resolved against the task and the model sizes: which layers hold
    adapters of which sizes, for which languages."""

    cfg: AdapterConfig
    langs: List[str]  # every language of the task (--langs), in order: row ids index this list
    adapter_langs: List[str]  # languages that get language / invertible adapters
    encoder_dim: int
    decoder_dim: int
    encoder_layers: List[int]
    decoder_layers: List[int]
    language_dim: int
    shared_dim: int
    invertible_dim: int
    encoder_normalize_before: bool
    decoder_normalize_before: bool

    @property
    def encoder_hooks(self) -> bool:
        """The encoder's layers call adapters after their sublayers."""
        return self.cfg.bottleneck

    @property
    def decoder_hooks(self) -> bool:
        """The decoder's layers call adapters (bottleneck in the decoder, or the invertible input)."""
        return (self.cfg.bottleneck and self.cfg.decoder_adapters) or self.cfg.invertible_adapters

    def adapters_of(self, src: str, tgt: str) -> List[Tuple[str, str, str]]:
        """The one rule of which per-language adapters serve a sentence ``src -> tgt``: (side,
        kind, language) for each it goes through; the encoder's by the source language, the
        decoder's by the target language; kinds ``language`` and ``invertible``."""
        c = self.cfg
        served = []
        if c.language_adapters:
            served.append(("encoder", "language", src))
        if c.invertible_adapters:
            served.append(("encoder", "invertible", src))
        if c.language_adapters and c.decoder_adapters:
            served.append(("decoder", "language", tgt))
        if c.invertible_adapters:
            served.append(("decoder", "invertible", tgt))
        return served

    def languages_of(self, src: str, tgt: str) -> Tuple[Optional[str], Optional[str]]:
        """The languages whose adapters a sentence ``src -> tgt`` goes through: (in the
        encoder, in the decoder), None where it goes through no per-language adapter."""
        sides = {side for side, _, _ in self.adapters_of(src, tgt)}
        return (src if "encoder" in sides else None), (tgt if "decoder" in sides else None)

    def route(self, src: str, tgt: str) -> Dict[str, object]:
        """The adapters of ``src -> tgt``, or HltmtInputError naming the language that has none."""
        enc, dec = self.languages_of(src, tgt)
        for lang, side in ((enc, "source"), (dec, "target")):
            if lang is not None and lang not in self.adapter_langs:
                raise HltmtInputError(
                    f"direction {src}-{tgt}: the model has no adapters for {side} language {lang} (adapters exist "
                    f"for {','.join(self.adapter_langs)}); train or import them (hltmt-adapters)"
                )
        return {"encoder": enc, "decoder": dec, "shared": bool(self.cfg.shared_adapters)}

    def check_trainable(self, lang_pairs: List[str]) -> None:
        """Every language that a direction to train sends through a per-language adapter has
        one (checked before the first update, not when the language's first batch arrives)."""
        needed = {lang for pair in lang_pairs for lang in self.languages_of(*pair.split("-")) if lang is not None}
        missing = sorted(needed - set(self.adapter_langs))
        if missing:
            raise HltmtConfigError(
                f"--adapter-langs ({','.join(self.adapter_langs)}) leaves out {','.join(missing)}, "
                "which --lang-pairs sends through a language adapter: add it to --adapter-langs, "
                "or leave its directions out of --lang-pairs"
            )

    def sizes(self) -> Dict[str, object]:
        """What an exported adapter file must agree on with the model it goes into."""
        c = self.cfg
        return {
            "placement": c.adapter_placement,
            "language_adapters": c.language_adapters,
            "shared_adapters": c.shared_adapters,
            "decoder_adapters": c.decoder_adapters,
            "invertible_adapters": c.invertible_adapters,
            "encoder_dim": self.encoder_dim,
            "decoder_dim": self.decoder_dim,
            "encoder_layers": list(self.encoder_layers),
            "decoder_layers": list(self.decoder_layers) if c.decoder_adapters else [],
            "language_dim": self.language_dim if c.language_adapters else 0,
            "invertible_dim": self.invertible_dim if c.invertible_adapters else 0,
            "encoder_normalize_before": self.encoder_normalize_before,
            "decoder_normalize_before": self.decoder_normalize_before,
        }


def _check_invertible(args) -> None:
    enc_dim, dec_dim = args.encoder_embed_dim, args.decoder_embed_dim
    tied = getattr(args, "share_decoder_input_output_embed", False) or getattr(args, "share_all_embeddings", False)
    if not tied:
        raise HltmtConfigError(
            "--invertible-adapters runs the target language's inverse before the output "
            "projection, which is the decoder's input embedding only when they are tied: "
            "add --share-decoder-input-output-embed"
        )
    if enc_dim % 2 or dec_dim % 2:
        raise HltmtConfigError(
            f"--invertible-adapters splits each embedding in two halves: the embedding "
            f"dims must be even (got {enc_dim}, {dec_dim})"
        )
    out_dim = getattr(args, "decoder_output_dim", dec_dim) or dec_dim
    in_dim = getattr(args, "decoder_input_dim", dec_dim) or dec_dim
    if out_dim != dec_dim or in_dim != dec_dim:
        raise HltmtConfigError(
            "--invertible-adapters needs --decoder-input-dim and --decoder-output-dim equal to --decoder-embed-dim"
        )
    if float(getattr(args, "decoder_layerdrop", 0) or 0) > 0:
        raise HltmtConfigError(
            "--invertible-adapters runs the decoder's invertible adapter on the first layer's "
            "input, which --decoder-layerdrop can skip: use --decoder-layerdrop 0"
        )


def layout_adapters(args, task) -> Optional[AdapterLayout]:
    """Check the adapter options against the task and model sizes (before the model is built)."""
    cfg = AdapterConfig.from_namespace(args)
    if cfg.decoder_adapters and not cfg.bottleneck:
        raise HltmtConfigError(
            "--decoder-adapters puts the encoder's adapters in the decoder too: "
            "add --language-adapters and/or --shared-adapters"
        )
    if not cfg.enabled:
        return None
    if cfg.adapter_placement not in SITES:
        raise HltmtConfigError(f"--adapter-placement must be {HOULSBY} or {PFEIFFER}, got {cfg.adapter_placement}")
    if getattr(args, "checkpoint_activations", False):
        raise HltmtConfigError(
            "adapters choose per sentence by language, which activation checkpointing "
            "cannot replay: drop --checkpoint-activations"
        )
    langs = list(task.langs)
    adapter_langs = split_list(cfg.adapter_langs) or list(langs)
    check_known(adapter_langs, langs, "--adapter-langs")
    if cfg.invertible_adapters:
        _check_invertible(args)
    if cfg.needs_source_language():
        if not getattr(task.args, "enable_lang_ids", False) and single_source_language(task) is None:
            raise HltmtConfigError(
                "language and invertible adapters choose each sentence's encoder adapter by its source language, "
                "which --encoder-langtok tgt does not put on the source: add --enable-lang-ids (fairseq then "
                "hands each sentence's source language to the model)"
            )
    dim = args.encoder_embed_dim  # sizes follow the encoder; a decoder of another width gets the same m
    return AdapterLayout(
        cfg=cfg,
        langs=langs,
        adapter_langs=adapter_langs,
        encoder_dim=args.encoder_embed_dim,
        decoder_dim=args.decoder_embed_dim,
        encoder_layers=parse_layers(cfg.adapter_layers, args.encoder_layers, "adapter-layers")
        if cfg.bottleneck
        else [],
        decoder_layers=(
            parse_layers(cfg.decoder_adapter_layers, args.decoder_layers, "decoder-adapter-layers")
            if cfg.bottleneck and cfg.decoder_adapters
            else []
        ),
        language_dim=_size(dim, cfg.adapter_reduction_factor, cfg.adapter_dim, "adapter"),
        shared_dim=_size(dim, cfg.shared_adapter_reduction_factor, cfg.shared_adapter_dim, "shared-adapter"),
        invertible_dim=_size(dim // 2, cfg.invertible_adapter_reduction_factor, None, "invertible-adapter"),
        encoder_normalize_before=bool(getattr(args, "encoder_normalize_before", False)),
        decoder_normalize_before=bool(getattr(args, "decoder_normalize_before", False)),
    )
