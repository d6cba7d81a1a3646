"""The direction rule (:mod:`hltmt_plugin.directions`) on fairseq's own multilingual task
(fairseq 0.12).

fairseq's ``translation_multi_simple_epoch`` decodes whatever direction it is given, trained or
not: ``fairseq-interactive -s de -t en`` of a model trained on English into other languages
writes text in no language, exit 0. With the plugin loaded, the task's ``build_model`` keeps the
training directions of each model it builds (from the options it is built with: a checkpoint's
stored options, or this training run's; :func:`hltmt_plugin.directions.trained_pairs`), and its ``build_generator``, where every decoding starts
(fairseq-generate, fairseq-interactive, the hub's ``translate`` / ``generate``), checks each
direction the task decodes against each model (a checkpoint's model is checked as soon as it is
built when ``-s/-t`` are given: fairseq-generate reads its test split only after that):

- trained: decoded as before;
- refused (a target the model never produced, a source it never read): one line;
- zero-shot: refused too, since fairseq's task has no option asking for one; ``--task
  hltmt_translation`` takes the same options and decodes it, with a line on stderr (a task class
  with ``decodes_zero_shot = True`` serves zero-shot directions);
- a model whose options name no training direction (no ``--lang-pairs``), or that no task's
  ``build_model`` built: refused, since what it serves is unknown.

The directions a task decodes: ``-s SRC -t TGT`` when it was set up with them (fairseq's
inference mode), else every pair of its ``--lang-pairs``.
"""

import functools
import weakref

from hltmt_plugin.directions import TrainedDirections
from hltmt_plugin.errors import HltmtConfigError

ZERO_SHOT_ROUTE = (
    "--task hltmt_translation, which takes the same options (fairseq's translation_multi_simple_epoch "
    "decodes trained directions only)"
)

# each model built by the task -> its training directions (None: its options name none)
_TRAINED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def decoded_directions(task):
    """``[(src, tgt), ...]``: the directions ``task`` decodes, with the option that gave each."""
    args = task.args
    if not getattr(task, "training", False):
        src, tgt = getattr(args, "source_lang", None), getattr(args, "target_lang", None)
        return [(src, tgt, f"-s {src} -t {tgt}")]
    pairs = [pair.split("-", 1) for pair in getattr(task, "lang_pairs", None) or []]
    return [(src, tgt, f"--lang-pairs {src}-{tgt}") for src, tgt in pairs]


def check(task, models) -> None:
    """Each direction ``task`` decodes, against each model: :class:`HltmtConfigError` when one
    is refused (or zero-shot, unless the task decodes zero-shot directions)."""
    zero_shot = bool(getattr(task, "decodes_zero_shot", False))
    for model in models:
        if model not in _TRAINED:
            raise HltmtConfigError(
                f"a {type(model).__name__} that {type(task).__name__}.build_model did not build: its training "
                "directions are unknown, so no direction is decoded (load it through the task, e.g. "
                "checkpoint_utils.load_model_ensemble)"
            )
        directions = _TRAINED[model]
        if directions is None:
            raise HltmtConfigError(
                "the checkpoint's options name no training directions (--lang-pairs): which directions it "
                "serves is unknown, so none is decoded"
            )
        for src, tgt, given in decoded_directions(task):
            directions.check_command(src, tgt, zero_shot, ZERO_SHOT_ROUTE, given)


def install(task_class) -> None:
    """Patch ``task_class.build_model`` (keeps each model's training directions) and
    ``task_class.build_generator`` (checks them; idempotent)."""
    build_model = task_class.build_model
    if not getattr(build_model, "hltmt_direction_rule", False):

        @functools.wraps(build_model)
        def build_model_(self, args, from_checkpoint=False):
            model = build_model(self, args, from_checkpoint)
            _TRAINED[model] = TrainedDirections.from_options(args)
            if from_checkpoint and not getattr(self, "training", True):  # -s/-t given: before any data is read
                check(self, [model])
            return model

        build_model_.hltmt_direction_rule = True
        task_class.build_model = build_model_
    build_generator = task_class.build_generator
    if not getattr(build_generator, "hltmt_direction_rule", False):

        @functools.wraps(build_generator)
        def build_generator_(self, models, *args, **kwargs):
            check(self, models)
            return build_generator(self, models, *args, **kwargs)

        build_generator_.hltmt_direction_rule = True
        task_class.build_generator = build_generator_
