"""fp16 dynamic loss scaling for the FSDP2, tensor- and pipeline-parallel backends: every rank takes the same decision.

torch's GradScaler decides per rank: it checks the gradients this rank holds. Under tensor / pipeline parallelism a
rank holds a slice of the model's gradients, so an overflow in one slice made that rank skip the step and back off its
scale while the others stepped: the replicas of one model drifted apart. (On FSDP2's DTensor shards torch reduces the
flag over the sharded mesh dimension itself, not over hybrid sharding's replicas, nor on a GPU with CPU-offloaded
shards: trainer/backends/fsdp.py.) As Megatron-LM does
(megatron/core/optimizer/optimizer.py MixedPrecisionOptimizer._unscale_main_grads_and_check_for_nan: found_inf
all-reduced with MAX over the model-parallel group; grad_scaler.py DynamicGradScaler), the overflow flag is reduced
over every rank here (the whole world: tp x pp x dp, since FSDP2's dp shards differ too) before the step, and the scale
follows GradScaler's rule (torch/amp/grad_scaler.py update / aten _amp_update_scale_: x backoff on an overflow, x growth
after `growth_interval` clean steps), so that a run matches its DDP twin (which runs GradScaler) step for step.

The order of one optimizer step is: unscale_ (gradients back to their true size, the flag reduced), then anything
that reads the gradients (clipping, norms), then step (skipped on an overflow), then update.
"""

from __future__ import annotations

from collections import defaultdict

import torch
import torch.distributed as dist

from trainer.memory import local_tensor


class ModelParallelScaler:
    """GradScaler's interface (scale, unscale_, step, update, get_scale) with one decision for all ranks of `group`
    (None: the default group, every rank)."""

    def __init__(self, init_scale: float = 2.0**16, group=None, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000):
        self._scale = float(init_scale)
        self.group = group
        self.growth_factor, self.backoff_factor, self.growth_interval = growth_factor, backoff_factor, growth_interval
        self._growth_tracker = 0
        self._found_inf: bool | None = None  # this step's reduced flag, None until unscale_

    def get_scale(self) -> float:
        return self._scale

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        # GradScaler multiplies by its fp32 scale tensor: the same product
        return loss * torch.tensor(self._scale, dtype=torch.float32, device=loss.device)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> bool:
        """Divide this rank's gradients by the scale and reduce the overflow flag over the group (once per step)."""
        if self._found_inf is not None:
            return self._found_inf
        groups: dict = defaultdict(list)
        for pg in optimizer.param_groups:
            for p in pg["params"]:
                if p.grad is not None:
                    g = local_tensor(p.grad)
                    groups[(g.device, g.dtype)].append(g)
        device = next(iter(groups))[0] if groups else torch.device("cpu")
        # GradScaler's reciprocal: in double, then fp32
        inv = torch.tensor(self._scale, dtype=torch.float64).reciprocal().float()
        found = torch.zeros((), dtype=torch.float32, device=device)
        for (dev, _), grads in groups.items():
            flag = torch.zeros((), dtype=torch.float32, device=dev)
            torch._amp_foreach_non_finite_check_and_unscale_(grads, flag, inv.to(dev))
            found = torch.maximum(found, flag.to(device))
        if dist.is_initialized():
            if device.type == "cpu" and dist.get_backend(self.group) == "nccl":
                found = found.cuda()
            dist.all_reduce(found, op=dist.ReduceOp.MAX, group=self.group)
        self._found_inf = bool(found.item() > 0)
        return self._found_inf

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """The optimizer's step unless some rank overflowed; True when the step was taken."""
        if not self.unscale_(optimizer):
            optimizer.step()
            return True
        return False

    def update(self) -> None:
        """aten _amp_update_scale_: backoff on an overflow, growth after growth_interval clean steps."""
        assert self._found_inf is not None, "update() before unscale_/step"
        if self._found_inf:
            self._scale *= self.backoff_factor
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self.growth_interval:
                grown = self._scale * self.growth_factor
                if grown != float("inf"):
                    self._scale = grown
                self._growth_tracker = 0
        self._found_inf = None
