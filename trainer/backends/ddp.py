"""sharding=none: torch DDP (plain model on one rank), autocast for bf16/fp16, GradScaler for fp16."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from trainer.backends.base import DTYPES, Engine, make_optimizer
from trainer.checkpointing import apply_checkpointing


class DDPEngine(Engine):
    name = "ddp"

    def __init__(self, cfg, model, device):
        super().__init__(cfg, model, device)
        apply_checkpointing(model, cfg.plan.activation_checkpointing)
        model.to(device)
        if cfg.plan.precision == "bf16_pure":
            model.to(DTYPES["bf16_pure"])
        self.module = model
        self.wrapped = model
        if dist.is_initialized() and dist.get_world_size() > 1:
            ids = [device.index] if device.type == "cuda" else None
            # the gradients ARE the all-reduce buckets (views into them): without it DDP keeps a second, flat copy
            # of every gradient in its buckets ("gradient_as_bucket_view ... saves a memory size equal to the
            # total gradients size", torch DistributedDataParallel docs), which planner/comm_buffers.py does not count
            self.wrapped = DistributedDataParallel(model, device_ids=ids, gradient_as_bucket_view=True)
        self.optimizer = make_optimizer(cfg, model.parameters())
        fp16 = cfg.plan.precision == "fp16"
        self.scaler = torch.amp.GradScaler(device.type, init_scale=cfg.run.loss_scale) if fp16 else None

    def forward_loss(self, x, y, last=True):
        from trainer.model import training_loss

        if isinstance(self.wrapped, DistributedDataParallel):
            self.wrapped.require_backward_grad_sync = last  # what no_sync() toggles
        with self.autocast():
            return training_loss(self.module, self.wrapped(x), y)
