"""fairseq's hub (``from_pretrained(...).translate``) on multilingual checkpoints (fairseq 0.12).

Two defects of fairseq 0.12 meet there, for the plugin's model and fairseq's own multilingual
models alike:

- ``GeneratorHubInterface.generate`` passes ``prefix_allowed_tokens_fn`` to the task's
  ``build_generator``, which ``translation_multi_simple_epoch`` does not take: a ``TypeError``.
  The task's ``build_generator`` here takes it (``None``; a function is refused in one line:
  the multilingual task forces its own target-language prefix).
- with ``--decoder-langtok`` the hypothesis starts with the target-language token, which
  fairseq-generate strips (``symbols_to_strip_from_output``) and the hub's ``string`` does not:
  ``translate`` returned ``__fr__ ...``. The hub's ``string`` here strips the language tokens too,
  unless the task keeps them (``--keep-inference-langtok``).
"""

import functools

from hltmt_plugin.errors import HltmtConfigError


def language_token_ids(task):
    """The dictionary indices of the task's language tokens (empty unless the task is
    multilingual, marks targets on the decoder side and does not keep them)."""
    args = getattr(task, "args", None)
    if args is None or not getattr(args, "decoder_langtok", False) or getattr(args, "keep_inference_langtok", False):
        return set()
    from fairseq.data.multilingual.multilingual_utils import get_lang_tok

    d = task.target_dictionary
    style = getattr(args, "lang_tok_style", "multilingual")
    ids = {d.index(get_lang_tok(lang, style)) for lang in getattr(task, "langs", None) or []}
    return ids - {d.unk()}


def _without_language_tokens(task, tokens):
    strip = language_token_ids(task)
    if not strip:
        return tokens
    import torch

    return tokens[torch.tensor([int(t) not in strip for t in tokens], dtype=torch.bool)]


@functools.lru_cache(maxsize=None)
def hub_interface():
    """fairseq's ``GeneratorHubInterface`` whose ``string`` leaves out the language tokens, as
    fairseq-generate does (what the plugin model's ``from_pretrained`` returns, in any program)."""
    from fairseq.hub_utils import GeneratorHubInterface

    class HubInterface(GeneratorHubInterface):
        def string(self, tokens):
            return super().string(_without_language_tokens(self.task, tokens))

    return HubInterface


def install(task_class, hub_class) -> None:
    """Patch ``task_class.build_generator`` and ``hub_class.string`` (idempotent)."""
    build = task_class.build_generator
    if not getattr(build, "hltmt_patched", False):

        @functools.wraps(build)
        def build_generator(
            self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, prefix_allowed_tokens_fn=None
        ):
            if prefix_allowed_tokens_fn is not None:
                raise HltmtConfigError(
                    "prefix_allowed_tokens_fn is not supported by fairseq's multilingual task "
                    "(it forces its own target-language prefix)"
                )
            return build(self, models, args, seq_gen_cls=seq_gen_cls, extra_gen_cls_kwargs=extra_gen_cls_kwargs)

        build_generator.hltmt_patched = True
        task_class.build_generator = build_generator
    string = hub_class.string
    if not getattr(string, "hltmt_patched", False):

        @functools.wraps(string)
        def string_(self, tokens):
            return string(self, _without_language_tokens(self.task, tokens))

        string_.hltmt_patched = True
        hub_class.string = string_
