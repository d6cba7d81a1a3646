"""Training with several workers: the idle-gradient rule, the ``--ddp-backend`` checks and the
parameter digest.

The idle-gradient rule: parameters that no worker gave a gradient in an update (pool modules
a hard step did not choose, the gate on hard steps, adapters and skills of languages absent
from every worker's batch) keep none, so the optimizer skips them as in single-process
training. ``legacy_ddp`` all-reduces a zero gradient for them, and Adam's momentum would
move them.
"""
import hashlib
from typing import Optional

import torch

from hltmt_plugin.errors import HltmtConfigError


class IdleGradients:
    """Notes which trainable parameters got a gradient since the last optimizer step, and
    drops the gradient of those that no worker gave one."""

    def __init__(self):
        self.had: Optional[torch.Tensor] = None

    @staticmethod
    def trained_parameters(model):
        return [p for p in model.parameters() if p.requires_grad]

    def note(self, model) -> None:
        had = torch.tensor([p.grad is not None for p in self.trained_parameters(model)])
        self.had = had if self.had is None else self.had | had

    def drop(self, model) -> None:
        had, self.had = self.had, None
        if had is None:
            return
        params = self.trained_parameters(model)
        if len(params) != had.numel():  # the trainable set changed (a skipped update before a stage switch)
            return
        had = had.to(params[0].device, torch.float)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(had)
        for param, used in zip(params, had.tolist()):
            if used == 0:
                param.grad = None


def check_ddp_backend(args) -> None:
    """Refuse a ``--ddp-backend`` that fails mid-training with per-sentence routing."""
    if getattr(args, "distributed_world_size", 1) <= 1:
        return
    backend = getattr(args, "ddp_backend", "pytorch_ddp")
    if backend in ("c10d", "pytorch_ddp"):
        if getattr(args, "cpu", False):
            raise HltmtConfigError(
                f"--ddp-backend {backend} does not work on CPU in fairseq 0.12 (it passes device_ids): use "
                "--ddp-backend legacy_ddp (scripts/launch.py sets it)")
        if not getattr(args, "find_unused_parameters", False):
            raise HltmtConfigError(
                f"--ddp-backend {backend}: hard routing leaves pool modules, the universal layer or the gate "
                "without gradient in an update, which PyTorch DDP reports as an error mid-training; add "
                "--find-unused-parameters, or use --ddp-backend legacy_ddp")
    elif backend == "fully_sharded":
        raise HltmtConfigError("--ddp-backend fully_sharded is not supported with per-sentence routing; use "
                               "legacy_ddp, or pytorch_ddp with --find-unused-parameters")


def rank() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return 0


def parameter_digest(model) -> str:
    """A SHA-1 over every parameter's bytes, in name order."""
    digest = hashlib.sha1()
    for name, param in sorted(model.named_parameters()):
        digest.update(name.encode())
        digest.update(param.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()[:16]
