"""Parallelism backends; each applies itself to a plain `GPT` in its own module."""

from __future__ import annotations

from trainer.backends.base import Engine
from trainer.config import TrainConfig


def build_engine(cfg: TrainConfig, model, device) -> Engine:
    if cfg.plan.pp > 1:
        from trainer.backends.pipeline import PipelineEngine
        return PipelineEngine(cfg, model, device)
    if cfg.plan.tp > 1:
        from trainer.backends.tensor_parallel import TensorParallelEngine
        return TensorParallelEngine(cfg, model, device)
    if cfg.backend_name == "deepspeed":
        from trainer.backends.deepspeed_backend import DeepSpeedEngine
        return DeepSpeedEngine(cfg, model, device)
    if cfg.backend_name == "fsdp2":
        from trainer.backends.fsdp import FSDPEngine
        return FSDPEngine(cfg, model, device)
    from trainer.backends.ddp import DDPEngine
    return DDPEngine(cfg, model, device)
