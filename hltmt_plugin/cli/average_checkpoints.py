#!/usr/bin/env python3
"""Average the weights of checkpoints of one training run into one checkpoint (fairseq's
``scripts/average_checkpoints.py``, with its options, for HLT-MT checkpoints).

    hltmt-average-checkpoints --inputs ckpt --num-update-checkpoints 5 --output ckpt/averaged.pt
    hltmt-average-checkpoints --inputs ckpt/checkpoint9.pt ckpt/checkpoint10.pt --output averaged.pt

``--inputs`` names the files, or, with ``--num-epoch-checkpoints N`` (``checkpointEPOCH.pt``) or
``--num-update-checkpoints N`` (``checkpoint_EPOCH_UPDATE.pt``), one folder whose last N such
checkpoints are taken (none above ``--checkpoint-upper-bound``).

Every file is read weights-only and checked as fairseq's loader checks it under the plugin.
Floating-point weights are averaged (in float64, stored in their own type); every other tensor
must be the same in all checkpoints: the routing map (fixed once, at the stage switch, and
open in stage high), the gate's step count, the language names. So must the compatibility
record (:mod:`hltmt_plugin.compatibility`: the dictionaries, languages and their order, how
languages are marked, the architecture, pool, adapters and skills), for the plugin's checkpoints
and fairseq's own alike; a file named twice is refused. Anything else is refused in one line naming two
checkpoints and what differs: in practice, average checkpoints of stage all of one run. The
output holds the first checkpoint's other records (options, training state), as fairseq's
script writes it, and is written atomically once every input is read: ``--output`` is its old
self or the whole new file, also when it lies in the folder ``--inputs`` names or is one of the
input files.
"""

import argparse
import os
import re
import sys

from hltmt_plugin.atomic_files import check_output
from hltmt_plugin.cli import add_version, register
from hltmt_plugin.compatibility import mismatches, record_of_state
from hltmt_plugin.errors import HltmtConfigError, HltmtInputError
from hltmt_plugin.pool.keys import DECODER, ROUTER_GATE_STEPS, ROUTER_MAP


def last_checkpoints(folder: str, n: int, update_based: bool, upper_bound=None):
    """The last ``n`` checkpoints of ``folder`` by epoch (``checkpointEPOCH.pt``) or update
    (``checkpoint_EPOCH_UPDATE.pt``), newest first, as fairseq's script picks them."""
    if n < 1:
        raise HltmtConfigError(f"--num-{'update' if update_based else 'epoch'}-checkpoints must be at least 1, got {n}")
    if not os.path.isdir(folder):
        raise HltmtInputError(
            f"--inputs {folder} is not a folder (--num-epoch-checkpoints / --num-update-checkpoints "
            "take the checkpoints of one folder)"
        )
    pattern = re.compile(r"checkpoint_\d+_(\d+)\.pt" if update_based else r"checkpoint(\d+)\.pt")
    found = sorted(
        (
            (int(m.group(1)), name)
            for name in os.listdir(folder)
            for m in [pattern.fullmatch(name)]
            if m and (upper_bound is None or int(m.group(1)) <= upper_bound)
        ),
        reverse=True,
    )
    if len(found) < n:
        raise HltmtInputError(
            f"{folder} holds {len(found)} checkpoint(s) named {pattern.pattern}"
            f"{f' up to {upper_bound}' if upper_bound is not None else ''}, fewer than the {n} asked "
            f"for"
        )
    return [os.path.join(folder, name) for _, name in found[:n]]


def _record(path, state):
    """The compatibility record of ``path``'s state (its stored options, checked unedited)."""
    try:
        return record_of_state(state)
    except HltmtInputError as error:
        raise HltmtInputError(f"checkpoint {path}: {error}") from None


def _differ(first, path, what):
    return HltmtInputError(f"cannot average {first} and {path}: {what}")


def _compare(first, first_state, path, state) -> None:
    """Refuse ``state`` (of ``path``) unless it can be averaged with ``first_state``."""
    a, b = first_state["model"], state["model"]
    only = sorted(set(a) ^ set(b))  # (in any order: a checkpoint read from an older form lists keys in its own)
    if only:
        what = f"{only[0]} is in only one of them" + (f" (and {len(only) - 1} more)" if len(only) > 1 else "")
        raise _differ(first, path, f"{what}: they are not checkpoints of one model")
    # in order: the stored states are averaged as they are (the routing map's rows in their order)
    differ = mismatches(_record(first, first_state), _record(path, state), labels=("first", "second"), in_order=True)
    if differ:
        raise _differ(
            first,
            path,
            f"they were trained on other data or options ({'; '.join(differ)}), so the same "
            "weight means something else in each",
        )
    for key, x in a.items():
        y = b[key]
        if x.shape != y.shape or x.dtype != y.dtype:
            raise _differ(
                first,
                path,
                f"{key} is {tuple(x.shape)} {x.dtype} in the first and {tuple(y.shape)} {y.dtype} in the second",
            )
        if not x.is_floating_point() and not (x == y).all():
            raise _differ(first, path, _why_not_averaged(key, x, y))


def _why_not_averaged(key: str, x, y) -> str:
    values = (x.tolist(), y.tolist()) if x.numel() <= 16 else ("...", "...")
    if key == ROUTER_MAP:
        return (
            f"their routing maps ({key}) differ ({values[0]} and {values[1]}): checkpoints from both sides of the "
            "stage switch, or of runs that fixed other maps; an average would be a map neither has. Average "
            "checkpoints written after the switch (stage all) of one run"
        )
    if key == ROUTER_GATE_STEPS:
        return (
            f"the gate trained for {values[0]} and {values[1]} steps ({key}): checkpoints of stage high, where the "
            "gate still learns and the routing map is not fixed yet. Average checkpoints of stage all"
        )
    return (
        f"{key} holds {values[0]} and {values[1]}: integers (module choices, counts or language names), which "
        "cannot be averaged. Average checkpoints of one run and stage"
    )


def refuse_repeats(paths) -> None:
    """A file named twice (by another path too) would count twice in the average."""
    seen = {}
    for path in paths:
        try:
            key = os.stat(path)
            key = (key.st_dev, key.st_ino)
        except OSError:
            continue  # missing: the loader says so
        if key in seen:
            raise HltmtConfigError(
                f"--inputs names {seen[key]}{' twice' if seen[key] == path else f' and {path}, one file,'}"
                ": it would count twice in the average; name each checkpoint once"
            )
        seen[key] = path


def average(paths):
    """The first checkpoint's state with the float weights averaged over ``paths`` (weights that
    share one tensor there, as tied embeddings do, share their average)."""
    import torch

    from hltmt_plugin.compat.safe_loading import check_fairseq_state, load_state
    from hltmt_plugin.pool.router import upgrade_router_state

    refuse_repeats(paths)
    first, first_state, total = paths[0], None, None
    for path in paths:
        state = load_state(path)
        check_fairseq_state(path, state)
        odd = [k for k, v in state["model"].items() if not isinstance(v, torch.Tensor)]
        if odd:
            raise HltmtInputError(
                f"checkpoint {path}: its weight {odd[0]} is a {type(state['model'][odd[0]]).__name__}, not a tensor"
            )
        upgrade_router_state(state["model"], DECODER)  # older forms of the pool's router: this version's
        if first_state is None:
            first_state = state
            total = {k: v.double() for k, v in state["model"].items() if v.is_floating_point()}
            continue
        _compare(first, first_state, path, state)
        for key in total:
            total[key] += state["model"][key].double()
    model, shared = dict(first_state["model"]), {}
    for key, value in total.items():
        weight = first_state["model"][key]
        place = (weight.untyped_storage().data_ptr(), weight.storage_offset(), tuple(weight.shape), weight.stride())
        if place not in shared:
            shared[place] = (value / len(paths)).to(weight.dtype)
        model[key] = shared[place]
    first_state["model"] = model
    return first_state


def build_parser():
    """The command line of hltmt-average-checkpoints."""
    from hltmt_plugin.paths import READ_PATH, WRITE_FILE, ArgumentParser, path_option

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    path_option(
        p,
        "--inputs",
        kind=READ_PATH,
        required=True,
        nargs="+",
        help="the checkpoint files, or one folder with --num-epoch-checkpoints / --num-update-checkpoints",
    )
    path_option(
        p,
        "--output",
        kind=WRITE_FILE,
        in_place=("--inputs",),  # read whole before it is written: the folder's files, or one of them
        required=True,
        help="the averaged checkpoint to write, whole, once every input is read: it may lie in the folder "
        "--inputs names or be one of the input files",
    )
    num = p.add_mutually_exclusive_group()
    num.add_argument(
        "--num-epoch-checkpoints",
        type=int,
        metavar="N",
        help="average the last N checkpoints checkpointEPOCH.pt of the folder --inputs",
    )
    num.add_argument(
        "--num-update-checkpoints",
        type=int,
        metavar="N",
        help="average the last N checkpoints checkpoint_EPOCH_UPDATE.pt of the folder --inputs",
    )
    p.add_argument(
        "--checkpoint-upper-bound",
        type=int,
        metavar="K",
        help="with --num-*-checkpoints: take no checkpoint of an epoch (update) above K",
    )
    return add_version(p)


def main(argv=None):
    args = build_parser().parse_args(argv)
    check_output(args.output, "--output")  # a device, FIFO or stream path: refused before any work
    n = args.num_update_checkpoints if args.num_update_checkpoints is not None else args.num_epoch_checkpoints
    if n is None:
        if args.checkpoint_upper_bound is not None:
            raise HltmtConfigError("--checkpoint-upper-bound needs --num-epoch-checkpoints or --num-update-checkpoints")
        paths = args.inputs
    elif len(args.inputs) != 1:
        raise HltmtConfigError("with --num-epoch-checkpoints / --num-update-checkpoints, --inputs names one folder")
    else:
        paths = last_checkpoints(
            args.inputs[0], n, args.num_update_checkpoints is not None, args.checkpoint_upper_bound
        )
    register()  # torch and fairseq (safe loading, atomic checkpoint writes), once the arguments are checked
    from hltmt_plugin.compat.atomic_copy import save_checkpoint_file

    state = average(paths)
    save_checkpoint_file(state, args.output)
    print(f"averaged {len(paths)} checkpoint(s) into {args.output}: {', '.join(paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
