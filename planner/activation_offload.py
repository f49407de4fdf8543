"""Time cost of activation offload (DeepSpeed activation checkpointing with partition_activations
and cpu_checkpointing, as Megatron-DeepSpeed runs it).

Per micro batch, each checkpointed block input (split over the TP group) goes to host memory in
forward and comes back in backward, then the TP group all-gathers it before the block is
recomputed. DeepSpeed copies with `tensor.to(device)` on the compute stream (its transport stream
is commented out: deepspeed/runtime/activation_checkpointing/checkpointing.py), into pageable
host buffers, so the copies are not hidden behind compute.
"""

from __future__ import annotations

import numpy as np

from planner import comm
from planner.layout import Layout
from planner.host_memory import offloaded_checkpoint_bytes
from planner.model import ModelSpec


def activation_offload_s(spec: ModelSpec, layout: Layout, links: comm.Links) -> np.ndarray:
    """Exposed seconds per optimizer step of the checkpoint copies and their TP all-gather."""
    nbytes = offloaded_checkpoint_bytes(spec, layout)  # one direction, per micro batch
    host = 2.0 * nbytes / links.host_Bps  # to host in forward, back in backward
    m_tp = comm.members_per_node(layout.tp, 1, links.gpus_per_node)
    layers = np.where(nbytes > 0, np.ceil(spec.n_layers / layout.pp), 0.0)
    # partition_activations: the TP group all-gathers each block input before its recompute
    gather = comm.Group.of(links, layout.tp, m_tp).allgather_s(nbytes * layout.tp, layers)
    return layout.grad_accum * (host + gather)
