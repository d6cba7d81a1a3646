"""Every workaround of a fairseq / torch behaviour, in one place.

:func:`install` applies each patch whose versions it is for, in a process that is a command,
fairseq's or the plugin's, and only there (``hltmt_plugin.register`` calls it where
``hltmt_plugin.command_process`` says so): a program that imports the plugin keeps fairseq, torch,
its warnings and ``sys.excepthook`` as they were. Each entry (:data:`PATCHES`, by the names
below) says what it works around and where that behaviour lives upstream; docs/architecture.md
lists them too, each with the test that fails without it.
Fixes that a subclass can make stay in the subclass (e.g. per-row language ids in
:mod:`hltmt_plugin.tasks.collation`, the generator in the task, the last batch at
evaluation in the task's ``get_batch_iterator``).

=====================  ==========================  =============================================
patch                  applies to                  works around
=====================  ==========================  =============================================
excepthook             any                         an uncaught :class:`HltmtError` printing a
                                                   traceback from deep inside fairseq instead of
                                                   one line (``errors.install_excepthook``; the
                                                   plugin's commands install it at import)
quiet                  any (where the plugin       fairseq 0.12's start-up noise (tensorboardX
                       imports fairseq)            notice, hydra deprecation warnings) in the
                                                   plugin's commands (``quiet.py``)
safe_loading           torch >= 2.5, any fairseq   torch >= 2.6 refusing fairseq 0.12 checkpoints
                                                   (``argparse.Namespace``); fairseq main passing
                                                   ``weights_only=False`` (fairseq issue 5610): the
                                                   plugin's loader as fairseq's ``torch.load``
safe_eval              fairseq 0.12.x              fairseq evaluating option strings with ``eval``
                                                   (``utils.eval_str_list`` / ``eval_bool`` ...), also
                                                   those stored in a checkpoint: literals only
atomic_copy            fairseq 0.12.x              ``save_checkpoint`` copying checkpoints
                                                   non-atomically (a kill leaves a truncated
                                                   ``checkpoint_last.pt``); a failed write (a full
                                                   disk) retried, logged as tracebacks, and its
                                                   ``.tmp`` file left behind
checkpoint_record      fairseq 0.12.x              fairseq's own tasks storing no compatibility
                                                   record: the stamp runs before each checkpoint
                                                   fairseq-train writes (``checkpoint_record.py``)
hub_generator          fairseq 0.12.x              fairseq's hub on a multilingual task: a
                                                   ``TypeError`` from ``build_generator``
                                                   (``prefix_allowed_tokens_fn``), the
                                                   target-language token left in ``translate``'s
                                                   text with ``--decoder-langtok``
direction_rule         fairseq 0.12.x              fairseq's multilingual task decoding a
                                                   direction the model never trained (``-s de -t
                                                   en`` of an En->X model), no word: refused in
                                                   one line, zero-shot too (``direction_rule.py``)
=====================  ==========================  =============================================
"""

import sys
from typing import Callable, NamedTuple, Optional, Tuple

from hltmt_plugin.errors import install_excepthook

FAIRSEQ_0_12 = (0, 12)


def _version(text: str):
    return tuple(int(part) for part in text.split("+")[0].split(".")[:2] if part.isdigit())


class Patch(NamedTuple):
    """One workaround of the table above: its name (a row of docs/architecture.md's "Where each
    fairseq workaround lives" names it), the fairseq version it is for (None: any) and what
    applies it."""

    name: str
    fairseq: Optional[Tuple[int, int]]
    apply: Callable[[], None]


def _excepthook() -> None:
    install_excepthook()


def _quiet() -> None:
    from hltmt_plugin.compat.quiet import quiet_fairseq

    if "fairseq" not in sys.modules:  # the plugin's command imports fairseq first: its start-up noise stays out
        quiet_fairseq()


def _safe_loading() -> None:
    from fairseq import checkpoint_utils

    from hltmt_plugin.compat import safe_loading

    safe_loading.install(checkpoint_utils)


def _safe_eval() -> None:
    from hltmt_plugin.compat import safe_eval

    safe_eval.install()


def _atomic_copy() -> None:
    from fairseq import checkpoint_utils
    from fairseq.file_io import PathManager

    from hltmt_plugin.compat import atomic_copy

    atomic_copy.install(PathManager, checkpoint_utils)


def _checkpoint_record() -> None:
    from fairseq import checkpoint_utils

    from hltmt_plugin.compat import checkpoint_record

    checkpoint_record.install(checkpoint_utils)


def _hub_generator() -> None:
    from fairseq.hub_utils import GeneratorHubInterface
    from fairseq.tasks.translation_multi_simple_epoch import TranslationMultiSimpleEpochTask

    from hltmt_plugin.compat import hub_generator

    hub_generator.install(TranslationMultiSimpleEpochTask, GeneratorHubInterface)


def _direction_rule() -> None:
    from fairseq.tasks.translation_multi_simple_epoch import TranslationMultiSimpleEpochTask

    from hltmt_plugin.compat import direction_rule

    direction_rule.install(TranslationMultiSimpleEpochTask)


# in the order they are applied: the hook and the filters of fairseq's noise before fairseq is imported
PATCHES = (
    Patch("excepthook", None, _excepthook),
    Patch("quiet", None, _quiet),
    Patch("safe_loading", None, _safe_loading),
    Patch("safe_eval", FAIRSEQ_0_12, _safe_eval),
    Patch("atomic_copy", FAIRSEQ_0_12, _atomic_copy),
    Patch("checkpoint_record", FAIRSEQ_0_12, _checkpoint_record),
    Patch("hub_generator", FAIRSEQ_0_12, _hub_generator),
    Patch("direction_rule", FAIRSEQ_0_12, _direction_rule),
)


def install() -> None:
    """Apply the workarounds of :data:`PATCHES` whose versions this is (idempotent); a command's
    process only."""
    version = None
    for patch in PATCHES:
        if patch.fairseq is not None:
            if version is None:
                import fairseq

                version = _version(fairseq.__version__)[:2]
            if version != patch.fairseq:
                continue
        patch.apply()
