"""A sampling temperature that changes with the epoch.

The HLT-MT paper samples directions with a temperature rising from 1 to 5 over the first
epochs; fairseq 0.12's ``--sampling-temperature`` is one number for the whole run. With
``--sampling-temperature-start S --sampling-temperature-epochs N`` the temperature goes
linearly from ``S`` at epoch 1 to ``--sampling-temperature`` at epoch ``N`` and stays there;
the task reloads the training data at each epoch (fairseq's own per-epoch reload, the one its
sharded data uses) and the data manager computes that epoch's ratios from it.
"""

import logging

from fairseq.data.multilingual.sampling_method import make_temperature_sampling

from hltmt_plugin.errors import HltmtConfigError

logger = logging.getLogger(__name__)


def add_args(parser) -> None:
    parser.add_argument(
        "--sampling-temperature-start",
        type=float,
        default=None,
        metavar="S",
        help="with --sampling-temperature-epochs: the temperature of epoch 1, rising (or falling) "
        "linearly to --sampling-temperature at epoch N (the HLT-MT paper: 1 -> 5)",
    )
    parser.add_argument(
        "--sampling-temperature-epochs",
        type=int,
        default=0,
        metavar="N",
        help="epochs over which the sampling temperature moves from --sampling-temperature-start "
        "to --sampling-temperature (0: one temperature for the whole run, as in fairseq)",
    )


def scheduled(args) -> bool:
    return getattr(args, "sampling_temperature_epochs", 0) > 0


def check(args) -> None:
    """The schedule's options, before any data is read."""
    epochs, start = getattr(args, "sampling_temperature_epochs", 0), getattr(args, "sampling_temperature_start", None)
    if epochs < 0:
        raise HltmtConfigError(f"--sampling-temperature-epochs must be >= 0, got {epochs}")
    if not epochs:
        if start is not None:
            raise HltmtConfigError(
                "--sampling-temperature-start needs --sampling-temperature-epochs N (the epochs "
                "over which the temperature moves to --sampling-temperature)"
            )
        return
    if epochs < 2:
        raise HltmtConfigError(
            f"--sampling-temperature-epochs must be >= 2 (epoch 1 at the start, epoch N at "
            f"--sampling-temperature), got {epochs}; for one temperature leave it out"
        )
    if start is None or start <= 0 or float(args.sampling_temperature) <= 0:
        raise HltmtConfigError(
            "--sampling-temperature-epochs needs --sampling-temperature-start S > 0 and "
            f"--sampling-temperature > 0 (got {start} and {args.sampling_temperature})"
        )
    if args.sampling_method != "temperature":
        raise HltmtConfigError(
            f"--sampling-temperature-epochs schedules temperature sampling: add --sampling-method "
            f"temperature (got {args.sampling_method})"
        )
    if getattr(args, "virtual_epoch_size", None) is not None:
        raise HltmtConfigError(
            "--sampling-temperature-epochs reloads the training data every epoch, which "
            "--virtual-epoch-size (data loaded shard by shard) does not allow: leave one out"
        )


def temperature_at(args, epoch: int) -> float:
    """The temperature of ``epoch`` (1-based)."""
    start, end, n = (
        float(args.sampling_temperature_start),
        float(args.sampling_temperature),
        args.sampling_temperature_epochs,
    )
    return start + (end - start) * (min(max(epoch, 1), n) - 1) / (n - 1)


def sampling_ratios(args, sizes, epoch: int):
    t = temperature_at(args, epoch)
    logger.info(
        f"sampling temperature {t:g} at epoch {epoch} (from {float(args.sampling_temperature_start):g} to "
        f"{float(args.sampling_temperature):g} over {args.sampling_temperature_epochs} epochs)"
    )
    return make_temperature_sampling(t)(sizes)
