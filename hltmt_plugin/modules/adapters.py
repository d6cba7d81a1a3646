"""Adapters: bottleneck (Houlsby / Pfeiffer placement), language adapters (MAD-X) with an
optional shared adapter stacked on top, and invertible (NICE) adapters on the embeddings.

Every adapter is a residual bottleneck ``delta(h) = U act(D h)`` (``D: d -> m``,
``U: m -> d``, ReLU as in MAD-X). ``U`` starts at exactly zero, so a model with freshly
added adapters computes exactly what the model without them computes (near-identity
initialisation, here an exact identity); ``D`` starts as a default ``nn.Linear``.

Placement in a Transformer layer (``x``: a sublayer's output after dropout, ``res``: the
sublayer's input, ``LN``: the layer norm that follows the sublayer):

- **houlsby** (Houlsby et al. 2019): after self-attention and after the FFN, on the
  sublayer's output, before the residual add and layer norm:
  ``LN(res + A(x))`` with ``A(x) = x + delta(x)``.
- **pfeiffer** (Pfeiffer et al. 2020, MAD-X eq. 1): after the FFN only. With
  ``r = res + x`` (the FFN block's output) and ``h = LN(r)``: ``LN(delta(h) + r)``, the
  layer's own layer norm applied again, as in AdapterHub. In a pre-norm layer (no layer
  norm after the sublayer) it sits where Houlsby's FFN adapter sits.

The adapters at one place form a stack (MAD-X eq. 2): the language adapter of the row's
language (chosen per row through :func:`~hltmt_plugin.modules.routing.route`), then the
shared adapter (MAD-X's task adapter), each taking the previous output and the same skip
``r``: ``h1 = delta_lang(h) + r``, ``h2 = delta_shared(h1) + r`` (``h = r = x`` for houlsby),
as AdapterHub's ``Stack`` does. So while the shared adapter is at its identity start, the
language adapter below it has no effect and gets no gradient (MAD-X trains the language
adapters first); after one update of the shared adapter both train.

Invertible adapters (MAD-X section 4.3, NICE coupling) act on the embedding layer's output
(token embedding x scale + positions, after dropout; what the first layer receives),
split ``e = [e1, e2]``: ``o1 = e1 + F(e2)``, ``o2 = e2 + G(o1)``; the inverse
``e2 = o2 - G(o1)``, ``e1 = o1 - F(e2)`` runs before the tied output projection.

Which language each row has is set by the encoder / decoder around its forward pass in a
:class:`RowLanguages` that its layers share (the layers' ``forward`` takes no language),
so the language travels with ``encoder_out`` and beam search routes as a full forward does.
"""
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from fairseq.distributed import fsdp_wrap
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase

from hltmt_plugin.config import OptionGroup
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.modules.routing import RoutePlan, SearchPlans, route

logger = logging.getLogger(__name__)

HOULSBY, PFEIFFER = "houlsby", "pfeiffer"
SELF_ATTN, ENCODER_ATTN, FFN = "self_attn", "encoder_attn", "ffn"
SITES = {HOULSBY: (SELF_ATTN, FFN), PFEIFFER: (FFN,)}
ENCODER, DECODER = "encoder", "decoder"

# Module names that mark adapter parameters in a state dict (see is_adapter_parameter).
LANGUAGE_ADAPTERS, SHARED_ADAPTER, INVERTIBLE_ADAPTERS = "language_adapters", "shared_adapter", "invertible_adapters"


@dataclass
class AdapterConfig(OptionGroup):
    language_adapters: bool = field(
        default=False, metadata={"help": "MAD-X language adapters: one bottleneck adapter per language in each "
                                         "chosen encoder layer, chosen per sentence by its source language "
                                         "(needs --enable-lang-ids, or -s when decoding one source language)"})
    shared_adapters: bool = field(
        default=False, metadata={"help": "one bottleneck adapter per chosen layer shared by all languages; "
                                         "stacked on top of the language adapter (MAD-X's task adapter) when "
                                         "--language-adapters is on, a plain Houlsby/Pfeiffer adapter otherwise"})
    decoder_adapters: bool = field(
        default=False, metadata={"help": "put the same adapters in the decoder layers too, language adapters "
                                         "chosen by the target language"})
    invertible_adapters: bool = field(
        default=False, metadata={"help": "MAD-X invertible (NICE) adapters per language on the encoder's input "
                                         "embeddings (source language) and the decoder's (target language); the "
                                         "target language's inverse runs before the tied output projection"})
    adapter_placement: str = field(
        default=PFEIFFER, metadata={"help": "houlsby: after self-attention and after the FFN, before the "
                                            "residual add and layer norm; pfeiffer: after the FFN only (MAD-X)"})
    adapter_reduction_factor: float = field(
        default=2.0, metadata={"help": "language adapter size m = d / factor (MAD-X: 2)"})
    adapter_dim: Optional[int] = field(
        default=None, metadata={"help": "language adapter size m (overrides --adapter-reduction-factor)"})
    shared_adapter_reduction_factor: float = field(
        default=16.0, metadata={"help": "shared adapter size m = d / factor (MAD-X task adapter: 16)"})
    shared_adapter_dim: Optional[int] = field(
        default=None, metadata={"help": "shared adapter size m (overrides --shared-adapter-reduction-factor)"})
    invertible_adapter_reduction_factor: float = field(
        default=2.0, metadata={"help": "inner size of the invertible adapter's F and G: (d/2) / factor "
                                       "(MAD-X: 2, i.e. d/2 -> d/4 -> d/2)"})
    adapter_layers: Optional[str] = field(
        default=None, metadata={"help": "comma-separated encoder layers (0-based) that get adapters "
                                        "(default: all)"})
    decoder_adapter_layers: Optional[str] = field(
        default=None, metadata={"help": "comma-separated decoder layers (0-based) that get adapters with "
                                        "--decoder-adapters (default: all)"})
    adapter_langs: Optional[str] = field(
        default=None, metadata={"help": "comma-separated languages that get language / invertible adapters "
                                        "(default: every language of --langs); a sentence in another language "
                                        "is an error. Add a language to a trained model by listing it here"})

    @property
    def bottleneck(self) -> bool:
        return self.language_adapters or self.shared_adapters

    @property
    def enabled(self) -> bool:
        return self.bottleneck or self.invertible_adapters

    def encoder_layers_need_hooks(self) -> bool:
        return self.bottleneck

    def decoder_layers_need_hooks(self) -> bool:
        return (self.bottleneck and self.decoder_adapters) or self.invertible_adapters

    def needs_source_language(self) -> bool:
        return self.language_adapters or self.invertible_adapters


def _size(dim: int, factor: float, explicit: Optional[int], option: str) -> int:
    if explicit is not None:
        if explicit < 1:
            raise HltmtConfigError(f"--{option}-dim must be positive, got {explicit}")
        return explicit
    if not factor > 0:
        raise HltmtConfigError(f"--{option}-reduction-factor must be positive, got {factor}")
    return max(1, int(round(dim / factor)))


def _layers(value: Optional[str], num_layers: int, option: str) -> List[int]:
    if value is None or str(value).strip() == "":
        return list(range(num_layers))
    try:
        layers = sorted({int(v) for v in str(value).split(",") if v.strip()})
    except ValueError:
        raise HltmtConfigError(f"--{option} takes comma-separated layer numbers, got {value!r}") from None
    bad = [i for i in layers if not 0 <= i < num_layers]
    if bad or not layers:
        raise HltmtConfigError(f"--{option} names layer(s) {','.join(map(str, bad)) or '(none)'}; "
                               f"this model has layers 0..{num_layers - 1}")
    return layers


@dataclass
class AdapterPlan:
    """The adapter options resolved against the task and the model sizes."""
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

    def sizes(self) -> Dict[str, object]:
        """What an exported adapter file must agree on with the model it goes into."""
        c = self.cfg
        return {"placement": c.adapter_placement, "language_adapters": c.language_adapters,
                "shared_adapters": c.shared_adapters, "decoder_adapters": c.decoder_adapters,
                "invertible_adapters": c.invertible_adapters, "encoder_dim": self.encoder_dim,
                "decoder_dim": self.decoder_dim, "encoder_layers": list(self.encoder_layers),
                "decoder_layers": list(self.decoder_layers) if c.decoder_adapters else [],
                "language_dim": self.language_dim if c.language_adapters else 0,
                "invertible_dim": self.invertible_dim if c.invertible_adapters else 0,
                "encoder_normalize_before": self.encoder_normalize_before,
                "decoder_normalize_before": self.decoder_normalize_before}


def single_source_language(task) -> Optional[str]:
    """The source language of every direction of ``task``, if they all have one (e.g. ``-s``
    at generation); None otherwise."""
    pairs = getattr(task, "lang_pairs", None) or []
    if isinstance(pairs, str):
        pairs = pairs.split(",")
    sources = {pair.split("-")[0].strip() for pair in pairs if pair.strip()}
    return sources.pop() if len(sources) == 1 else None


def plan_adapters(cfg: AdapterConfig, args, task) -> Optional[AdapterPlan]:
    """Check the adapter options against the task and model sizes (before the model is built)."""
    if cfg.decoder_adapters and not cfg.bottleneck:
        raise HltmtConfigError("--decoder-adapters puts the encoder's adapters in the decoder too: "
                               "add --language-adapters and/or --shared-adapters")
    if not cfg.enabled:
        return None
    if cfg.adapter_placement not in SITES:
        raise HltmtConfigError(f"--adapter-placement must be {HOULSBY} or {PFEIFFER}, got {cfg.adapter_placement}")
    if getattr(args, "checkpoint_activations", False):
        raise HltmtConfigError("adapters choose per sentence by language, which activation checkpointing "
                               "cannot replay: drop --checkpoint-activations")
    langs = list(task.langs)
    adapter_langs = [v.strip() for v in str(cfg.adapter_langs or "").split(",") if v.strip()] or list(langs)
    unknown = [lang for lang in adapter_langs if lang not in langs]
    if unknown:
        raise HltmtConfigError(f"--adapter-langs names {','.join(unknown)}, not in the language list "
                               f"({','.join(langs)}) given by --langs / --lang-dict")
    if len(set(adapter_langs)) != len(adapter_langs):
        raise HltmtConfigError(f"--adapter-langs lists a language twice: {','.join(adapter_langs)}")
    enc_dim, dec_dim = args.encoder_embed_dim, args.decoder_embed_dim
    if cfg.invertible_adapters:
        tied = getattr(args, "share_decoder_input_output_embed", False) or getattr(args, "share_all_embeddings", False)
        if not tied:
            raise HltmtConfigError("--invertible-adapters runs the target language's inverse before the output "
                                   "projection, which is the decoder's input embedding only when they are tied: "
                                   "add --share-decoder-input-output-embed")
        if enc_dim % 2 or dec_dim % 2:
            raise HltmtConfigError(f"--invertible-adapters splits each embedding in two halves: the embedding "
                                   f"dims must be even (got {enc_dim}, {dec_dim})")
        out_dim = getattr(args, "decoder_output_dim", dec_dim) or dec_dim
        in_dim = getattr(args, "decoder_input_dim", dec_dim) or dec_dim
        if out_dim != dec_dim or in_dim != dec_dim:
            raise HltmtConfigError("--invertible-adapters needs --decoder-input-dim and --decoder-output-dim "
                                   "equal to --decoder-embed-dim")
    if cfg.needs_source_language():
        if not getattr(task.args, "enable_lang_ids", False) and single_source_language(task) is None:
            raise HltmtConfigError(
                "language and invertible adapters choose each sentence's encoder adapter by its source language, "
                "which --encoder-langtok tgt does not put on the source: add --enable-lang-ids (fairseq then "
                "hands each sentence's source language to the model)")
    dim = enc_dim  # sizes follow the encoder; a decoder of another width gets the same m
    return AdapterPlan(
        cfg=cfg, langs=langs, adapter_langs=adapter_langs, encoder_dim=enc_dim, decoder_dim=dec_dim,
        encoder_layers=_layers(cfg.adapter_layers, args.encoder_layers, "adapter-layers") if cfg.bottleneck else [],
        decoder_layers=(_layers(cfg.decoder_adapter_layers, args.decoder_layers, "decoder-adapter-layers")
                        if cfg.bottleneck and cfg.decoder_adapters else []),
        language_dim=_size(dim, cfg.adapter_reduction_factor, cfg.adapter_dim, "adapter"),
        shared_dim=_size(dim, cfg.shared_adapter_reduction_factor, cfg.shared_adapter_dim, "shared-adapter"),
        invertible_dim=_size(dim // 2, cfg.invertible_adapter_reduction_factor, None, "invertible-adapter"),
        encoder_normalize_before=bool(getattr(args, "encoder_normalize_before", False)),
        decoder_normalize_before=bool(getattr(args, "decoder_normalize_before", False)))


# ---------------------------------------------------------------------------------------
# the modules


class Bottleneck(nn.Module):
    """``delta(h) = U relu(D h)``, ``2md + d + m`` parameters; ``U`` starts at zero."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.down = nn.Linear(dim, hidden)
        self.up = nn.Linear(hidden, dim)
        nn.init.zeros_(self.down.bias)
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)

    def forward(self, h: Tensor) -> Tensor:
        return self.up(torch.relu(self.down(h)))


class InvertibleAdapter(nn.Module):
    """NICE coupling ``o1 = e1 + F(e2)``, ``o2 = e2 + G(o1)`` with an exact inverse."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        if dim % 2:
            raise HltmtConfigError(f"an invertible adapter needs an even dimension, got {dim}")
        self.half = dim // 2
        self.f = Bottleneck(self.half, hidden)
        self.g = Bottleneck(self.half, hidden)

    def forward(self, e: Tensor) -> Tensor:
        e1, e2 = e[..., : self.half], e[..., self.half:]
        o1 = e1 + self.f(e2)
        o2 = e2 + self.g(o1)
        return torch.cat([o1, o2], dim=-1)

    def inverse(self, o: Tensor) -> Tensor:
        o1, o2 = o[..., : self.half], o[..., self.half:]
        e2 = o2 - self.g(o1)
        e1 = o1 - self.f(e2)
        return torch.cat([e1, e2], dim=-1)


class RowLanguages:
    """The language of each row of the batch being computed (indices into ``langs``).

    The encoder (source languages) and decoder (target languages) set it around their
    forward pass; their layers read it. Not a module: it holds no parameters.
    """

    def __init__(self, side: str, langs: Sequence[str]):
        self.side = side
        self.langs = list(langs)
        self.ids: Optional[Tensor] = None
        self.plan: Optional[RoutePlan] = None

    @contextlib.contextmanager
    def use(self, ids: Optional[Tensor], plan: Optional[RoutePlan] = None) -> Iterator[None]:
        """Rows' languages for the pass inside; ``plan``, if given, is their route plan made
        earlier (the decoder keeps one per beam search)."""
        previous, (self.ids, self.plan) = (self.ids, self.plan), (ids, plan)
        try:
            yield
        finally:
            self.ids, self.plan = previous

    def require(self) -> RoutePlan:
        """The rows' route plan, made once per pass (all layers route the same rows)."""
        if self.plan is None:
            if self.ids is None:
                raise HltmtInputError(f"the {self.side}'s adapters got no language per sentence: run the layer "
                                      f"through the hltmt_transformer {self.side}")
            self.plan = RoutePlan(self.ids)
        return self.plan

    def select(self, per_lang: nn.ModuleDict, kind: str, method: Optional[str] = None) -> List[Callable]:
        """One callable per language of ``langs`` (``route``'s ``fns``); a language without
        an adapter gets one that raises an error naming it (only if a row needs it)."""
        what = "source" if self.side == ENCODER else "target"

        def missing(lang):
            def fail(*_):
                raise HltmtInputError(
                    f"a sentence with {what} language {lang!r} reached the {self.side}, which has no {kind} for "
                    f"{lang!r} (adapters exist for {','.join(per_lang.keys())}): add it to --adapter-langs "
                    "(and train its adapters) or leave it out of the batch")
            return fail

        fns = []
        for lang in self.langs:
            module = per_lang[lang] if lang in per_lang else None
            fns.append(missing(lang) if module is None else (getattr(module, method) if method else module))
        return fns


class AdapterStack(nn.Module):
    """The adapters at one place of one layer: the row's language adapter, then the shared one."""

    def __init__(self, dim: int, language_dim: Optional[int], langs: Sequence[str], shared_dim: Optional[int]):
        super().__init__()
        self.dim, self.language_dim = dim, language_dim
        self.language_adapters = (nn.ModuleDict({lang: Bottleneck(dim, language_dim) for lang in langs})
                                  if language_dim else None)
        self.shared_adapter = Bottleneck(dim, shared_dim) if shared_dim else None

    def add_language(self, lang: str) -> None:
        if self.language_adapters is not None and lang not in self.language_adapters:
            self.language_adapters[lang] = Bottleneck(self.dim, self.language_dim).to(*self._device_dtype())

    def _device_dtype(self):
        p = next(self.parameters())
        return p.device, p.dtype

    def forward(self, h: Tensor, r: Tensor, rows: RowLanguages) -> Tensor:
        if self.language_adapters is not None:
            h = route(h, rows.require(), rows.select(self.language_adapters, "language adapter"), dim=1) + r
        if self.shared_adapter is not None:
            h = self.shared_adapter(h) + r
        return h


class InvertibleAdapters(nn.Module):
    """One invertible adapter per language, chosen per row."""

    def __init__(self, dim: int, hidden: int, langs: Sequence[str]):
        super().__init__()
        self.dim, self.hidden = dim, hidden
        self.adapters = nn.ModuleDict({lang: InvertibleAdapter(dim, hidden) for lang in langs})

    def add_language(self, lang: str) -> None:
        if lang not in self.adapters:
            p = next(self.parameters())
            self.adapters[lang] = InvertibleAdapter(self.dim, self.hidden).to(p.device, p.dtype)

    def forward(self, x: Tensor, rows: RowLanguages, dim: int) -> Tensor:
        return route(x, rows.require(), rows.select(self.adapters, "invertible adapter"), dim=dim)

    def inverse(self, x: Tensor, rows: RowLanguages, dim: int) -> Tensor:
        return route(x, rows.require(), rows.select(self.adapters, "invertible adapter", "inverse"), dim=dim)


# ---------------------------------------------------------------------------------------
# fairseq layers that call the adapters (hooks, no copy of fairseq's forward)


def _adapt(layer, x: Tensor, residual: Tensor) -> Tensor:
    """``residual_connection`` of an adapter layer: fairseq calls it once per sublayer, in order."""
    if not layer._sites_left:
        raise RuntimeError("adapter layer: fairseq called residual_connection more often than it has sublayers")
    site = layer._sites_left.pop(0)
    stack = layer.adapters[site] if site in layer.adapters else None
    if stack is None:
        return residual + x
    if site == FFN and layer.placement == PFEIFFER and not layer.normalize_before:
        r = residual + x  # MAD-X: r = the FFN block's output, h = its layer norm; the layer normalises again
        return stack(layer.final_layer_norm(r), r, layer.rows)
    return residual + stack(x, x, layer.rows)


class AdapterEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer with adapter stacks after its sublayers (see module doc)."""

    def __init__(self, cfg, placement: str, rows: RowLanguages, return_fc: bool = False):
        super().__init__(cfg, return_fc=return_fc)
        self.placement = placement
        self.rows = rows
        self.adapters = nn.ModuleDict()  # site -> AdapterStack, filled by install_adapters
        self._sites_left: List[str] = []

    def residual_connection(self, x, residual):
        return _adapt(self, x, residual)

    def forward(self, x, encoder_padding_mask: Optional[Tensor], attn_mask: Optional[Tensor] = None):
        self._sites_left = [SELF_ATTN, FFN]
        out = super().forward(x, encoder_padding_mask, attn_mask)
        if self._sites_left:
            raise RuntimeError("adapter layer: fairseq's encoder layer skipped a residual_connection")
        return out


class AdapterDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer with adapter stacks after its sublayers; the first layer also
    runs the decoder's invertible adapters on its input (the embedding layer's output)."""

    def __init__(self, cfg, placement: str, rows: RowLanguages, no_encoder_attn: bool = False):
        super().__init__(cfg, no_encoder_attn=no_encoder_attn)
        self.placement = placement
        self.rows = rows
        self.adapters = nn.ModuleDict()
        self.input_adapters: Optional[Callable[[Tensor], Tensor]] = None  # set on layer 0 by the decoder
        self._sites_left: List[str] = []

    def residual_connection(self, x, residual):
        return _adapt(self, x, residual)

    def forward(self, x, encoder_out: Optional[Tensor] = None, encoder_padding_mask: Optional[Tensor] = None,
                incremental_state=None, *args, **kwargs):
        if self.input_adapters is not None:
            x = self.input_adapters(x)
        cross = self.encoder_attn is not None and encoder_out is not None
        self._sites_left = [SELF_ATTN] + ([ENCODER_ATTN] if cross else []) + [FFN]
        out = super().forward(x, encoder_out, encoder_padding_mask, incremental_state, *args, **kwargs)
        if self._sites_left:
            raise RuntimeError("adapter layer: fairseq's decoder layer skipped a residual_connection")
        return out


# ---------------------------------------------------------------------------------------
# encoder / decoder mixins (used by hltmt_plugin.models.hltmt_transformer)


def _fill_missing_adapter_weights(module: nn.Module, state_dict: Dict[str, Tensor], name: str) -> None:
    """A checkpoint without (some of) this module's adapter weights loads with them at their
    fresh, identity initialisation: adapters added to a trained model, or a new language."""
    prefix = f"{name}." if name else ""
    missing = []
    for key, value in module.state_dict().items():
        if is_adapter_parameter(key) and prefix + key not in state_dict:
            state_dict[prefix + key] = value.detach().clone()
            missing.append(key)
    if missing:
        langs = sorted({lang for key in missing for lang in [adapter_language(key)] if lang})
        logger.info(f"adapters: the checkpoint has no weights for {len(missing)} {name or 'model'} adapter tensors"
                    f"{' (languages ' + ','.join(langs) + ')' if langs else ''}; they start at identity")


class _AdapterSideMixin:
    """What the encoder and decoder mixins share: the per-row languages, the adapter stacks
    in the chosen layers, adding a language, and loading checkpoints without adapters."""

    side = ENCODER

    def __init__(self, *args, adapter_cfg: Optional[AdapterConfig] = None, **kwargs):
        # set before fairseq's __init__, which calls build_*_layer
        self.adapter_cfg = adapter_cfg
        self.adapter_rows = RowLanguages(self.side, [])
        super().__init__(*args, **kwargs)
        self.adapter_plan: Optional[AdapterPlan] = None
        self.invertible_adapters = None

    def _install_stacks(self, plan: AdapterPlan, layers: List[int], dim: int) -> None:
        cfg = plan.cfg
        for i in layers:
            for site in SITES[cfg.adapter_placement]:
                self.layers[i].adapters[site] = AdapterStack(
                    dim, plan.language_dim if cfg.language_adapters else None, plan.adapter_langs,
                    plan.shared_dim if cfg.shared_adapters else None)
        if cfg.invertible_adapters:
            self.invertible_adapters = InvertibleAdapters(dim, plan.invertible_dim, plan.adapter_langs)
        self.adapter_rows.langs = list(plan.langs)
        self.adapter_plan = plan

    def add_adapter_language(self, lang: str) -> None:
        """Give ``lang`` its own (identity-initialised) language and invertible adapters."""
        for layer in self.layers:
            for stack in getattr(layer, "adapters", {}).values():
                stack.add_language(lang)
        if self.invertible_adapters is not None:
            self.invertible_adapters.add_language(lang)

    def upgrade_state_dict_named(self, state_dict, name):
        super().upgrade_state_dict_named(state_dict, name)
        if self.adapter_plan is not None:
            _fill_missing_adapter_weights(self, state_dict, name)
        return state_dict


class AdapterEncoderMixin(_AdapterSideMixin):
    """For a ``TransformerEncoderBase`` subclass: adapters chosen by each row's source language.

    The subclass's ``forward`` runs fairseq's forward inside ``self.adapter_rows.use(ids)``
    with ``ids = self.source_languages(src_tokens, src_lang_id)``.
    """

    side = ENCODER

    def build_encoder_layer(self, cfg):
        if self.adapter_cfg is None or not self.adapter_cfg.encoder_layers_need_hooks():
            return super().build_encoder_layer(cfg)
        layer = AdapterEncoderLayer(cfg, self.adapter_cfg.adapter_placement, self.adapter_rows,
                                    return_fc=self.return_fc)
        return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap)

    def install_adapters(self, plan: AdapterPlan, lang_dict=None, default_source: Optional[str] = None) -> None:
        """Add the planned adapters; ``lang_dict`` maps fairseq's ``src_lang_id`` (from
        ``--enable-lang-ids``) to languages; ``default_source`` serves a batch without ids
        when the task has a single source language (``-s`` at generation)."""
        self._install_stacks(plan, plan.encoder_layers, plan.encoder_dim)
        self.set_source_languages(plan.langs, lang_dict, default_source)

    def set_source_languages(self, langs: Sequence[str], lang_dict=None, default_source: Optional[str] = None) -> None:
        """How :meth:`source_languages` reads each row's source language (also used by the
        encoder skills): ``lang_dict`` maps ``src_lang_id`` to languages, ``default_source``
        serves a batch without ids."""
        table = torch.full((len(lang_dict) if lang_dict is not None else 0,), -1, dtype=torch.long)
        if lang_dict is not None:
            for i, lang in enumerate(langs):
                index = lang_dict.index(lang)
                if index != lang_dict.unk():
                    table[index] = i
        self.register_buffer("lang_of_lang_id", table, persistent=False)
        self.source_lang_names = list(langs)
        self.default_source_lang = langs.index(default_source) if default_source in langs else None

    def needs_source_language(self) -> bool:
        return self.adapter_plan is not None and self.adapter_plan.cfg.needs_source_language()

    def source_languages(self, src_tokens: Tensor, src_lang_id: Optional[Tensor]) -> Tensor:
        """(B,) index in --langs of each row's source language."""
        if src_lang_id is not None:
            ids = src_lang_id.reshape(-1).long()
            table = self.lang_of_lang_id
            langs = torch.full_like(ids, -1)
            known = (ids >= 0) & (ids < table.numel())
            langs[known] = table[ids[known]]
            if ids.numel() != src_tokens.size(0) or bool((langs < 0).any()):
                raise HltmtInputError(f"src_lang_id {ids.tolist()} does not give a language of --langs "
                                      f"({','.join(self.source_lang_names)}) for every sentence of the batch")
            return langs
        if self.default_source_lang is not None:
            return torch.full((src_tokens.size(0),), self.default_source_lang, dtype=torch.long,
                              device=src_tokens.device)
        raise HltmtInputError(
            "language / invertible adapters and encoder skills choose by each sentence's source language, and this "
            "batch carries "
            "none: train and decode with --enable-lang-ids (or give -s when decoding a single source language)")

    def forward_embedding(self, src_tokens, token_embedding: Optional[Tensor] = None):
        x, embed = super().forward_embedding(src_tokens, token_embedding)
        if self.invertible_adapters is not None:  # B x T x C, what the first layer receives
            x = self.invertible_adapters(x, self.adapter_rows, dim=0)
        return x, embed


class AdapterDecoderMixin(_AdapterSideMixin, SearchPlans):
    """For an HLT-MT decoder subclass: adapters by target language (``encoder_out[tgt_lang]``),
    the invertible adapters on the decoder input, their inverse before the output projection."""

    side = DECODER
    tgt_lang_key = "tgt_lang"

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        if self.adapter_cfg is None or not self.adapter_cfg.decoder_layers_need_hooks():
            return super().build_decoder_layer(cfg, no_encoder_attn)
        layer = AdapterDecoderLayer(cfg, self.adapter_cfg.adapter_placement, self.adapter_rows, no_encoder_attn)
        return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap)

    def install_adapters(self, plan: AdapterPlan) -> None:
        self._install_stacks(plan, plan.decoder_layers, plan.decoder_dim)
        if self.invertible_adapters is not None:
            self.layers[0].input_adapters = self._input_adapters

    def _input_adapters(self, x: Tensor) -> Tensor:  # T x B x C: the first layer's input
        return self.invertible_adapters(x, self.adapter_rows, dim=1)

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                         full_context_alignment: bool = False, alignment_layer: Optional[int] = None,
                         alignment_heads: Optional[int] = None):
        tgt_lang = plan = None
        if encoder_out is not None and encoder_out.get(self.tgt_lang_key):
            tgt_lang = encoder_out[self.tgt_lang_key][0]
            plan = self.search_plan(incremental_state, "adapters", lambda: tgt_lang)
        with self.adapter_rows.use(tgt_lang, plan):
            x, extra = super().extract_features(prev_output_tokens, encoder_out, incremental_state,
                                                full_context_alignment, alignment_layer, alignment_heads)
            if self.invertible_adapters is not None:  # B x T x C, just before the tied output projection
                x = self.invertible_adapters.inverse(x, self.adapter_rows, dim=0)
        return x, extra


# ---------------------------------------------------------------------------------------
# names, languages and the parameter report


def is_adapter_parameter(name: str) -> bool:
    parts = name.split(".")
    return any(p in (LANGUAGE_ADAPTERS, SHARED_ADAPTER, INVERTIBLE_ADAPTERS) for p in parts)


def adapter_kind(name: str) -> Optional[str]:
    """``language`` / ``shared`` / ``invertible`` for an adapter parameter name, else None."""
    parts = name.split(".")
    for part, kind in ((LANGUAGE_ADAPTERS, "language"), (SHARED_ADAPTER, "shared"), (INVERTIBLE_ADAPTERS, "invertible")):
        if part in parts:
            return kind
    return None


def adapter_language(name: str) -> Optional[str]:
    """The language of a per-language adapter parameter name (None for shared / non-adapter)."""
    parts = name.split(".")
    for marker in (LANGUAGE_ADAPTERS, INVERTIBLE_ADAPTERS):
        if marker in parts:
            i = parts.index(marker)
            if marker == INVERTIBLE_ADAPTERS:
                i += 1  # invertible_adapters.adapters.<lang>
            return parts[i + 1] if i + 1 < len(parts) else None
    return None


def parameter_report(model: nn.Module) -> Dict[str, object]:
    """Parameters added by adapters, per language and as a share of the base model
    (like MAD-X's table 5)."""
    base = 0
    per_lang: Dict[str, Dict[str, int]] = {}
    shared = 0
    for name, p in model.named_parameters():
        kind = adapter_kind(name)
        if kind is None:
            base += p.numel()
        elif kind == "shared":
            shared += p.numel()
        else:
            side = name.split(".")[0]
            key = f"{side} {kind}"
            counts = per_lang.setdefault(adapter_language(name), {})
            counts[key] = counts.get(key, 0) + p.numel()
    return {"base": base, "per_language": per_lang, "shared": shared,
            "total": base + shared + sum(sum(c.values()) for c in per_lang.values())}


def format_parameter_report(report: Dict[str, object]) -> List[str]:
    base = report["base"]

    def share(n):
        return f"{100.0 * n / base:.2f}%" if base else "n/a"

    lines = [f"adapters: base model {base:,} parameters; added (+params, % of base):"]
    per_lang = report["per_language"]
    groups: Dict[Tuple[Tuple[str, int], ...], List[str]] = {}
    order = ["encoder language", "encoder invertible", "decoder language", "decoder invertible"]
    for lang, counts in per_lang.items():
        key = tuple(sorted(counts.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))
        groups.setdefault(key, []).append(lang)
    for counts, langs in groups.items():
        total = sum(n for _, n in counts)
        detail = ", ".join(f"{key} {n:,}" for key, n in counts)
        lines.append(f"  per language ({','.join(langs)}): +{total:,} ({share(total)}) = {detail}")
    if report["shared"]:
        lines.append(f"  shared adapters (all languages): +{report['shared']:,} ({share(report['shared'])})")
    added = report["total"] - base
    lines.append(f"  all adapters, {len(per_lang)} language(s): +{added:,} ({share(added)})")
    return lines


def install_adapters(model, plan: Optional[AdapterPlan], lang_dict=None, default_source: Optional[str] = None):
    """Add the planned adapters to a freshly built hltmt_transformer and log the report."""
    if plan is None:
        return
    model.encoder.install_adapters(plan, lang_dict, default_source)
    if isinstance(model.decoder, AdapterDecoderMixin):
        model.decoder.install_adapters(plan)
    for line in format_parameter_report(parameter_report(model)):
        logger.info(line)


def bottleneck_parameters(dim: int, hidden: int) -> int:
    """``2md + d + m``: Houlsby's count for one adapter."""
    return 2 * dim * hidden + dim + hidden


__all__ = ["AdapterConfig", "AdapterPlan", "plan_adapters", "Bottleneck", "InvertibleAdapter", "AdapterStack",
           "InvertibleAdapters", "RowLanguages", "AdapterEncoderLayer", "AdapterDecoderLayer",
           "AdapterEncoderMixin", "AdapterDecoderMixin", "install_adapters", "parameter_report",
           "format_parameter_report", "is_adapter_parameter", "adapter_language", "adapter_kind",
           "bottleneck_parameters"]
