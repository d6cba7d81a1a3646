"""Training with several workers: the idle-gradient rule, the ``--ddp-backend`` checks and the
parameter digest.

The idle-gradient rule: parameters that no worker gave a gradient in an update (pool modules
a hard step did not choose, the gate on hard steps, adapters and skills of languages absent
from every worker's batch) keep none, so the optimizer skips them as in single-process
training. ``legacy_ddp`` all-reduces a zero gradient for them, and Adam's momentum would
move them.
"""

import hashlib
import importlib.util
from typing import Dict, List, Optional

import torch

from hltmt_plugin.errors import HltmtConfigError


class IdleGradients:
    """Notes which trainable parameters got a gradient since the last optimizer step, and
    drops the gradient of those that no worker gave one."""

    def __init__(self):
        self.had: Optional[List[bool]] = None  # host values: noting them waits for nothing

    @staticmethod
    def trained_parameters(model):
        return [p for p in model.parameters() if p.requires_grad]

    def note(self, model) -> None:
        had = [p.grad is not None for p in self.trained_parameters(model)]
        self.had = had if self.had is None or len(self.had) != len(had) else [a or b for a, b in zip(self.had, had)]

    def drop(self, model, optimizer=None) -> None:
        """Drop the idle gradients, also from the float32 copies that ``--fp16`` steps (its
        optimizer fills a missing gradient with zeros before the step)."""
        had, self.had = self.had, None
        if had is None:
            return
        params = self.trained_parameters(model)
        if len(params) != len(had):  # the trainable set changed (a skipped update before a stage switch)
            return
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            mask = torch.tensor(had, dtype=torch.float, device=params[0].device)  # NCCL needs the device
            torch.distributed.all_reduce(mask)  # one all-reduce per update
            had = [used > 0 for used in mask.tolist()]
        copies = fp32_copies(optimizer)
        for param, used in zip(params, had):
            if not used:
                param.grad = None
                if id(param) in copies:
                    copies[id(param)].grad = None


def fp32_copies(optimizer) -> Dict[int, torch.Tensor]:
    """``--fp16``'s float32 copy of each parameter (fairseq's ``FP16Optimizer`` without flat
    parameters), by the parameter's id; empty for every other optimizer."""
    if optimizer is None or not hasattr(optimizer, "fp16_params") or getattr(optimizer, "has_flat_params", True):
        return {}
    return {id(p): p32 for p, p32 in zip(optimizer.fp16_params, optimizer.fp32_params)}


def check_precision(args) -> None:
    """Mixed-precision options that break the idle-gradient rule or do not run."""
    if getattr(args, "bf16", False) and importlib.util.find_spec("torch_xla") is None:  # fairseq sets --tpu itself
        raise HltmtConfigError(
            "--bf16 in fairseq 0.12 is the TPU path (it fails without one): on a GPU use --amp "
            "(float16 autocast, float32 weights) or --fp16 --fp16-no-flatten-grads"
        )
    if (
        getattr(args, "fp16", False)
        and not getattr(args, "memory_efficient_fp16", False)
        and not getattr(args, "fp16_no_flatten_grads", False)
    ):
        raise HltmtConfigError(
            "--fp16 keeps one flat float32 copy of all weights and steps it whole, so modules a hard step did not "
            "use (pool modules, the gate, adapters of absent languages) would move: add --fp16-no-flatten-grads, "
            "or use --amp or --memory-efficient-fp16"
        )


def check_ddp_backend(args) -> None:
    """Refuse a ``--ddp-backend`` that fails mid-training with per-sentence routing."""
    if getattr(args, "distributed_world_size", 1) <= 1:
        return
    backend = getattr(args, "ddp_backend", "pytorch_ddp")
    if backend in ("c10d", "pytorch_ddp"):
        if getattr(args, "cpu", False):
            raise HltmtConfigError(
                f"--ddp-backend {backend} does not work on CPU in fairseq 0.12 (it passes device_ids): use "
                "--ddp-backend legacy_ddp (hltmt-launch sets it)"
            )
        if not getattr(args, "find_unused_parameters", False):
            raise HltmtConfigError(
                f"--ddp-backend {backend}: hard routing leaves pool modules, the universal layer or the gate "
                "without gradient in an update, which PyTorch DDP reports as an error mid-training; add "
                "--find-unused-parameters, or use --ddp-backend legacy_ddp"
            )
    elif backend == "fully_sharded":
        raise HltmtConfigError(
            "--ddp-backend fully_sharded is not supported with per-sentence routing; use "
            "legacy_ddp, or pytorch_ddp with --find-unused-parameters"
        )


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
