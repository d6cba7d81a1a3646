"""Option values that fairseq evaluates as Python, read as literals only (fairseq 0.12).

fairseq 0.12 turns some option strings into values with Python's ``eval``: its helpers
``utils.eval_str_list`` (e.g. ``--adaptive-softmax-cutoff``), ``utils.eval_str_dict``
(``--xformers-att-config``) and ``utils.eval_bool`` (``--left-pad-source``), and ``eval`` written
out in the models and optimizers (``--adam-betas``, fconv's ``--encoder-layers``, wav2vec's
``--conv-feature-layers`` ...). It does so also for the options stored in a checkpoint, when
it rebuilds the task and model from them: a checkpoint holding
``__import__('os').system(...)`` as such an option would run it.

So two things:

- :func:`check_stored_options` (called by ``safe_loading.check_fairseq_state`` on every
  checkpoint fairseq or the plugin loads, before fairseq reads it) refuses a checkpoint whose
  stored option of :data:`EVALUATED_OPTIONS` is not a literal, naming the file and the option;
- :func:`install` replaces ``eval`` in the fairseq modules of :data:`EVALUATING_MODULES` by
  :func:`literal_value`, which computes what ``eval`` computes for literals (numbers, strings,
  ``True``/``False``/``None``, tuples, lists, sets, dicts, and ``+``, ``-``, ``*`` between them,
  as in fconv's ``"[(512, 3)] * 20"``) and refuses anything else (a name, a call, an attribute):
  a value that reaches fairseq by another way (an option of another model, a legacy
  checkpoint's ``args``, a command line) cannot run code either.

Values of the command line pass through the same evaluator: every value fairseq documents
for these options is a literal.
"""

import argparse
import ast
import importlib
import operator
from typing import Iterator, Tuple

from hltmt_plugin.errors import HltmtInputError

# The options fairseq 0.12 evaluates (utils.eval_str_list / eval_str_dict / eval_bool, or eval)
# when it builds a task, model, criterion or optimizer from them; tests/compat/test_safe_eval.py
# checks this list against the installed fairseq's source.
EVALUATED_OPTIONS = frozenset(
    {
        # eval_bool
        "left_pad_source",
        "left_pad_target",
        "decoder_attention",
        # eval_str_list
        "adaptive_softmax_cutoff",
        "adaptive_input_cutoff",
        "pipeline_balance",
        "pipeline_devices",
        "pipeline_encoder_balance",
        "pipeline_encoder_devices",
        "pipeline_decoder_balance",
        "pipeline_decoder_devices",
        # eval_str_dict
        "xformers_att_config",
        # eval
        "adam_betas",
        "adamax_betas",
        "adafactor_eps",
        "lamb_betas",
        "wer_args",
        "character_filters",
        "encoder_layers",
        "decoder_layers",
        "encoder_attention",
        "pretrained",
        "self_attention",
        "project_input",
        "gated_attention",
        "downsample",
        "conv_feature_layers",
        "conv_aggregator_layers",
        "feature_encoder_spec",
    }
)

# The fairseq 0.12 modules whose code calls eval (checked by the same test).
EVALUATING_MODULES = (
    "fairseq.utils",
    "fairseq.criterions.ctc",
    "fairseq.data.audio.raw_audio_dataset",
    "fairseq.data.codedataset",
    "fairseq.models.fconv",
    "fairseq.models.fconv_lm",
    "fairseq.models.fconv_self_att",
    "fairseq.models.hubert.hubert",
    "fairseq.models.lightconv_lm",
    "fairseq.models.speech_to_text.s2t_wav_transformer",
    "fairseq.models.transformer_lm",
    "fairseq.models.wav2vec.wav2vec",
    "fairseq.models.wav2vec.wav2vec2",
    "fairseq.optim.adafactor",
    "fairseq.optim.adam",
    "fairseq.optim.adamax",
    "fairseq.optim.cpu_adam",
    "fairseq.optim.fused_lamb",
)

MAX_ITEMS = 1_000_000  # the longest list or string a repetition (``[x] * n``) may make
ACCEPTED = "numbers, strings, True/False/None, tuples, lists, sets, dicts, and + - * between them"


class NotALiteral(HltmtInputError):
    """An option value that is not a literal."""


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def _short(text, limit: int = 80) -> str:
    text = repr(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _value(node):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = [_value(item) for item in node.elts]
        return {ast.Tuple: tuple, ast.List: list, ast.Set: set}[type(node)](items)
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {_value(k): _value(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _value(node.operand)
        if isinstance(operand, (int, float, complex)) and not isinstance(operand, bool):
            return -operand if isinstance(node.op, ast.USub) else +operand
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _value(node.left), _value(node.right)
        numbers = all(isinstance(v, (int, float, complex)) and not isinstance(v, bool) for v in (left, right))
        same_sequences = type(left) is type(right) and isinstance(left, (tuple, list, str))
        if isinstance(node.op, ast.Mult) and not numbers:
            seq, times = (left, right) if isinstance(right, int) else (right, left)
            if isinstance(seq, (tuple, list, str)) and isinstance(times, int) and not isinstance(times, bool):
                if len(seq) * max(times, 0) > MAX_ITEMS:
                    raise NotALiteral(f"a repetition of more than {MAX_ITEMS} items")
                return seq * times
        elif numbers or (isinstance(node.op, ast.Add) and same_sequences):
            return _OPS[type(node.op)](left, right)
    raise NotALiteral(f"{type(node).__name__.lower()}: {ast.unparse(node)[:40]}")


def literal_value(text, *unused):
    """What ``eval(text)`` gives when ``text`` is a literal (see the module docstring); anything
    else is a :class:`NotALiteral` error. Like ``eval``, a value that is not a string is a
    ``TypeError`` (fairseq's ``eval_bool`` / ``eval_str_list`` rely on that)."""
    if not isinstance(text, (str, bytes)):
        raise TypeError("eval() arg 1 must be a string, bytes or code object")
    try:
        text = text.decode("utf-8") if isinstance(text, bytes) else text
        return _value(ast.parse(text.lstrip(" \t"), mode="eval").body)
    except NotALiteral as error:
        reason = str(error)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        reason = type(error).__name__
    raise NotALiteral(
        f"the option value {_short(text)} is not a literal ({reason}): fairseq evaluates this option as "
        f"Python, and the plugin reads only literals there ({ACCEPTED})"
    )


def _stored_options(record, where: str, depth: int = 0) -> Iterator[Tuple[str, object]]:
    """(dotted name, value) of every option in a checkpoint's ``cfg`` / ``args`` record."""
    if depth > 3:
        return
    items = (
        vars(record).items()
        if isinstance(record, argparse.Namespace)
        else (record.items() if isinstance(record, dict) else ())
    )
    for key, value in items:
        name = f"{where}.{key}"
        if isinstance(value, (dict, argparse.Namespace)):
            yield from _stored_options(value, name, depth + 1)
        else:
            yield name, value


def check_stored_options(path: str, state: dict) -> None:
    """Refuse a checkpoint whose stored options of :data:`EVALUATED_OPTIONS` are not literals."""
    for record in ("cfg", "args"):
        for name, value in _stored_options(state.get(record), record):
            if name.rsplit(".", 1)[-1] not in EVALUATED_OPTIONS or not isinstance(value, (str, bytes)):
                continue
            try:
                literal_value(value)
            except NotALiteral:
                raise HltmtInputError(
                    f"refused to load checkpoint {path}: its stored option {name} = {_short(value)} is not a "
                    f"literal, and fairseq evaluates that option as Python when it builds the model or task, so "
                    f"loading it could run code (nothing was run)"
                ) from None


def install() -> None:
    """Give each module of :data:`EVALUATING_MODULES` :func:`literal_value` as its ``eval``."""
    for name in EVALUATING_MODULES:
        module = importlib.import_module(name)
        module.eval = literal_value
