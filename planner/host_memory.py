"""Host memory of a plan (pure, vectorised): what offloaded states, offloaded activation checkpoints
and model construction pin in host RAM per rank and per node (planner/memory.py adds it to the
memory breakdown; the `host_ram` rule checks it)."""

from __future__ import annotations

import numpy as np

from planner.layout import CKPT, OFFLOAD, SHARD, Layout
from planner.memory import (GIB, compute_dtype_bytes, optimizer_state_bytes_per_param, params_per_gpu,
                            shard_degree, stage_layers)
from planner.model import ModelSpec
from planner.settings import Settings
from planner.system import System


def host_offload_bytes_per_rank(spec: ModelSpec, layout: Layout, system: System) -> np.ndarray:
    """Host bytes one rank pins for offloaded states (ZeRO-Offload, Ren et al. 2021).

    Optimizer offload: fp32 master + optimizer states + fp32 grads (DeepSpeed's 16 B of the
    12+4); parameter offload adds the 16-bit parameter partition.
    """
    p = params_per_gpu(spec, layout)
    n = shard_degree(layout, system)
    per_param = optimizer_state_bytes_per_param(spec, layout) + 4.0 + 4.0
    opt = np.where(layout.offload != OFFLOAD["none"], per_param * p / n, 0.0)
    params = np.where(layout.offload == OFFLOAD["optimizer+params"],
                      compute_dtype_bytes(layout) * p / n, 0.0)
    return opt + params


def offloaded_checkpoint_bytes(spec: ModelSpec, layout: Layout) -> np.ndarray:
    """Bytes of checkpointed block inputs one rank keeps in host memory per micro batch and
    stage (DeepSpeed activation checkpointing with partition_activations and cpu_checkpointing:
    each block input s*b*h split over the TP group; deepspeed/runtime/activation_checkpointing/
    checkpointing.py); 0 without activation offload."""
    s, b = layout.seq_len / layout.cp, layout.micro_batch
    per_layer = (s * b).astype(np.float64) * spec.hidden * compute_dtype_bytes(layout) / layout.tp
    frac = np.where(layout.activation_checkpointing == CKPT["blocks"], layout.checkpoint_fraction, 1.0)
    heavy, _ = stage_layers(spec, layout)
    return (layout.activation_offload == 1) * frac * heavy * per_layer


def host_bytes_per_node(spec: ModelSpec, layout: Layout, system: System, settings: Settings) -> np.ndarray:
    """Peak host RAM per node: model construction, or offloaded states, plus per-rank overhead.

    Without ZeRO-3's `zero.Init` (or FSDP's meta-device init) every rank first builds its whole
    (tp/pp slice of the) model in fp32 in host memory: seed 002's ZeRO-2 run of 52B on 64 V100
    was killed by cgroups needing > 40 GB host RAM per GPU, with or without offload.
    DeepSpeed's estimators count the same: `4 * num_gpus_per_node * params`.
    """
    ranks = system.gpus_per_node
    p = params_per_gpu(spec, layout)
    s = layout.sharding
    zero_init = s == SHARD["zero3"]
    fsdp = layout.is_fsdp
    init = np.select([zero_init, fsdp], [4.0 * p / shard_degree(layout, system), 4.0 * p],
                     default=4.0 * p * ranks)
    in_flight = np.where(layout.pp > 1, np.minimum(layout.pp, layout.grad_accum), 1)
    checkpoints = offloaded_checkpoint_bytes(spec, layout) * in_flight
    steady = (host_offload_bytes_per_rank(spec, layout, system) + checkpoints) * ranks
    return np.maximum(init, steady) + settings.host_overhead_gib_per_rank * GIB * ranks


def with_host(out: dict, moe_spec: ModelSpec, spec: ModelSpec, layout: Layout, system: System,
              settings: Settings) -> dict:
    """`out` (planner/memory.py's breakdown) with host RAM per node and its capacity added; `moe_spec` the
    whole model where `spec` is an MoE model's dense view (planner/moe_memory.py adds the experts' part)."""
    from planner import moe_memory

    out["host_bytes_per_node"] = host_bytes_per_node(spec, layout, system, settings)
    if moe_spec is not spec:
        out["host_bytes_per_node"] = out["host_bytes_per_node"] + moe_memory.host_bytes_per_node(
            moe_spec, spec, layout, system)
    out["host_capacity_bytes_per_node"] = np.full(np.shape(out["capacity_bytes"]), system.host_ram_gib * GIB)
    return out
