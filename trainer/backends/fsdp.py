"""FSDP2 (`fully_shard` per block, then the root): full shard, shard-grad-op, hybrid (2-D mesh).

Every setting comes from the shared FSDP settings (planner/exports/fsdp_settings.py, the
builder `plan tune` stores on its trials and `plan export fsdp|accelerate` writes), built
from the knobs, or read as is from a file (`--fsdp-config`): bf16/fp16 use
`MixedPrecisionPolicy` (compute dtype params, fp32 gradient reduction); bf16_pure keeps the
parameters themselves in bf16; offload uses `CPUOffloadPolicy` (pinned only on a GPU target).

fp16 scales its losses with trainer/backends/loss_scale.py ModelParallelScaler, whose overflow flag is all-reduced over
every rank (as the tp/pp backends do), not torch's GradScaler. GradScaler does reach a common decision over a 1-D FSDP2
mesh, but only through DTensor's dispatcher (torch 2.13 torch/distributed/tensor/_dispatch.py found_inf_reduce_handler:
the flag of aten._amp_foreach_non_finite_check_and_unscale_ is reduced with MAX over the mesh dimensions the gradients
are sharded on, Replicate dimensions left alone): (1) under hybrid sharding it leaves out the replicate dimension, so
the ranks agree only as long as every replica holds bit-equal gradients; (2) under CPUOffloadPolicy the gradient shards
are on the CPU (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_reduce), so is the flag, and on a GPU
the mesh's group is NCCL alone (distributed_c10d.py Backend.backend_capability: nccl -> cuda only): that all-reduce of
a CPU tensor has no backend ("No backend type associated with device type cpu"). ModelParallelScaler checks the
rank-local shards and all-reduces its flag over the whole world, on the GPU under NCCL.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

from trainer.backends.base import Engine, make_optimizer
from trainer.backends.loss_scale import ModelParallelScaler
from trainer.checkpointing import apply_checkpointing


def fsdp_settings_from_knobs(cfg, on_gpu: bool) -> dict:
    """The run's FSDP settings from the shared builder (the one `plan tune` and `plan export` use)."""
    from planner.exports.fsdp_settings import settings_for_knobs

    return settings_for_knobs(cfg.knobs(), dp=cfg.plan.dp, seq_len=cfg.plan.seq_len,
                              target="gpu" if on_gpu else "cpu", nodes=cfg.launch.nnodes)


def run_settings(cfg, on_gpu: bool) -> dict:
    """The settings file given (`--fsdp-config`, used as is), else the ones built from the knobs."""
    if cfg.run.fsdp_config:
        return json.loads(Path(cfg.run.fsdp_config).read_text())
    return fsdp_settings_from_knobs(cfg, on_gpu)


def make_mesh(settings: dict, device_type: str):
    mesh = settings["mesh"]
    if "replicate" in mesh:
        return init_device_mesh(device_type, (mesh["replicate"], mesh["shard"]), mesh_dim_names=("replicate", "shard"))
    return init_device_mesh(device_type, (mesh["shard"],), mesh_dim_names=("shard",))


def shard_kwargs(settings: dict) -> dict:
    """`fully_shard` keyword arguments (all but the mesh) of the settings."""
    kwargs: dict = {"reshard_after_forward": bool(settings["reshard_after_forward"])}
    mp = settings.get("mixed_precision") or {}
    if mp.get("param_dtype") or mp.get("reduce_dtype"):
        dtype = lambda name: getattr(torch, name) if name else None  # noqa: E731
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=dtype(mp.get("param_dtype")),
                                                   reduce_dtype=dtype(mp.get("reduce_dtype")))
    off = settings.get("offload_policy") or {}
    if off.get("offload_params"):
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=bool(off.get("pin_memory")))
    return kwargs


def fully_shard_model(cfg, module, blocks, mesh, settings: dict | None = None) -> None:
    """FSDP2 on each block, then on `module` (the rest), over `mesh` (1-D, or 2-D for hybrid /
    tensor parallelism); `settings` default to the shared builder's for `cfg`'s knobs."""
    settings = settings or fsdp_settings_from_knobs(cfg, torch.cuda.is_available())
    kwargs = {"mesh": mesh, **shard_kwargs(settings)}
    for block in blocks:
        fully_shard(block, **kwargs)
    fully_shard(module, **kwargs)


class FSDPEngine(Engine):
    name = "fsdp2"

    def __init__(self, cfg, model, device):
        from planner.exports.fsdp_settings import knobs_of

        super().__init__(cfg, model, device)
        settings = run_settings(cfg, device.type == "cuda")
        self.fsdp_settings = settings
        self.knobs = self.knobs | {k: v for k, v in knobs_of(settings).items() if k in self.knobs}
        apply_checkpointing(model, settings["activation_checkpointing"])
        model.to(getattr(torch, settings["model_dtype"]))
        if not settings["offload_policy"]["offload_params"]:
            model.to(device)
        fully_shard_model(cfg, model, model.blocks, make_mesh(settings, device.type), settings)
        self.module = model
        self.optimizer = make_optimizer(cfg, model.parameters())
        # fp16: one overflow decision for every rank, every shard and replica (see the module's docstring)
        self.scaler = ModelParallelScaler(cfg.run.loss_scale) if settings["grad_scaler"] else None

    def autocast(self):
        import contextlib
        return contextlib.nullcontext()  # the MixedPrecisionPolicy casts the parameters

    def forward_loss(self, x, y, last=True):
        self.module.set_requires_gradient_sync(last)
        return super().forward_loss(x, y, last)
