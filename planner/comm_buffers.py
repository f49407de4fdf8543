"""Communication buffers a plan holds on the GPU beside its model states (planner/memory.py's
`comm_buffers_bytes` term), per framework."""

from __future__ import annotations

import numpy as np

from planner import main_grads
from planner.layout import SHARD, Layout
from planner.model import ModelSpec
from planner.shard_units import unit_params as _unit_params


def comm_buffer_bytes(spec: ModelSpec, layout: Layout, main_fp32=False, core_buckets=0.0) -> np.ndarray:
    """Communication buffers.

    - DDP: 2 x 25 MiB staging (bucket_cap_mb=25); the buckets are views of the grads
      (gradient_as_bucket_view) or, where the stack keeps torch's default, a second copy of them:
      `ddp_bucket_copy_bytes`, added by planner/memory.py.
    - ZeRO-1/2 with overlap_comm: 4.5 x (reduce + allgather bucket) x 2 B (DeepSpeed config
      docs: "overlap_comm uses 4.5x the allgather_bucket_size and reduce_bucket_size").
    - ZeRO-3: reduce bucket (2 B x 2 for double buffering) + prefetch bucket (2 B).
    - FSDP: one unit's fp32 reduce-scatter output is counted in grads; 2 x unit staging.
    - none where the stack's fp32 main-gradient buffer is the bucket store (`main_fp32`,
      planner/main_grads.py: its buckets are views of it, reduce-scattered in place), nor where the
      stack is Megatron-Core's DDP in any gradient dtype (`core_buckets`: main_grads.core_bucket_views).
    """
    s = layout.sharding
    ddp = np.full(np.shape(s), 2 * 25 * 2**20, dtype=np.float64)
    zero12 = 4.5 * 2 * (layout.reduce_bucket_elems + layout.allgather_bucket_elems)
    zero3 = 2 * 2 * layout.reduce_bucket_elems + 2 * layout.stage3_prefetch_elems
    fsdp = 2 * 2 * _unit_params(spec, layout) * np.ones(np.shape(s))
    out = np.select(
        [s == SHARD["none"], (s == SHARD["zero1"]) | (s == SHARD["zero2"]), s == SHARD["zero3"]],
        [ddp, zero12, zero3],
        default=fsdp,
    ).astype(np.float64)
    views = main_grads.buffer_on(layout, main_fp32) | main_grads.core_bucket_views(layout, core_buckets)
    return np.where(views, 0.0, out)


def ddp_bucket_copy_bytes(layout: Layout, grads, bucket_view, main_fp32=False, core_buckets=0.0) -> np.ndarray:
    """torch DDP's flat bucket copy of every gradient: `grads` (memory.py grads_bytes, the gradients in the dtype DDP
    reduces: fp32 under autocast) where a plan runs torch DDP with gradient_as_bucket_view=False (its stack profile's
    `bucket_view` false): sharding none over dp > 1 replicas, neither an fp32 main-gradient buffer nor Megatron-Core's
    DDP (their buckets are views: main_grads.buffer_on, core_bucket_views), nor context parallelism (hf runs it as
    DeepSpeed's Ulysses, torchtitan under FSDP, Megatron with its own DDP: no torch DDP). torch/csrc/distributed/c10d/reducer.cpp
    initialize_buckets allocates each bucket's flat `gradients` tensor, and without the view option copies each grad
    into it (bucket_views_in) and back (bucket_views_out); "the saved memory size will be equal to the total gradients
    size" (torch/nn/parallel/distributed.py, gradient_as_bucket_view)."""
    views = main_grads.buffer_on(layout, main_fp32) | main_grads.core_bucket_views(layout, core_buckets)
    plain = (layout.sharding == SHARD["none"]) & (layout.dp > 1) & (layout.cp == 1)
    copy = plain & ~(np.asarray(bucket_view) > 0) & ~views
    return np.where(copy, np.asarray(grads, dtype=np.float64), 0.0)
