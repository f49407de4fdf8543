"""The trainer's result file: what rank 0 writes with `--json OUT`.

This module imports no torch: the tuner reads result files through it (the tuner talks to the
trainer only through the launch interface and this file).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# rank 0 writes "[trainer] step I/N SECONDS s" to stderr after each step: a run killed
# before the first such line was still starting up
STEP_MARK = "[trainer] step"

Status = Literal["ok", "oom", "timeout", "crash", "bad_config"]
# The exit code of `python -m trainer` and `plan train` for each status (one table for both).
EXIT_CODES: dict[str, int] = {"ok": 0, "bad_config": 2, "oom": 3, "timeout": 4, "crash": 1}
assert set(EXIT_CODES) == set(Status.__args__)  # type: ignore[attr-defined]


class MemoryStats(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # exact bytes held by rank 0 (tensors counted once by storage)
    params_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    saved_activations_bytes: int  # bytes saved for backward in one micro batch (saved-tensor hooks)
    # CUDA allocator peaks (None on CPU)
    cuda_peak_allocated_bytes: int | None = None
    cuda_peak_reserved_bytes: int | None = None
    host_peak_rss_bytes: int | None = None
    # the split of optimizer_bytes (= master_params_bytes + optimizer_states_bytes):
    # fp32 master copies (DeepSpeed mixed precision, fp32 partitions) and the optimizer states
    master_params_bytes: int = 0
    optimizer_states_bytes: int = 0
    measured_step: int | None = None  # the step (0-based) whose bytes these are


class RankStats(BaseModel):
    """One rank of a tensor/pipeline-parallel run: where it sits and what it holds."""

    model_config = ConfigDict(extra="forbid")

    rank: int
    pp_rank: int = 0
    dp_rank: int = 0
    tp_rank: int = 0
    stages: list[int] = Field(default_factory=list)  # pipeline (virtual) stages on this rank
    layers: list[int] = Field(default_factory=list)  # transformer blocks of each of those stages
    params_bytes: int = 0
    grads_bytes: int = 0
    optimizer_bytes: int = 0
    # pipeline: peak bytes saved for backward during a whole step (micro batches in flight);
    # tensor parallel only: one micro batch's forward, as in MemoryStats
    saved_activations_bytes: int = 0
    # pipeline timings over the timed steps (medians): stage compute vs the schedule's step
    busy_s: float | None = None
    schedule_s: float | None = None
    bubble_ratio: float | None = None  # (schedule - busy) / busy, the planner's (p-1)/(m*v)
    # fp16: the optimizer steps this rank skipped on an overflow (0-based) and its loss scale after the last step;
    # every rank of a run holds the same (trainer/backends/loss_scale.py)
    skipped_steps: list[int] = Field(default_factory=list)
    loss_scale: float | None = None


class ParallelStats(BaseModel):
    """The tensor/pipeline layout of a run and each rank's measured figures."""

    model_config = ConfigDict(extra="forbid")

    tp: int
    pp: int
    vpp: int
    dp: int
    dp_replicate: int = 1  # fsdp_hybrid: replica groups of dp
    sequence_parallel: bool = False
    schedule: str | None = None  # gpipe, 1f1b, interleaved_1f1b (pipeline only)
    micro_batches: int = 1  # per pipeline step (= grad_accum)
    stage_layers: list[int] = Field(default_factory=list)  # blocks per (virtual) stage, in order
    ranks: list[RankStats] = Field(default_factory=list)
    bubble_ratio: float | None = None  # mean over ranks of RankStats.bubble_ratio


class TrainResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: Status
    error: str | None = None
    config: dict = Field(default_factory=dict)  # resolved knobs, planner vocabulary
    model: dict = Field(default_factory=dict)  # the ModelSpec as a dict
    backend: str = ""
    device: str = ""  # e.g. "cpu", "cuda:NVIDIA H100 80GB HBM3"
    world_size: int = 0
    steps: int = 0
    warmup_steps: int = 0
    step_time_s_median: float | None = None
    step_time_s_mean: float | None = None
    step_time_s_p90: float | None = None
    tokens_per_s: float | None = None
    tokens_per_s_per_device: float | None = None
    model_tflops_per_device: float | None = None
    hw_tflops_per_device: float | None = None
    mfu: float | None = None
    peak_tflops_per_device: float | None = None
    losses: list[float] = Field(default_factory=list)
    memory: MemoryStats | None = None
    wall_s: float | None = None
    peak_source: str | None = None  # "catalog:<id>", or "measured matmul (...)" on an unknown device
    tokens_per_step: int | None = None
    exit_codes: dict[str, int] = Field(default_factory=dict)  # launcher: rank -> exit code
    parallel: ParallelStats | None = None  # tensor/pipeline-parallel runs: layout, per-rank bytes
    # fp16: the optimizer steps skipped on an overflow (0-based; a [trainer] line each on stderr) and the loss scale
    # after each step (None: no loss scaling). DeepSpeed's are read off its engine (trainer/backends/deepspeed_scaling.py),
    # and it skips a step whose gradients are not finite in bf16/fp32 too (ZeRO 1-3, ZeRO-0 bf16): listed, no scales
    skipped_steps: list[int] = Field(default_factory=list)
    loss_scales: list[float] | None = None
