"""FSDP2 (`fully_shard` per block, then the root): full shard, shard-grad-op, hybrid (2-D mesh).

bf16/fp16 use `MixedPrecisionPolicy` (compute dtype params, fp32 gradient reduction);
bf16_pure keeps the parameters themselves in bf16; offload=optimizer+params uses
`CPUOffloadPolicy` (pin_memory only when a GPU exists: pinning needs an accelerator).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

from trainer.backends.base import DTYPES, Engine, make_optimizer
from trainer.checkpointing import apply_checkpointing


def make_mesh(cfg, device_type: str):
    world = dist.get_world_size()
    if cfg.plan.sharding == "fsdp_hybrid":
        # replicate across nodes, shard within a node; on one node split the ranks in two groups
        replicate = cfg.launch.nnodes if cfg.launch.nnodes > 1 else 2
        return init_device_mesh(device_type, (replicate, world // replicate), mesh_dim_names=("replicate", "shard"))
    return init_device_mesh(device_type, (world,), mesh_dim_names=("shard",))


def fully_shard_model(cfg, module, blocks, mesh) -> None:
    """FSDP2 on each block, then on `module` (the rest), over `mesh` (1-D, or 2-D for hybrid)."""
    kwargs = {"mesh": mesh, "reshard_after_forward": cfg.plan.sharding != "fsdp_shard_grad_op"}
    if cfg.plan.precision in ("bf16", "fp16"):
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=DTYPES[cfg.plan.precision], reduce_dtype=torch.float32)
    if cfg.plan.offload == "optimizer+params":
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=torch.cuda.is_available())
    for block in blocks:
        fully_shard(block, **kwargs)
    fully_shard(module, **kwargs)


class FSDPEngine(Engine):
    name = "fsdp2"

    def __init__(self, cfg, model, device):
        super().__init__(cfg, model, device)
        apply_checkpointing(model, cfg.plan.activation_checkpointing)
        if cfg.plan.precision == "bf16_pure":
            model.to(DTYPES["bf16_pure"])
        if cfg.plan.offload == "none":
            model.to(device)
        fully_shard_model(cfg, model, model.blocks, make_mesh(cfg, device.type))
        self.module = model
        self.optimizer = make_optimizer(cfg, model.parameters())
        self.scaler = torch.amp.GradScaler(device.type) if cfg.plan.precision == "fp16" else None

    def autocast(self):
        import contextlib
        return contextlib.nullcontext()  # the MixedPrecisionPolicy casts the parameters

    def forward_loss(self, x, y, last=True):
        self.module.set_requires_gradient_sync(last)
        return super().forward_loss(x, y, last)
