"""Every workaround of a fairseq / torch behaviour, in one place.

:func:`install` applies each patch whose versions it is for, in a process that is a command,
fairseq's or the plugin's, and only there (``hltmt_plugin.register`` calls it where
``hltmt_plugin.command_process`` says so): a program that imports the plugin keeps fairseq, torch,
its warnings and ``sys.excepthook`` as they were. Each entry says what it works around and where
that behaviour lives upstream; docs/architecture.md lists them too.
Fixes that a subclass can make stay in the subclass (e.g. per-row language ids in
:mod:`hltmt_plugin.tasks.collation`, the generator in the task, the last batch at
evaluation in the task's ``get_batch_iterator``).

=====================  ==========================  =============================================
patch                  applies to                  works around
=====================  ==========================  =============================================
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
quiet                  fairseq 0.12.x              fairseq's start-up noise (tensorboardX notice,
                                                   hydra deprecation warnings) in the plugin's
                                                   commands (``quiet.py``)
hub_generator          fairseq 0.12.x              fairseq's hub on a multilingual task: a
                                                   ``TypeError`` from ``build_generator``
                                                   (``prefix_allowed_tokens_fn``), the
                                                   target-language token left in ``translate``'s
                                                   text with ``--decoder-langtok``
direction_rule         fairseq 0.12.x              fairseq's multilingual task decoding a
                                                   direction the model never trained (``-s de -t
                                                   en`` of an En->X model), no word: refused in
                                                   one line, zero-shot too (``direction_rule.py``)
excepthook             any                         an uncaught :class:`HltmtError` printing a
                                                   traceback from deep inside fairseq instead of
                                                   one line (``errors.install_excepthook``; the
                                                   plugin's commands install it at import)
=====================  ==========================  =============================================
"""

import sys

from hltmt_plugin.errors import install_excepthook


def _version(text: str):
    return tuple(int(part) for part in text.split("+")[0].split(".")[:2] if part.isdigit())


def install() -> None:
    """Apply the workarounds above whose versions this is (idempotent); a command's process only."""
    from hltmt_plugin.compat.quiet import quiet_fairseq

    install_excepthook()
    if "fairseq" not in sys.modules:  # the plugin's command imports fairseq first: its start-up noise stays out
        quiet_fairseq()
    import fairseq
    from fairseq import checkpoint_utils
    from fairseq.file_io import PathManager

    from hltmt_plugin.compat import (
        atomic_copy,
        checkpoint_record,
        direction_rule,
        hub_generator,
        safe_eval,
        safe_loading,
    )

    safe_loading.install(checkpoint_utils)
    if _version(fairseq.__version__)[:2] == (0, 12):
        safe_eval.install()
        atomic_copy.install(PathManager, checkpoint_utils)
        checkpoint_record.install(checkpoint_utils)
        from fairseq.hub_utils import GeneratorHubInterface
        from fairseq.tasks.translation_multi_simple_epoch import TranslationMultiSimpleEpochTask

        hub_generator.install(TranslationMultiSimpleEpochTask, GeneratorHubInterface)
        direction_rule.install(TranslationMultiSimpleEpochTask)
