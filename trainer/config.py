"""`TrainConfig`: one trainer run, in the planner's knob vocabulary. Imports no torch.

`validate_config` turns unsupported combinations into a `PlanError` naming the field (the
launcher reports those as status `bad_config`).
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from planner.errors import PlanError
from planner.model import ModelSpec
from planner.scenario import Attention, Checkpointing, Offload, Optimizer, Precision, Sharding


class TrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = "tiny"  # preset id, bare size, config.json, or a ModelSpec JSON file
    spec: ModelSpec | None = None  # resolved from `model` when None
    # launch
    nproc: int = Field(default=1, gt=0)
    nnodes: int = Field(default=1, gt=0)
    node_rank: int = Field(default=0, ge=0)
    rdzv_endpoint: str | None = None
    # knobs (planner/scenario.py vocabulary)
    sharding: Sharding = "none"
    offload: Offload = "none"
    activation_checkpointing: Checkpointing = "none"
    precision: Precision = "fp32"
    optimizer: Optimizer = "adamw"
    attention: Attention = "flash"
    micro_batch: int = Field(default=1, gt=0)
    grad_accum: int = Field(default=1, gt=0)
    tp: int = Field(default=1, gt=0)
    seq_len: int = Field(default=64, gt=0)
    deepspeed_config: str | None = None  # a DeepSpeed JSON file, used as is
    compile: bool = False
    low_precision_norm: bool = False
    # run
    steps: int = Field(default=6, gt=0)
    warmup_steps: int = Field(default=2, ge=0)
    lr: float = Field(default=1e-3, gt=0)
    seed: int = 0
    data: str = "synthetic"  # or a path to a local text file (byte-level tokens)
    timeout_s: float = Field(default=1800.0, gt=0)
    measure_memory: bool = True
    json_out: str | None = None

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    @property
    def backend_name(self) -> str:
        if self.deepspeed_config or self.sharding.startswith("zero"):
            return "deepspeed"
        if self.sharding.startswith("fsdp"):
            return "fsdp2"
        return "ddp"

    def knobs(self) -> dict:
        return {k: getattr(self, k) for k in (
            "sharding", "offload", "activation_checkpointing", "precision", "optimizer",
            "attention", "micro_batch", "grad_accum", "tp", "seq_len")} | {
            "pp": 1, "dp": self.world_size, "compile": self.compile,
            "global_batch": self.micro_batch * self.grad_accum * self.world_size}


def validate_config(cfg: TrainConfig) -> None:
    """Reject what the bundled trainer cannot run, with a one-line reason."""
    if cfg.tp != 1:
        raise PlanError("tp", "tensor parallelism is not implemented by the bundled trainer (allowed: 1)")
    if cfg.warmup_steps >= cfg.steps:
        raise PlanError("warmup_steps", f"must be < steps ({cfg.steps}) so that some steps are timed")
    if cfg.deepspeed_config:
        if not Path(cfg.deepspeed_config).is_file():
            raise PlanError("deepspeed_config", f"{cfg.deepspeed_config}: file not found")
        try:
            json.loads(Path(cfg.deepspeed_config).read_text())
        except json.JSONDecodeError as e:
            raise PlanError("deepspeed_config", f"not valid JSON: {e}") from None
        return
    b = cfg.backend_name
    if cfg.offload != "none":
        if b == "ddp":
            raise PlanError("offload", "needs sharding zero1/zero2/zero3 or fsdp_* (DDP cannot offload)")
        if b == "deepspeed" and cfg.offload == "optimizer+params" and cfg.sharding != "zero3":
            raise PlanError("offload", "optimizer+params needs sharding zero3 (DeepSpeed offloads params only in stage 3)")
        if b == "fsdp2" and cfg.offload == "optimizer":
            raise PlanError("offload", "FSDP2 offloads params, grads and optimizer together: use optimizer+params")
    if b == "deepspeed" and cfg.precision == "bf16_pure":
        raise PlanError("precision", "bf16_pure is not supported with DeepSpeed here (use bf16, fp16 or fp32)")
    if b == "deepspeed" and cfg.offload != "none" and cfg.optimizer != "adamw":
        raise PlanError("optimizer", "DeepSpeed offload runs DeepSpeedCPUAdam: use adamw")
    if b == "fsdp2" and cfg.optimizer == "adafactor":
        raise PlanError("optimizer", "torch's Adafactor cannot step FSDP2's DTensor shards: use adamw or sgd")
    if cfg.sharding == "fsdp_hybrid" and (cfg.world_size < 2 or cfg.world_size % 2):
        raise PlanError("sharding", f"fsdp_hybrid needs an even world size >= 2 (got {cfg.world_size})")
