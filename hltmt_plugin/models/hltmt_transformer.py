"""``hltmt_transformer``: a fairseq Transformer whose decoder top holds the SLP (HLT-MT), with
optional adapters and encoder skills.

``build_model`` runs a fixed list of features: each resolves its options against the task
before the model is built (its *layout*; the encoder and decoder build their layers from the
layouts), then installs itself into the built model. The encoder makes each batch's language
record (:mod:`hltmt_plugin.languages`), which every language-specific module reads.
"""

import logging
from typing import Dict, List, Optional

import torch
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models import register_model
from fairseq.models.transformer import TransformerConfig, TransformerModel
from fairseq.tasks import TASK_REGISTRY
from torch import Tensor

from hltmt_plugin.adapters import feature as adapter_feature
from hltmt_plugin.adapters.config import AdapterConfig, layout_adapters
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.languages import LanguageTable
from hltmt_plugin.models.decoder import HltmtTransformerDecoder
from hltmt_plugin.models.encoder import HltmtTransformerEncoder
from hltmt_plugin.models.layers import Layouts
from hltmt_plugin.peft import PeftConfig, apply_train_only
from hltmt_plugin.pool.config import SlpConfig, check_slp
from hltmt_plugin.pool.modules import SelectiveLanguagePool
from hltmt_plugin.pool.router import LanguageRouter, map_text
from hltmt_plugin.pretrained import PretrainedConfig
from hltmt_plugin.skills import feature as skill_feature
from hltmt_plugin.skills.config import SkillConfig, layout_skills

logger = logging.getLogger(__name__)


def validate(slp: SlpConfig, task, width: int = 1) -> List[str]:
    """Check the model's options against the task: its own task, the SLP's options
    (:func:`~hltmt_plugin.pool.config.check_slp`) and how sentences are marked with their
    languages; return the high-resource languages."""
    # Not the parent task either: it would decode with fairseq 0.12's first-direction language
    # ids and drop the last partial batch (fairseq issue 5036), both fixed by hltmt_translation.
    own_task = TASK_REGISTRY.get("hltmt_translation")  # looked up: the model does not import the task
    if own_task is None or not isinstance(task, own_task):
        name = next((n for n, c in TASK_REGISTRY.items() if c is type(task)), type(task).__name__)
        raise HltmtConfigError(f"--arch hltmt_transformer needs --task hltmt_translation (got --task {name})")
    high = check_slp(slp, task.langs, width)
    check_language_tokens(task)
    return high


def check_language_tokens(task) -> None:
    args = task.args
    encoder_langtok = getattr(args, "encoder_langtok", None)
    if encoder_langtok == "tgt":
        return
    if (
        encoder_langtok == "src"
        and getattr(args, "decoder_langtok", False)
        and not getattr(args, "lang_tok_replacing_bos_eos", False)
    ):
        # the target language of each row: its target-language id (the task's batches), or -t
        if not getattr(args, "enable_lang_ids", False) and not getattr(args, "target_lang", None):
            raise HltmtConfigError(
                "with --encoder-langtok src --decoder-langtok the model reads each sentence's "
                "target language from its language id: add --enable-lang-ids"
            )
        return
    raise HltmtConfigError(
        "the model reads each sentence's languages from --encoder-langtok tgt or from --encoder-langtok src "
        f"--decoder-langtok (got --encoder-langtok {encoder_langtok}"
        f"{' --decoder-langtok' if getattr(args, 'decoder_langtok', False) else ''}"
        f"{' --lang-tok-replacing-bos-eos' if getattr(args, 'lang_tok_replacing_bos_eos', False) else ''})"
    )


# The optional features, in the order they are planned and installed: (field of Layouts,
# layout from the options and task, install into the built model).
FEATURES = (("adapters", layout_adapters, adapter_feature.install), ("skills", layout_skills, skill_feature.install))

# fairseq's build_model hands build_encoder / build_decoder only the options: the layouts of the
# model being built sit on that options object, under this name, for the build's duration
BUILD_LAYOUTS = "_hltmt_build_layouts"


def build_layouts(args) -> Layouts:
    """The layouts of the model ``args`` is building (none outside a build)."""
    return getattr(args, BUILD_LAYOUTS, None) or Layouts()


@register_model("hltmt_transformer")
class HltmtTransformerModel(TransformerModel):
    """Transformer + selective language-specific pool and universal layer (HLT-MT)."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        for group in (SlpConfig, PretrainedConfig, AdapterConfig, PeftConfig, SkillConfig):
            gen_parser_from_dataclass(parser, group())

    @classmethod
    def from_pretrained(cls, model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".", **kwargs):
        """fairseq's hub interface over a checkpoint (``from_pretrained(...).translate``, the way
        fairseq's models offer it), in any program: the checkpoint read by the plugin's loader
        (weights-only, its allowlist, for this call only), the text as fairseq-generate writes it
        (no language token)."""
        from fairseq import checkpoint_utils, hub_utils

        from hltmt_plugin.compat import hub_generator, safe_loading

        with safe_loading.fairseq_loading(checkpoint_utils):
            x = hub_utils.from_pretrained(
                model_name_or_path, checkpoint_file, data_name_or_path, archive_map=cls.hub_models(), **kwargs
            )
        return hub_generator.hub_interface()(x["args"], x["task"], x["models"])

    @classmethod
    def build_model(cls, args, task):
        slp = SlpConfig.from_namespace(args)
        high = validate(slp, task, width=int(getattr(args, "decoder_embed_dim", 1) or 1))
        layouts = Layouts(**{name: layout_of(args, task) for name, layout_of, _ in FEATURES})
        setattr(args, BUILD_LAYOUTS, layouts)
        try:
            model = super().build_model(args, task)
        finally:
            delattr(args, BUILD_LAYOUTS)  # not saved with the options
        model.encoder.languages = LanguageTable.from_task(task, model.encoder.dictionary)
        if model.decoder.pool_head is not None:
            model.decoder.pool_head.set_languages(model.encoder.languages)
        if not high:
            logger.info(
                "hltmt_transformer: no --high-resource-langs, so no HLT-MT pool: the decoder top is "
                "fairseq's own and every direction trains from the start"
            )
        elif slp.slp_language_specific:
            model.slp_router.fix_map(torch.arange(len(high)))
        if high:
            logger.info(
                f"HLT-MT: pool of {slp.slp_pool_size} modules for {','.join(high)}; universal "
                f"layer for {','.join(lang for lang in task.langs if lang not in high) or '(none)'}"
            )
        for name, _, install in FEATURES:
            install(model, getattr(layouts, name))
        apply_train_only(model, PeftConfig.from_namespace(args), args)
        return model

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return HltmtTransformerEncoder(
            TransformerConfig.from_namespace(args), src_dict, embed_tokens, layouts=build_layouts(args)
        )

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        slp = SlpConfig.from_namespace(args)
        return HltmtTransformerDecoder(
            TransformerConfig.from_namespace(args),
            tgt_dict,
            embed_tokens,
            slp,
            high_langs=slp.high_langs,
            seed=getattr(args, "seed", 1),
            no_encoder_attn=getattr(args, "no_cross_attention", False),
            layouts=build_layouts(args),
        )

    def forward(
        self,
        src_tokens,
        src_lengths,
        prev_output_tokens,
        return_all_hiddens: bool = True,
        features_only: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
        src_lang_id: Optional[Tensor] = None,
        tgt_lang_id: Optional[Tensor] = None,
        **unused,
    ):
        # src_lang_id / tgt_lang_id: --enable-lang-ids adds them to net_input (tasks.collation); the
        # encoder reads each row's languages from them. TransformerModel.forward, plus that.
        encoder_out = self.encoder(
            src_tokens,
            src_lengths=src_lengths,
            return_all_hiddens=return_all_hiddens,
            src_lang_id=src_lang_id,
            tgt_lang_id=tgt_lang_id,
        )
        return self.decoder(
            prev_output_tokens,
            encoder_out=encoder_out,
            features_only=features_only,
            alignment_layer=alignment_layer,
            alignment_heads=alignment_heads,
            src_lengths=src_lengths,
            return_all_hiddens=return_all_hiddens,
        )

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        try:
            result = super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)
        except RuntimeError as error:
            details = " ".join(str(error).split())
            raise HltmtInputError(
                "the checkpoint does not fit the model its options build (another "
                f"architecture, language list or version?): {details[:600]}"
            ) from None
        if self.slp is not None and self.slp_router.map_is_fixed:
            universal = [lang for lang in self.encoder.languages.langs if lang not in self.high_langs]
            logger.info(
                f"HLT-MT routing map (fixed, from the checkpoint): {map_text(self.map_by_language())}"
                f"; universal layer: {','.join(universal) or '(none)'}"
            )
        return result

    @property
    def slp(self) -> Optional[SelectiveLanguagePool]:
        """The pool, or None for a model without one (no --high-resource-langs)."""
        return self.decoder.slp

    @property
    def slp_router(self) -> Optional[LanguageRouter]:
        """The pool's router (gate, routing map, hard/soft draw), or None without a pool."""
        return self.decoder.slp_router

    @property
    def high_langs(self) -> List[str]:
        """The languages of the pool (``--high-resource-langs``, in the map's order); empty without a pool."""
        return [] if self.slp is None else list(self.slp_router.high_langs)

    def map_by_language(self) -> Dict[str, int]:
        """``g(l)`` for each high-resource language: the fixed map, or the gate's argmax now
        (empty without a pool)."""
        return {} if self.slp is None else self.decoder.pool_head.map_by_language()

    def gate_probs(self) -> Tensor:
        """``P`` (H x T), the gate's distribution over the pool for each high-resource language."""
        return self.decoder.pool_head.gate_probs()

    def slp_routes(self) -> Dict[str, str]:
        """Each target language of ``--langs`` -> the pool module that serves it (``m<k>`` by the
        routing map, or ``universal``): the router's table by name (empty without a pool)."""
        return {} if self.slp is None else self.decoder.pool_head.routes()

    def slp_route(self, tgt: str) -> str:
        """The pool module that serves target language ``tgt`` (a model with a pool): its entry of
        :meth:`slp_routes`; HltmtInputError for a language not in ``--langs``."""
        routes = self.slp_routes()
        if tgt not in routes:
            raise HltmtInputError(f"the model has no target language {tgt!r} (--langs {','.join(routes)})")
        return routes[tgt]

    def route_of(self, src: str, tgt: str) -> Dict[str, object]:
        """Which modules serve a sentence ``src -> tgt``: ``{"slp": "m<k>" | "universal",
        "adapters": {...}, "skills": {...}}``, each only when the model has that capacity (no
        "slp" without a pool: the decoder top is fairseq's own); HltmtInputError naming why the
        model cannot serve the direction."""
        routing: Dict[str, object] = {}
        if self.slp is not None:
            routing["slp"] = self.slp_route(tgt)
        for name, layout in (("adapters", self.encoder.adapter_layout), ("skills", self.encoder.skill_layout)):
            if layout is not None:
                routing[name] = layout.route(src, tgt)
        return routing

    def check_trainable(self, lang_pairs: List[str]) -> None:
        """Before training: every direction of ``lang_pairs`` has the modules it goes through."""
        if self.encoder.adapter_layout is not None:
            self.encoder.adapter_layout.check_trainable(lang_pairs)

    def language_token_tables(self) -> Dict[str, tuple]:
        """The embedding tables that hold the language tokens' rows: state-dict name ->
        (parameter, its dictionary); the decoder's only when it is a table of its own."""
        tables = {"encoder.embed_tokens.weight": (self.encoder.embed_tokens.weight, self.encoder.dictionary)}
        if self.decoder.embed_tokens.weight is not self.encoder.embed_tokens.weight:
            tables["decoder.embed_tokens.weight"] = (self.decoder.embed_tokens.weight, self.decoder.dictionary)
        return tables

    def language_token_rows(self, lang: str) -> Dict[str, tuple]:
        """Where ``__lang__`` lives in each table of :meth:`language_token_tables`: name ->
        (parameter, row index)."""
        languages = self.encoder.languages
        return {name: (p, languages.token_index(lang, d)) for name, (p, d) in self.language_token_tables().items()}

    def fix_map(self) -> Dict[str, int]:
        """Fix ``g(l) = argmax p_l`` from the current gate (stage all; a fixed map stays) and
        freeze the gate; the map by language name."""
        return self.decoder.pool_head.fix_map()


def plugin_model(model) -> Optional[HltmtTransformerModel]:
    """The plugin's model (``--arch hltmt_transformer*``, with or without a pool) that ``model``
    is or wraps (fairseq's distributed wrappers hold it as ``.module``), or None for any other
    model: the one test of "is this the plugin's model"."""
    while model is not None and not isinstance(model, HltmtTransformerModel):
        model = getattr(model, "module", None)
    return model


def pool_model(model) -> Optional[HltmtTransformerModel]:
    """The plugin's model that ``model`` is or wraps when it has a pool (``--high-resource-langs``),
    else None: the one test of "has an HLT-MT pool"."""
    found = plugin_model(model)
    return found if found is not None and found.slp is not None else None
