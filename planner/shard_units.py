"""Units whose parameters a sharding wrapper gathers one by one: the count `unit_overhead_us` multiplies.

FSDP (FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD) wraps each block as a unit with its own flat parameter,
all-gathered before the unit's forward (and again before its backward unless SHARD_GRAD_OP keeps it) and
reduce-scattered after its backward, each through hooks and stream waits on the host (Zhao et al., "PyTorch
FSDP: Experiences on Scaling Fully Sharded Data Parallel", VLDB 2023, sec. 3.2-4); DeepSpeed ZeRO-3 fetches and
releases the parameters of each submodule from forward/backward hooks (PartitionedParameterCoordinator,
deepspeed/runtime/zero/partitioned_param_coordinator.py). DDP and ZeRO-1/2 keep whole parameters: no such
per-unit work (their gradient reduction is bucketed, planner/grad_buckets.py). A block is one unit (the
auto-wrap policy of every FSDP stack in the catalog: transformer block; ZeRO-3's hooks per submodule are a
fixed number per block, which the fitted microseconds absorb). torchtitan with expert parallelism wraps each MoE
layer's routed experts as a unit of their own on the expert mesh, before the block (`expert_units`).
"""

from __future__ import annotations

import numpy as np

from planner.layout import SHARD, STACK, Layout
from planner.model import ModelSpec

# shardings whose parameters are gathered unit by unit
GATHERED_PER_UNIT = (SHARD["zero3"], SHARD["fsdp_full_shard"], SHARD["fsdp_shard_grad_op"], SHARD["fsdp_hybrid"])


def gathers_per_unit(layout: Layout) -> np.ndarray:
    """1 where the plan's parameters are sharded and gathered per wrapped unit, else 0."""
    return np.isin(np.asarray(layout.sharding), GATHERED_PER_UNIT).astype(np.float64)


def raw_s(layout: Layout, layers) -> np.ndarray:
    """Per micro batch: units of the busiest stage x 1e-6 (x unit_overhead_us gives seconds), 0 unsharded."""
    return gathers_per_unit(layout) * np.asarray(layers, dtype=np.float64) * 1e-6


def unit_params(spec: ModelSpec, layout: Layout) -> np.ndarray:
    """Parameters gathered at once, per tp rank: ZeRO-3 fetches one module's own parameters at a
    time (an embedding or a linear), FSDP one wrapped unit (a block, or the root's embedding)."""
    zero3 = layout.sharding == SHARD["zero3"]
    return np.where(zero3, spec.largest_module_params, spec.largest_layer_params) / layout.tp


def expert_units(layout: Layout, moe_layers) -> np.ndarray:
    """FSDP units beyond the blocks on the busiest stage: torchtitan with ep > 1 shards each MoE layer's routed
    experts as their own unit over the expert mesh edp_mesh (efsdp = dp_shard x cp x tp / (etp x ep): planner/
    moe_parallel.py `edp`), then the block with the router and shared experts over the dp mesh
    (torchtitan/models/llama4/infra/parallelize.py apply_fsdp: fully_shard(transformer_block.moe.experts,
    mesh=edp_mesh) before fully_shard(transformer_block)): two gathers per MoE layer. 0 elsewhere."""
    on = (np.asarray(layout.stack) == STACK["torchtitan"]) & (np.asarray(layout.ep) > 1)
    return gathers_per_unit(layout) * on * np.asarray(moe_layers, dtype=np.float64)
