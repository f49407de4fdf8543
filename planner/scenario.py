"""The execution-plan vocabulary: knobs, `Scenario` (pinned knobs, blanks = search),
`ExecutionPlan` (every knob resolved) and `Estimate` (a plan with its breakdowns).

The knob names here are the CLI flag names, the JSON/CSV column names, the trainer's flags and
the tuner's Optuna parameter names: one vocabulary everywhere.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.units import Count, IntCount

Sharding = Literal[
    "none", "zero1", "zero2", "zero3", "fsdp_full_shard", "fsdp_shard_grad_op", "fsdp_hybrid"
]
Offload = Literal["none", "optimizer", "optimizer+params"]
# selective: Megatron's (recompute the attention core, Korthikanti et al. 2022 sec. 5);
# op: per-op selective AC (torchtitan `selective_ac_option="op"`: every other matmul output saved);
# blocks: a fraction `checkpoint_fraction` of whole blocks fully recomputed (torchtitan's
# `selective_ac_option=k`, fms-fsdp's `selective_checkpointing`); full: every block.
Checkpointing = Literal["none", "selective", "op", "blocks", "full"]
# fp8: the block GEMMs in fp8 with bf16 everywhere else (Transformer Engine, torchao float8;
# Micikevicius et al. 2022 "FP8 formats for deep learning").
Precision = Literal["fp32", "fp16", "bf16", "bf16_pure", "fp8"]
Optimizer = Literal["adamw", "adafactor", "sgd"]
Attention = Literal["flash", "eager"]
# The software stack that runs the plan: its efficiency profile lives in catalog/stacks/<id>.toml.
Stack = Literal["megatron", "megatron_deepspeed", "hf", "fsdp", "torchtitan", "bundled"]

SHARDINGS: tuple[str, ...] = Sharding.__args__  # type: ignore[attr-defined]
OFFLOADS: tuple[str, ...] = Offload.__args__  # type: ignore[attr-defined]
CHECKPOINTINGS: tuple[str, ...] = Checkpointing.__args__  # type: ignore[attr-defined]
PRECISIONS: tuple[str, ...] = Precision.__args__  # type: ignore[attr-defined]
OPTIMIZERS: tuple[str, ...] = Optimizer.__args__  # type: ignore[attr-defined]
ATTENTIONS: tuple[str, ...] = Attention.__args__  # type: ignore[attr-defined]
STACKS: tuple[str, ...] = Stack.__args__  # type: ignore[attr-defined]

# The knobs of an execution plan, in the order the output shows them.
PLAN_KNOBS: tuple[str, ...] = (
    "stack", "tp", "pp", "vpp", "cp", "dp", "sequence_parallel", "sharding", "offload",
    "activation_checkpointing", "checkpoint_fraction", "precision", "optimizer", "attention",
    "compile", "async_tp", "micro_batch", "grad_accum", "global_batch",
)


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ExecutionPlan(Frozen):
    """Every knob resolved: how one training step is laid out on the GPUs."""

    stack: Stack = "megatron"
    tp: int = Field(default=1, gt=0)
    pp: int = Field(default=1, gt=0)  # need not divide n_layers: the heaviest stage sets the pace
    vpp: int = Field(default=1, gt=0)  # virtual pipeline stages per GPU (interleaved 1F1B)
    cp: int = Field(default=1, gt=0)  # context parallelism: the sequence split over cp GPUs (ring attention)
    dp: int = Field(default=1, gt=0)
    sequence_parallel: bool = False
    sharding: Sharding = "none"
    offload: Offload = "none"
    activation_checkpointing: Checkpointing = "none"
    checkpoint_fraction: float = Field(default=1.0, gt=0, le=1)  # share of blocks recomputed ("blocks")
    precision: Precision = "bf16"
    optimizer: Optimizer = "adamw"
    attention: Attention = "flash"
    compile: bool = False  # torch.compile: fused element-wise kernels
    async_tp: bool = False  # TP collectives overlapped with the GEMMs (async TP / tp-comm-overlap)
    micro_batch: int = Field(default=1, gt=0)
    grad_accum: int = Field(default=1, gt=0)
    seq_len: int = Field(default=2048, gt=0)
    # DeepSpeed / FSDP communication buffers (elements), chosen by the planner.
    reduce_bucket_elems: IntCount = Field(default=500_000_000, gt=0)
    allgather_bucket_elems: IntCount = Field(default=500_000_000, gt=0)
    stage3_prefetch_elems: IntCount = Field(default=50_000_000, ge=0)
    stage3_max_live_params: IntCount = Field(default=1_000_000_000, ge=0)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step."""
        return self.micro_batch * self.grad_accum * self.dp


class MemoryBreakdown(Frozen):
    """Bytes per GPU (and host bytes per node) of one plan, each term from planner/memory.py."""

    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    comm_buffers_bytes: float
    runtime_bytes: float
    fragmentation_bytes: float
    total_bytes: float
    capacity_bytes: float
    host_bytes_per_node: float
    host_capacity_bytes_per_node: float

    @property
    def headroom_bytes(self) -> float:
        return self.capacity_bytes - self.total_bytes


class StepTimeBreakdown(Frozen):
    """Seconds per optimizer step and its parts (filled by planner/throughput.py)."""

    step_time_s: float
    compute_s: float
    comm_exposed_s: float
    bubble_s: float
    offload_s: float
    bottleneck: str


class Performance(Frozen):
    """Speed and time-to-train of one plan (filled by planner/throughput.py)."""

    tokens_per_s: float
    tokens_per_s_per_gpu: float
    samples_per_s: float
    model_tflops_per_gpu: float
    hw_tflops_per_gpu: float
    mfu: float
    hfu: float
    network_gbps_needed: float
    # the stack profile's cross-validated error of tokens/s (catalog/stacks/<stack>.toml)
    expected_error_pct: float | None = None
    days: float | None = None
    gpu_hours: float | None = None
    cost: float | None = None


class Estimate(Frozen):
    """One plan and what the analytic model says of it."""

    plan: ExecutionPlan
    memory: MemoryBreakdown
    time: StepTimeBreakdown | None = None
    performance: Performance | None = None
    fits: bool
    reason: str = ""


class Scenario(Frozen):
    """One row of the scenario interface: the model, the system and the pinned knobs.

    `None` (an empty cell) means "the planner chooses". Field names are the public column
    names of `plan estimate --scenarios` and the CLI flag names.
    """

    # model: a preset id, a bare size ("7b"), or a path to a Hugging Face config.json ...
    model: str | None = None
    # ... or the architecture columns
    n_layers: int | None = Field(default=None, gt=0)
    hidden: int | None = Field(default=None, gt=0)
    n_heads: int | None = Field(default=None, gt=0)
    n_kv_heads: int | None = Field(default=None, gt=0)
    ffn_hidden: int | None = Field(default=None, gt=0)
    vocab: int | None = Field(default=None, gt=0)
    seq_len: int | None = Field(default=None, gt=0)
    # system
    gpu: str | None = None
    gpus: int | None = Field(default=None, gt=0, le=1_000_000)
    gpus_per_node: int | None = Field(default=None, gt=0, le=1024)
    cluster: str | None = None
    internode_gbps: float | None = Field(default=None, gt=0)
    # execution-plan knobs
    stack: Stack | None = None
    tp: int | None = Field(default=None, gt=0, le=1024)
    pp: int | None = Field(default=None, gt=0, le=10_000)
    vpp: int | None = Field(default=None, gt=0, le=1000)
    cp: int | None = Field(default=None, gt=0, le=1024)
    sequence_parallel: bool | None = None
    sharding: Sharding | None = None
    offload: Offload | None = None
    activation_checkpointing: Checkpointing | None = None
    checkpoint_fraction: float | None = Field(default=None, gt=0, le=1)
    precision: Precision | None = None
    optimizer: Optimizer | None = None
    attention: Attention | None = None
    compile: bool | None = None
    async_tp: bool | None = None
    micro_batch: int | None = Field(default=None, gt=0, le=1_000_000)
    grad_accum: int | None = Field(default=None, gt=0, le=1_000_000)
    global_batch: int | None = Field(default=None, gt=0, le=1_000_000_000)  # sequences per optimizer step
    global_batch_tokens: IntCount | None = Field(default=None, gt=0)
    # what to train, and what it costs
    tokens: Count | None = Field(default=None, gt=0)
    price_per_gpu_hour: float | None = Field(default=None, ge=0)
