"""Enumerate execution plans for a scenario and evaluate them all in one vectorised pass.

Every blank knob of the scenario is searched (sharding x offload x checkpointing x micro batch x
gradient accumulation x tp x pp x vpp x sequence parallelism); pinned knobs take one value. Each
candidate is either rejected with a reason (invalid combination, or does not fit in GPU memory
or host RAM) or kept; the kept ones are scored by the throughput model and ranked.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from planner import memory
from planner.errors import PlanError
from planner.layout import ATTN, CKPT, OFFLOAD, OPTIM, PREC, SHARD, Layout
from planner.model import ModelSpec
from planner.pinned import check_structure
from planner.scenario import SHARDINGS, Scenario
from planner.settings import Settings
from planner.system import System

MICRO_BATCHES = (1, 2, 4, 8, 16, 32, 64)
GRAD_ACCUMS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# Without a pinned global batch, batches stay at or under this many tokens (LLaMA 2 trained
# with 4M-token batches, Touvron et al. 2023); pin --global-batch to plan a given one.
MAX_DEFAULT_BATCH_TOKENS = 4 * 2**20

# Rejection reasons, in the order they are checked (the first that applies is counted).
REASONS = (
    "tp does not divide n_heads",
    "pp x vpp does not divide n_layers",
    "vpp > 1 needs pp > 1",
    "sequence_parallel needs tp > 1",
    "offload needs ZeRO or FSDP sharding",
    "parameter offload needs ZeRO-3 or FSDP",
    "FSDP offloads parameters with the optimizer (use optimizer+params)",
    "DeepSpeed pipeline parallelism supports ZeRO-1 only",
    "global_batch not divisible by micro_batch x dp",
    "batch above 4M tokens (pin --global-batch to plan a larger one)",
    "pipeline needs grad_accum >= pp micro batches",
    "does not fit in GPU memory",
    "does not fit in host RAM",
)
GPU_OOM = REASONS.index("does not fit in GPU memory")
HOST_OOM = REASONS.index("does not fit in host RAM")
FITS = -1


@dataclass(frozen=True)
class SearchResult:
    layout: Layout  # every candidate
    reason: np.ndarray  # index into REASONS, FITS (-1) for those that fit
    mem: dict[str, np.ndarray]  # memory terms of every candidate

    @property
    def fits(self) -> np.ndarray:
        return self.reason == FITS

    def rejected_counts(self) -> dict[str, int]:
        counts = np.bincount(self.reason[self.reason >= 0], minlength=len(REASONS))
        return {REASONS[i]: int(c) for i, c in enumerate(counts) if c}


def default_precision(system: System) -> str:
    """bf16 where the GPU has it (A100 and later, MI200 and later), fp16 otherwise (V100)."""
    return "bf16" if system.gpu.bf16_tflops else "fp16"


def _divisors(n: int, limit: int | None = None) -> list[int]:
    top = n if limit is None else min(n, limit)
    return [d for d in range(1, top + 1) if n % d == 0]


def _values(pinned, default: list) -> list:
    return [pinned] if pinned is not None else default


def candidates(spec: ModelSpec, system: System, scenario: Scenario, seq_len: int) -> Layout:
    """The cartesian product of every searched knob, as one Layout of arrays."""
    gpus = system.gpus
    _check_pinned(spec, system, scenario)
    check_structure(spec, system, scenario, _global_batch(scenario, seq_len))
    tps = _values(scenario.tp, [d for d in _divisors(system.gpus_per_node) if gpus % d == 0])
    pps = _values(scenario.pp, [d for d in _divisors(spec.n_layers, 64) if gpus % d == 0])
    vpps = _values(scenario.vpp, [1, 2])
    sps = _values(scenario.sequence_parallel, [False, True])
    shape_rows = []
    for tp, pp, vpp, sp in itertools.product(tps, pps, vpps, sps):
        if gpus % (tp * pp):
            continue
        # knob values that only repeat another candidate are skipped unless pinned
        if vpp > 1 and scenario.vpp is None and (pp == 1 or spec.n_layers % (pp * vpp)):
            continue
        if sp and tp == 1 and scenario.sequence_parallel is None:
            continue
        shape_rows.append((tp, pp, vpp, int(sp), gpus // (tp * pp)))
    if not shape_rows:
        raise PlanError("gpus", f"no tp x pp layout divides {gpus} GPUs")

    precision = scenario.precision or default_precision(system)
    global_batch = _global_batch(scenario, seq_len)
    derive_ga = global_batch is not None and scenario.grad_accum is None
    grid = {
        "sharding": [SHARD[v] for v in _values(scenario.sharding, list(SHARDINGS))],
        "offload": [OFFLOAD[v] for v in _values(scenario.offload, list(OFFLOAD))],
        "activation_checkpointing": [CKPT[v] for v in _values(scenario.activation_checkpointing, list(CKPT))],
        "micro_batch": _values(scenario.micro_batch, list(MICRO_BATCHES)),
        "grad_accum": [1] if derive_ga else _values(scenario.grad_accum, list(GRAD_ACCUMS)),
    }
    shapes = np.asarray(shape_rows, dtype=np.int64)
    mesh = np.meshgrid(np.arange(len(shapes)), *[np.asarray(v) for v in grid.values()], indexing="ij")
    flat = [m.reshape(-1) for m in mesh]
    idx, cols = flat[0], dict(zip(grid, flat[1:]))
    n = idx.size
    tp, pp, vpp, sp, dp = (shapes[idx, j] for j in range(5))
    micro = cols["micro_batch"]
    if derive_ga:
        ga = np.maximum(global_batch // (micro * dp), 1)
    else:
        ga = cols["grad_accum"]
    # DeepSpeed-style bucket sizes as Hugging Face's "auto" sets them: hidden^2 elements.
    h2 = spec.hidden * spec.hidden
    return Layout(
        tp=tp, pp=pp, vpp=vpp, dp=dp, sequence_parallel=sp,
        sharding=cols["sharding"], offload=cols["offload"],
        activation_checkpointing=cols["activation_checkpointing"],
        precision=np.full(n, PREC[precision]),
        optimizer=np.full(n, OPTIM[scenario.optimizer or "adamw"]),
        attention=np.full(n, ATTN[scenario.attention or "flash"]),
        micro_batch=micro, grad_accum=ga, seq_len=np.full(n, seq_len),
        reduce_bucket_elems=np.full(n, h2), allgather_bucket_elems=np.full(n, h2),
        stage3_prefetch_elems=np.full(n, int(0.9 * h2)),
        stage3_max_live_params=np.full(n, 1_000_000_000),
    )


def _global_batch(scenario: Scenario, seq_len: int) -> int | None:
    if scenario.global_batch_tokens is not None:
        if scenario.global_batch_tokens % seq_len:
            raise PlanError("global_batch_tokens", f"{scenario.global_batch_tokens} is not a "
                            f"multiple of seq_len ({seq_len})")
        tokens_batch = scenario.global_batch_tokens // seq_len
        if scenario.global_batch is not None and scenario.global_batch != tokens_batch:
            raise PlanError("global_batch", f"{scenario.global_batch} sequences disagrees with "
                            f"global_batch_tokens ({tokens_batch} sequences)")
        return tokens_batch
    return scenario.global_batch


def _check_pinned(spec: ModelSpec, system: System, scenario: Scenario) -> None:
    """Pinned knobs that can never work are an error, not a row of rejections."""
    tp, pp = scenario.tp or 1, scenario.pp or 1
    if system.gpus % (tp * pp):
        raise PlanError("gpus", f"{system.gpus} is not divisible by tp x pp = {tp} x {pp} = {tp * pp}")
    if scenario.tp and scenario.tp > system.gpus_per_node:
        raise PlanError("tp", f"{scenario.tp} exceeds gpus_per_node ({system.gpus_per_node}); "
                        "tensor parallelism stays inside a node")
    if scenario.precision in ("bf16", "bf16_pure") and not system.gpu.bf16_tflops:
        raise PlanError("precision", f"{system.gpu.id} has no bf16 support (allowed: fp16, fp32)")
    gb, mb, ga = scenario.global_batch, scenario.micro_batch, scenario.grad_accum
    if scenario.tp and scenario.pp and gb and mb and ga:
        dp = system.gpus // (tp * pp)
        if mb * ga * dp != gb:
            raise PlanError("global_batch", f"{gb} != micro_batch x grad_accum x dp = "
                            f"{mb} x {ga} x {dp} = {mb * ga * dp}")


def reject_reasons(spec: ModelSpec, lay: Layout, scenario: Scenario, seq_len: int) -> np.ndarray:
    """Index of the first structural reason that rules each candidate out (FITS if none)."""
    s, off = lay.sharding, lay.offload
    global_batch = _global_batch(scenario, seq_len)
    batch = lay.micro_batch * lay.grad_accum * lay.dp
    if global_batch is not None:
        batch_bad = batch != global_batch
        too_big = np.zeros(len(lay), dtype=bool)
    else:
        batch_bad = np.zeros(len(lay), dtype=bool)
        too_big = (batch * seq_len > MAX_DEFAULT_BATCH_TOKENS) & (lay.grad_accum > 1)
    checks = [
        spec.n_heads % lay.tp != 0,
        spec.n_layers % (lay.pp * lay.vpp) != 0,
        (lay.vpp > 1) & (lay.pp == 1),
        (lay.sequence_parallel == 1) & (lay.tp == 1),
        (off != OFFLOAD["none"]) & (s == SHARD["none"]),
        (off == OFFLOAD["optimizer+params"]) & ((s == SHARD["zero1"]) | (s == SHARD["zero2"])),
        (off == OFFLOAD["optimizer"]) & lay.is_fsdp,
        (lay.pp > 1) & ((s == SHARD["zero2"]) | (s == SHARD["zero3"])),
        batch_bad,
        too_big,
        (lay.pp > 1) & (lay.grad_accum < lay.pp),
    ]
    reason = np.full(len(lay), FITS, dtype=np.int64)
    for i, bad in reversed(list(enumerate(checks))):
        reason = np.where(bad, i, reason)
    return reason


def search(spec: ModelSpec, system: System, scenario: Scenario, settings: Settings, seq_len: int) -> SearchResult:
    lay = candidates(spec, system, scenario, seq_len)
    reason = reject_reasons(spec, lay, scenario, seq_len)
    mem = memory.memory_arrays(spec, lay, system, settings)
    structural_ok = reason == FITS
    reason = np.where(structural_ok & (mem["total_bytes"] > mem["capacity_bytes"]), GPU_OOM, reason)
    host_bad = mem["host_bytes_per_node"] > mem["host_capacity_bytes_per_node"]
    reason = np.where((reason == FITS) & host_bad, HOST_OOM, reason)
    return SearchResult(layout=lay, reason=reason, mem=mem)


def simplicity(lay: Layout) -> np.ndarray:
    """Lower is simpler: less sharding, no offload, no recompute, smaller tp/pp, bigger micro batch."""
    return (
        lay.sharding * 1000
        + lay.offload * 300
        + lay.activation_checkpointing * 100
        + (lay.tp * lay.pp * lay.vpp) * 10
        + lay.sequence_parallel * 5
        - np.log2(lay.micro_batch)
        + 0.5 * np.log2(lay.grad_accum)
    )
