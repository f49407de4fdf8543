"""FSDP2 (`fully_shard` per block, then the root): full shard, shard-grad-op, hybrid (2-D mesh).

Every setting comes from the shared FSDP settings (planner/exports/fsdp_settings.py, the
builder `plan tune` stores on its trials and `plan export fsdp|accelerate` writes), built
from the knobs, or read as is from a file (`--fsdp-config`): bf16/fp16 use
`MixedPrecisionPolicy` (compute dtype params, fp32 gradient reduction); bf16_pure keeps the
parameters themselves in bf16; offload uses `CPUOffloadPolicy` (pinned only on a GPU target).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

from trainer.backends.base import Engine, make_optimizer
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
        self.scaler = torch.amp.GradScaler(device.type, init_scale=cfg.run.loss_scale) if settings["grad_scaler"] \
            else None

    def autocast(self):
        import contextlib
        return contextlib.nullcontext()  # the MixedPrecisionPolicy casts the parameters

    def forward_loss(self, x, y, last=True):
        self.module.set_requires_gradient_sync(last)
        return super().forward_loss(x, y, last)
