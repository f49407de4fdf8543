"""ZeRO++ (Wang et al. 2023, "ZeRO++: Extremely Efficient Collective Communication for Giant Model
Training", arXiv 2306.10209): DeepSpeed ZeRO-3 with three lighter collectives, each its own knob.

Plain ZeRO-3 moves 3M per micro batch (M = the model's 16-bit bytes): forward all-gather M,
backward all-gather M, gradient reduce-scatter M, all across nodes once dp spans nodes. ZeRO++
(paper sec. 3-4; DeepSpeed runtime/zero/partition_parameters.py, partitioned_param_coordinator.py,
stage3.py, runtime/comm/coalesced_collectives.py as installed, 0.19):
- qwZ (`zeropp_qwz`, DeepSpeed `zero_quantized_weights`): every weight all-gather carries int8
  (block quantization: one fp32 scale per block of at most 8000 elements, `CUDAQuantizer`),
  half the 16-bit bytes: forward M -> 0.5M. Each rank quantizes its shard, every rank
  dequantizes the gathered weights: memory-bound passes.
- hpZ (`zeropp_hpz_partition_size` = h > 1, `zero_hpz_partition_size`): after the first forward
  gather each rank keeps a secondary 16-bit copy of the weights partitioned over h consecutive
  ranks (a node), M/h bytes more per GPU; every later gather until the optimizer step
  (`invalidate_secondary_tensor` in stage3.py `_post_step`) reads it over those h ranks: the
  backward gathers, the recompute gathers and the forward gathers of micro batches 2..ga stay
  on NVLink: backward M -> 0 across nodes.
- qgZ (`zeropp_qgz`, `zero_quantized_gradients`): the gradient reduce-scatter becomes an int4
  all-to-all inside the node, a reduction, and an int4 all-to-all across nodes of the node's
  1/L share (`all_to_all_quant_reduce`; DeepSpeed falls back to the reduce-scatter inside one
  node): across nodes M -> 0.25M, plus quantize / reduce / dequantize passes.
All three: 3M -> 0.75M across nodes (paper sec. 4). DeepSpeed builds the hpZ and qgZ groups
from consecutive world ranks (utils/groups.py `_create_zero_param_parallel_group`, the
all-to-all groups over `device_count()` ranks): they assume pure data parallelism (tp 1);
planner/rules.py says so. The quantization kernels run in the fetch / reduction path and
hide behind compute as the collectives do (zero3.fetch_exposed).
"""

from __future__ import annotations

import numpy as np

from planner import comm, zero3
from planner.model import ModelSpec

QWZ_BITS = 8
QGZ_BITS = 4
# One fp32 scale per quantization block; DeepSpeed's blocks hold up to 8000 weights
# (CUDAQuantizer.target_group_size) and one row of a gradient matrix for qgZ: 4096 bounds both.
SCALE_BYTES_PER_ELEM = 4.0 / 4096
QWZ_WIRE_BYTES = QWZ_BITS / 8 + SCALE_BYTES_PER_ELEM
QGZ_WIRE_BYTES = QGZ_BITS / 8 + SCALE_BYTES_PER_ELEM
# The stacks that run ZeRO++: DeepSpeed under its own engine (hf = transformers + DeepSpeed,
# Megatron-DeepSpeed, the bundled trainer's DeepSpeed backend, a generic DeepSpeed code base).
DEEPSPEED_STACKS = ("megatron_deepspeed", "hf", "bundled", "generic")


OFF = {"zeropp_qwz": False, "zeropp_hpz_partition_size": 1, "zeropp_qgz": False}
KNOBS = tuple(OFF)


def pinned(scenario) -> dict | None:
    """The scenario's ZeRO++ knobs where it pins any (the others off), None where it pins none."""
    given = {k: getattr(scenario, k) for k in KNOBS if getattr(scenario, k, None) is not None}
    return OFF | given if given else None


def knobs_on(knobs: dict) -> bool:
    """Whether a dict of ZeRO++ knob values turns any feature on."""
    return bool(knobs.get("zeropp_qwz")) or bool(knobs.get("zeropp_qgz")) \
        or (knobs.get("zeropp_hpz_partition_size") or 1) > 1


def with_searched(layout, gpus_per_node: int):
    """The candidates plus, for each plain ZeRO-3 candidate that ZeRO++ can help (pure data
    parallelism spanning whole nodes, no parameter offload), its copy with all three features
    and hpZ over one node: the DeepSpeed tutorial's configuration (zero_hpz_partition_size =
    GPUs per node)."""
    from dataclasses import fields

    from planner.layout import OFFLOAD, SHARD

    dp = np.asarray(layout.dp)
    ok = ((layout.sharding == SHARD["zero3"]) & (layout.tp == 1) & (layout.cp == 1) & (dp > gpus_per_node)
          & (dp % gpus_per_node == 0) & (layout.offload != OFFLOAD["optimizer+params"]))
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return layout
    extra = layout.take(idx)
    on = {"zeropp_qwz": 1, "zeropp_hpz_partition_size": gpus_per_node, "zeropp_qgz": 1}
    cols = {f.name: np.concatenate([getattr(layout, f.name),
                                    np.full(idx.size, on[f.name]) if f.name in on else getattr(extra, f.name)])
            for f in fields(layout)}
    return type(layout)(**cols)


def any_on(layout) -> np.ndarray:
    return (np.asarray(layout.zeropp_qwz) == 1) | (np.asarray(layout.zeropp_qgz) == 1) \
        | (np.asarray(layout.zeropp_hpz_partition_size) > 1)


def secondary_group(links: comm.Links, layout) -> comm.Group:
    """The hpZ group: `zeropp_hpz_partition_size` consecutive data-parallel ranks (a node when
    it equals gpus_per_node); a group of one where hpZ is off."""
    h = np.asarray(layout.zeropp_hpz_partition_size, dtype=np.int64)
    return comm.Group.of(links, h, comm.members_per_node(h, layout.tp, links.gpus_per_node))


def _qwz_kernel_bytes(elems, gather_bytes, group) -> np.ndarray:
    """HBM bytes of qwZ for `elems` gathered weights: the sender quantizes its 1/n share (read
    16-bit, write int8), every rank dequantizes the gathered int8 back (read 1, write 16-bit)."""
    per = 1.0 + gather_bytes
    return elems * per * (1.0 + 1.0 / np.maximum(group, 1))


def _qgz_kernel_bytes(params, grad_bytes, local) -> np.ndarray:
    """HBM bytes of qgZ for `params` gradients on L = `local` GPUs of a node: quantize the 16-bit
    gradients to int4 (swizzle_quant), reduce the L received int4 shares and requantize
    (quantized_reduction), dequantize to fp16 and sum the nodes' chunks."""
    L = np.maximum(local, 1)
    return params * (grad_bytes + 2.0 * QGZ_BITS / 8 + (QGZ_BITS / 8 + 2.0 * 2.0) / L)


def reduce_s(spec: ModelSpec, layout, links: comm.Links, g: comm.Group, params, grad_bytes):
    """(seconds, bytes one node sends across the network) of one micro batch's gradient
    reduction: the plain reduce-scatter, or qgZ's two all-to-alls where dp spans nodes."""
    buckets = np.ceil(params / layout.reduce_bucket_elems)
    plain = g.allgather_s(params * grad_bytes, buckets)
    plain_node = g.node_bytes(params * grad_bytes, 1.0)
    dp = np.asarray(layout.dp * layout.cp, dtype=np.int64)
    local = comm.members_per_node(dp, layout.tp, links.gpus_per_node)
    nodes = np.maximum(dp // np.maximum(local, 1), 1)
    intra = comm.Group.of(links, local, local)
    cross = comm.Group.of(links, nodes, 1)
    wire = params * QGZ_WIRE_BYTES
    quant = intra.allgather_s(wire, buckets) + cross.allgather_s(wire / local, buckets)
    on = (np.asarray(layout.zeropp_qgz) == 1) & g.spans
    return np.where(on, quant, plain), np.where(on, cross.node_bytes(wire / local, 1.0), plain_node)


def exposed_s(spec: ModelSpec, layout, links: comm.Links, g: comm.Group, gather_bytes, grad_bytes,
              fwd_micro, bwd_micro, prof, hbm_Bps, moe_spec: ModelSpec | None = None):
    """(exposed seconds per step, bytes one node sends across the network per step) of ZeRO-3
    with the plan's ZeRO++ features, as zero3.exposed_s (the collectives multiplied by the stack's
    comm_time_factor k, the quantization kernel passes not)."""
    n = zero3.gathers(spec, layout, moe_spec)
    P = zero3.params_per_gpu(spec, layout, moe_spec)
    k, ov, ga = prof["comm_time_factor"], prof["overlap_zero3"], layout.grad_accum
    qwz = np.asarray(layout.zeropp_qwz) == 1
    wire = np.where(qwz, QWZ_WIRE_BYTES, gather_bytes)
    sec = secondary_group(links, layout)
    hpz = np.asarray(layout.zeropp_hpz_partition_size) > 1
    # the first forward of a step gathers over the dp group; with hpZ every later gather reads
    # the secondary copy (later micro batches' forwards, every backward and recompute gather)
    ag_first = g.allgather_s(n["fwd"] * wire, n["calls_fwd"])
    ag_later = np.where(hpz, sec.allgather_s(n["fwd"] * wire, n["calls_fwd"]), ag_first)
    ag_b = np.where(hpz, sec.allgather_s(n["bwd"] * wire, n["calls_bwd"]),
                    g.allgather_s(n["bwd"] * wire, n["calls_bwd"]))
    rs, rs_node = reduce_s(spec, layout, links, g, P, grad_bytes)
    group_f = np.where(hpz, layout.zeropp_hpz_partition_size, layout.dp * layout.cp)
    q_first = qwz * _qwz_kernel_bytes(n["fwd"], gather_bytes, layout.dp * layout.cp) / hbm_Bps
    q_later = qwz * _qwz_kernel_bytes(n["fwd"], gather_bytes, group_f) / hbm_Bps
    q_b = qwz * _qwz_kernel_bytes(n["bwd"], gather_bytes, group_f) / hbm_Bps
    local = comm.members_per_node(layout.dp * layout.cp, layout.tp, links.gpus_per_node)
    q_g = ((np.asarray(layout.zeropp_qgz) == 1) & g.spans) * _qgz_kernel_bytes(P, grad_bytes, local) / hbm_Bps
    fwd_first = zero3.fetch_exposed(k * ag_first + q_first, ov * fwd_micro, n["calls_fwd"])
    fwd_later = zero3.fetch_exposed(k * ag_later + q_later, ov * fwd_micro, n["calls_fwd"])
    bwd = np.maximum(k * (ag_b + rs) + q_b + q_g - ov * bwd_micro, (k * rs + q_g) / n["calls_bwd"])
    exposed = fwd_first + (ga - 1.0) * fwd_later + ga * bwd
    node_f = g.node_bytes(n["fwd"] * wire, 1.0)
    node_later = np.where(hpz, sec.node_bytes(n["fwd"] * wire, 1.0), node_f)
    node_b = np.where(hpz, sec.node_bytes(n["bwd"] * wire, 1.0), g.node_bytes(n["bwd"] * wire, 1.0))
    node = node_f + (ga - 1.0) * node_later + ga * (node_b + rs_node)
    return exposed, node


def secondary_partition_bytes(spec: ModelSpec, layout, compute_bytes) -> np.ndarray:
    """hpZ's secondary copy on each GPU: the 16-bit weights of its model-parallel part over the
    partition size (DeepSpeed `_partition_param_sec`: tensor_size // num_ranks_in_param_group, in
    the parameter's dtype), alive from the first forward gather to the optimizer step."""
    h = np.asarray(layout.zeropp_hpz_partition_size, dtype=np.float64)
    P = spec.n_params / (np.asarray(layout.tp, dtype=np.float64) * np.asarray(layout.pp, dtype=np.float64))
    return (h > 1) * compute_bytes * P / h


def buffer_bytes(layout) -> np.ndarray:
    """qwZ's int8 gather buffer (the prefetch bucket) and qgZ's int4 send and receive copies of
    a reduce bucket, beside ZeRO-3's 16-bit buffers."""
    qwz = (np.asarray(layout.zeropp_qwz) == 1) * QWZ_WIRE_BYTES * layout.stage3_prefetch_elems
    qgz = (np.asarray(layout.zeropp_qgz) == 1) * 2.0 * QGZ_WIRE_BYTES * layout.reduce_bucket_elems
    return (qwz + qgz).astype(np.float64)


def label(plan) -> str:
    """The plan's ZeRO++ features as a short tag ("qwZ+hpZ8+qgZ"), "" without any."""
    parts = (["qwZ"] if plan.zeropp_qwz else []) + (
        [f"hpZ{plan.zeropp_hpz_partition_size}"] if plan.zeropp_hpz_partition_size > 1 else []) + (
        ["qgZ"] if plan.zeropp_qgz else [])
    return "+".join(parts)
