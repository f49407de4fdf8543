"""`TrainConfig`: one trainer run, in the planner's knob vocabulary. Imports no torch.

`validate_config` turns unsupported combinations into a `PlanError` naming the field (the
launcher reports those as status `bad_config`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.errors import PlanError
from planner.model import ModelSpec
from planner.scenario import Attention, Checkpointing, Offload, Optimizer, Precision, Sharding

PipelineSchedule = Literal["1f1b", "gpipe", "interleaved_1f1b"]
PP_SCHEDULES: tuple[str, ...] = PipelineSchedule.__args__  # type: ignore[attr-defined]


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
    pp: int = Field(default=1, gt=0)
    vpp: int = Field(default=1, gt=0)  # virtual pipeline stages per rank (interleaved 1F1B)
    pp_schedule: PipelineSchedule | None = None  # None: see `schedule`
    seq_len: int = Field(default=64, gt=0)
    deepspeed_config: str | None = None  # a DeepSpeed JSON file, used as is
    fsdp_config: str | None = None  # an FSDP settings JSON file (planner/exports/fsdp_settings.py), used as is
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
    def dp(self) -> int:
        """Data-parallel replicas: the ranks left after tensor and pipeline parallelism."""
        return max(1, self.world_size // (self.tp * self.pp))

    @property
    def schedule(self) -> str:
        """The pipeline schedule run: the one asked for, else interleaved 1F1B with virtual stages,
        else 1F1B, or GPipe with fewer micro batches than stages (torch's 1F1B needs m >= pp;
        with m < pp both run all forwards, then all backwards)."""
        if self.pp_schedule:
            return self.pp_schedule
        if self.vpp > 1:
            return "interleaved_1f1b"
        return "1f1b" if self.grad_accum >= self.pp else "gpipe"

    @property
    def backend_name(self) -> str:
        if self.pp > 1:
            return "pipeline"
        if self.tp > 1:
            return "tensor_parallel"
        if self.deepspeed_config or self.sharding.startswith("zero"):
            return "deepspeed"
        if self.fsdp_config or self.sharding.startswith("fsdp"):
            return "fsdp2"
        return "ddp"

    def knobs(self) -> dict:
        return {k: getattr(self, k) for k in (
            "sharding", "offload", "activation_checkpointing", "precision", "optimizer",
            "attention", "micro_batch", "grad_accum", "tp", "pp", "vpp", "seq_len")} | {
            "dp": self.dp, "compile": self.compile, "sequence_parallel": self.tp > 1,
            "global_batch": self.micro_batch * self.grad_accum * self.dp}


def validate_config(cfg: TrainConfig) -> None:
    """Reject what the bundled trainer cannot run, with a one-line reason."""
    if cfg.warmup_steps >= cfg.steps:
        raise PlanError("warmup_steps", f"must be < steps ({cfg.steps}) so that some steps are timed")
    validate_parallel(cfg)
    for field in ("deepspeed_config", "fsdp_config"):
        path = getattr(cfg, field)
        if not path:
            continue
        if not Path(path).is_file():
            raise PlanError(field, f"{path}: file not found")
        try:
            json.loads(Path(path).read_text())
        except json.JSONDecodeError as e:
            raise PlanError(field, f"not valid JSON: {e}") from None
        if cfg.deepspeed_config and cfg.fsdp_config:
            raise PlanError("fsdp_config", "give a DeepSpeed config or an FSDP config, not both")
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
    if cfg.sharding == "fsdp_hybrid" and (cfg.dp < 2 or cfg.dp % 2):
        raise PlanError("sharding", f"fsdp_hybrid needs an even data-parallel size >= 2 (got {cfg.dp})")


def validate_parallel(cfg: TrainConfig) -> None:
    """tp/pp/vpp combinations the tensor- and pipeline-parallel backends run (model-free checks)."""
    if cfg.world_size % (cfg.tp * cfg.pp):
        raise PlanError("tp" if cfg.tp > 1 else "pp",
                        f"tp x pp ({cfg.tp} x {cfg.pp}) must divide the world size ({cfg.world_size})")
    if cfg.vpp > 1 and cfg.pp == 1:
        raise PlanError("vpp", f"{cfg.vpp} virtual stages need pp > 1")
    if cfg.pp_schedule and cfg.pp == 1:
        raise PlanError("pp_schedule", "needs pp > 1")
    if cfg.pp_schedule in ("1f1b", "gpipe") and cfg.vpp > 1:
        raise PlanError("pp_schedule", f"{cfg.pp_schedule} runs one stage per rank: use interleaved_1f1b with vpp > 1")
    if cfg.pp_schedule == "interleaved_1f1b" and cfg.vpp == 1:
        raise PlanError("pp_schedule", "interleaved_1f1b needs vpp > 1 virtual stages per rank")
    if cfg.pp_schedule == "1f1b" and cfg.grad_accum < cfg.pp:
        raise PlanError("grad_accum", f"1f1b needs at least pp ({cfg.pp}) micro batches per step (got {cfg.grad_accum})")
    if cfg.tp == 1 and cfg.pp == 1:
        return
    what = f"tp={cfg.tp}, pp={cfg.pp}"
    if cfg.deepspeed_config or cfg.sharding.startswith("zero"):
        raise PlanError("sharding", f"{what} composes with FSDP2 or none, not DeepSpeed ZeRO (use fsdp_* or none)")
    if cfg.tp > 1 and cfg.sharding == "none" and cfg.dp > 1:
        raise PlanError("sharding", f"{what} with dp={cfg.dp} needs fsdp_* (DDP cannot replicate tensor-parallel DTensors)")
    if cfg.offload != "none":
        raise PlanError("offload", f"not supported with {what} (allowed: none)")
    if cfg.precision == "fp16":
        raise PlanError("precision", f"fp16 loss scaling is not wired through {what}: use bf16, bf16_pure or fp32")
    if cfg.optimizer == "adafactor":
        raise PlanError("optimizer", "torch's Adafactor cannot step DTensor shards: use adamw or sgd")
    if cfg.compile:
        raise PlanError("compile", f"not supported with {what}")


def validate_layout(cfg: TrainConfig, spec: ModelSpec) -> None:
    """tp/pp/vpp against the model's shapes: tp must split heads and matrices, pp the layers."""
    t = cfg.tp
    if t > 1:
        sizes = {"n_heads": spec.n_heads, "kv_heads": spec.kv_heads, "hidden": spec.hidden, "ffn": spec.ffn,
                 "vocab_padded": spec.vocab_padded, "seq_len": cfg.seq_len}
        if spec.position == "learned":
            sizes["max_positions"] = spec.max_positions
        for name, n in sizes.items():
            if n % t:
                raise PlanError("tp", f"{t} does not divide the model's {name} ({n})")
    layers = spec.n_layers
    if cfg.pp > layers:
        raise PlanError("pp", f"{cfg.pp} stages exceed the model's {layers} layers (allowed: 1..{layers})")
    if cfg.vpp > 1 and (layers % cfg.pp or (layers // cfg.pp) % cfg.vpp):
        raise PlanError("vpp", f"{cfg.vpp} does not divide the layers of each pipeline stage "
                               f"({layers} layers / pp {cfg.pp}); allowed: vpp with n_layers % (pp x vpp) == 0")
