"""Step time, throughput and time-to-train of execution plans (vectorised, pure).

`performance(spec, layout, system, settings)` returns one numpy array per output key, one entry
per candidate in `layout`. The step is

    step = compute + pipeline bubble + exposed communication + exposed offload

compute   matmuls at the GPU's peak x a GEMM-size efficiency (catalog curve, see flops.py),
          element-wise (memory-bound) kernels at HBM speed, the optimizer step;
bubble    (p-1)/(m*v) of the pipeline's busy time (Narayanan et al. SC21, eq. 1 and 2);
comm      TP all-reduces (not overlapped), PP sends, DP/ZeRO/FSDP collectives minus the part
          hidden behind compute (bucketed overlap for DDP/ZeRO-1/2, prefetch for ZeRO-3/FSDP);
offload   host link transfers and CPU Adam of ZeRO-Offload / ZeRO-Infinity.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from planner import comm, flops
from planner.memory import compute_dtype_bytes
from planner.layout import CKPT, OFFLOAD, OPTIM, PREC, SHARD, ATTN, Layout
from planner.model import ModelSpec
from planner.scenario import PRECISIONS, Performance, StepTimeBreakdown
from planner.settings import Settings
from planner.system import System

# Share of a collective that can hide behind the compute it overlaps with.
# DDP buckets all-reduces during backward (Li et al. VLDB 2020, PyTorch DDP); DeepSpeed ZeRO-1/2
# overlap_comm; ZeRO-3 and FSDP prefetch the next module's parameters (Rajbhandari et al. SC20,
# Zhao et al. VLDB 2023); ZeRO-3's prefetch hides less than FSDP's in practice.
OVERLAP = {"ddp": 0.90, "zero12": 0.80, "zero3": 0.60, "fsdp": 0.85}
# Element-wise kernels (norms, dropout, residuals, activations) touch the activation bytes of
# Korthikanti et al. 2022 eq. 2/4 (34*h per token and layer at 16 bit) about once in forward
# and twice in backward; attention softmax/mask/dropout add 5*a*s without FlashAttention.
ELEMENTWISE_PASSES = 3.0
HBM_EFFICIENCY = 0.80
# Optimizer step, bytes touched per parameter of the shard (fp32 master, grads and states read
# and written; Rajbhandari et al. 2020 sec. 3): AdamW, Adafactor, SGD with momentum.
OPTIMIZER_BYTES_PER_PARAM = {OPTIM["adamw"]: 36.0, OPTIM["adafactor"]: 20.0, OPTIM["sgd"]: 16.0}
# CPU Adam is bound by host memory bandwidth shared by a node's ranks (Ren et al. ATC'21,
# ZeRO-Offload sec. 4.1); a two-socket server streams ~150 GB/s.
_OPTIMIZER_BYTES = np.array([OPTIMIZER_BYTES_PER_PARAM[i] for i in range(len(OPTIM))])
HOST_MEMORY_GBYTES_PER_S_PER_NODE = 150.0
HOST_TRANSFER_OVERLAP = 0.5

BOTTLENECKS = np.array(["compute", "network", "bubble", "offload"])


def _peak_flops(system: System, precision) -> np.ndarray:
    """Dense peak FLOP/s per precision code; a precision without tensor cores runs at fp32 speed."""
    table = []
    for name in PRECISIONS:
        try:
            table.append(system.gpu.peak_tflops(name))
        except ValueError:
            table.append(system.gpu.fp32_tflops)
    return np.asarray(table)[np.asarray(precision)] * 1e12


def _efficiency_points(system: System):
    pts = [(p.gemm_gflop, p.fraction) for p in system.gpu.matmul_efficiency]
    return pts or list(flops.DEFAULT_EFFICIENCY)


def _per_token_times(spec: ModelSpec, layout: Layout, system: System, settings: Settings):
    """Forward seconds per token on one GPU: block GEMMs, attention core, element-wise, logits."""
    peak = _peak_flops(system, layout.precision) * settings.calibration.compute
    pts = _efficiency_points(system)
    tokens = layout.micro_batch * layout.seq_len
    gemm = 0.0
    for per_token, size in flops.block_gemms(spec, tokens, layout.tp):
        gemm = gemm + per_token / (peak * flops.efficiency(pts, size))
    attn_ft, attn_size = flops.attention_core_gemm(spec, tokens, layout.seq_len, layout.tp)
    attn = attn_ft / (peak * flops.efficiency(pts, attn_size) * flops.ATTENTION_CORE_FACTOR)
    log_ft, log_size = flops.logits_gemm(spec, tokens, layout.tp)
    logits = log_ft / (peak * flops.efficiency(pts, log_size))

    act_bytes = compute_dtype_bytes(layout)
    hbm = system.gpu.hbm_gbytes_per_s * 1e9 * HBM_EFFICIENCY * settings.calibration.compute
    tp = layout.tp.astype(np.float64)
    # Korthikanti et al. 2022: sbh(10 + 24/t) bytes, or 34/t with sequence parallelism.
    sp = layout.sequence_parallel > 0
    act = (10.0 * ~sp + (24.0 + 10.0 * sp) / tp) * (spec.hidden / 2)
    eager = (layout.attention == ATTN["eager"]) * (5.0 * spec.n_heads) * layout.seq_len / tp
    elem = act * act_bytes / hbm
    elem_attn = eager * act_bytes / 2 / hbm
    return gemm, attn, elem, elem_attn, logits


def _compute(spec: ModelSpec, layout: Layout, system: System, settings: Settings):
    """Per-micro-batch forward and total seconds of one pipeline stage (the last, with logits)."""
    gemm, attn, elem, elem_attn, logits = _per_token_times(spec, layout, system, settings)
    layers = spec.n_layers / layout.pp
    ckpt = layout.activation_checkpointing
    fwd_layer = gemm + attn + elem + elem_attn
    train_layer = 3.0 * (gemm + attn) + ELEMENTWISE_PASSES * (elem + elem_attn)
    recompute = (ckpt == CKPT["full"]) * fwd_layer + (ckpt == CKPT["selective"]) * (attn + elem_attn)
    tokens = layout.micro_batch * layout.seq_len
    fwd_micro = tokens * (layers * fwd_layer + logits)
    micro = tokens * (layers * (train_layer + recompute) + 3.0 * logits)
    return fwd_micro, micro


def _params_per_gpu(spec: ModelSpec, layout: Layout) -> np.ndarray:
    return spec.n_params / (layout.tp * layout.pp).astype(np.float64)


def _optimizer_shard(spec: ModelSpec, layout: Layout) -> np.ndarray:
    """Parameters whose optimizer state one GPU updates (ZeRO-1+ shard it over dp)."""
    dp = 1.0 + layout.shards_optimizer * (layout.dp - 1.0)
    return _params_per_gpu(spec, layout) / dp


def _optimizer_step_s(spec, layout, system, settings) -> np.ndarray:
    shard = _optimizer_shard(spec, layout)
    per_param = _OPTIMIZER_BYTES[np.asarray(layout.optimizer)]
    hbm = system.gpu.hbm_gbytes_per_s * 1e9 * HBM_EFFICIENCY * settings.calibration.compute
    return (layout.offload == OFFLOAD["none"]) * shard * per_param / hbm


def _grad_bytes(layout: Layout) -> np.ndarray:
    """Bytes per gradient element on the wire: AMP keeps fp32 grads under DDP; DeepSpeed and
    FSDP mixed precision reduce in 16 bit (Micikevicius et al. 2018; FSDP MixedPrecision)."""
    p = layout.precision
    fp32_grads = (p == PREC["fp32"]) | ((layout.sharding == SHARD["none"]) & (p != PREC["bf16_pure"]))
    return 2.0 + 2.0 * fp32_grads


def _dp_comm(spec, layout, links: comm.Links, fwd_micro, bwd_micro):
    """Exposed seconds per step of DP/ZeRO/FSDP collectives, and inter-node bytes per node."""
    dp, ga, s = layout.dp, layout.grad_accum, layout.sharding
    m = comm.members_per_node(dp, layout.tp, links.gpus_per_node)
    g = comm.Group.of(links, dp, m)
    P = _params_per_gpu(spec, layout)
    gbytes = P * _grad_bytes(layout)
    pbytes = P * compute_dtype_bytes(layout)
    nb_r = np.ceil(P / layout.reduce_bucket_elems)
    nb_g = np.ceil(P / layout.allgather_bucket_elems)
    L = float(spec.n_layers) / layout.pp
    is_ = {name: s == code for name, code in SHARD.items()}

    # DDP: one bucketed all-reduce at the accumulation boundary, behind the last backward
    # (Li et al. VLDB 2020).
    ar = g.allreduce_s(gbytes, nb_r)
    ddp = np.maximum(ar - OVERLAP["ddp"] * bwd_micro, ar / nb_r)
    exposed = is_["none"] * ddp
    per_node = is_["none"] * g.node_bytes(gbytes, 2.0)
    # ZeRO-1/2 (DeepSpeed): reduce-scatter of grads (ZeRO-1 at the boundary, ZeRO-2 every micro
    # batch) behind backward, then an all-gather of the updated 16-bit parameters (Rajbhandari
    # et al. SC20).
    z12 = is_["zero1"] | is_["zero2"]
    rs = g.allgather_s(gbytes, nb_r)
    rs_hidden = np.maximum(rs - OVERLAP["zero12"] * bwd_micro, rs / nb_r)
    times = 1.0 + is_["zero2"] * (ga - 1.0)
    exposed = exposed + z12 * (times * rs_hidden + g.allgather_s(pbytes, nb_g))
    rs_b, ag_b = g.node_bytes(gbytes, 1.0), g.node_bytes(pbytes, 1.0)
    per_node = per_node + z12 * (times * rs_b + ag_b)
    # ZeRO-3 / FSDP: gather parameters for forward and again for backward (not FSDP's
    # SHARD_GRAD_OP), reduce-scatter grads, every micro batch, module by module behind the
    # prefetch (Rajbhandari et al. SC20; Zhao et al. VLDB 2023).
    full = is_["zero3"] | is_["fsdp_full_shard"] | is_["fsdp_shard_grad_op"]
    ov = OVERLAP["fsdp"] + is_["zero3"] * (OVERLAP["zero3"] - OVERLAP["fsdp"])
    ag = g.allgather_s(pbytes, L)
    ag_bwd = ~is_["fsdp_shard_grad_op"] * ag
    rs_l = g.allgather_s(gbytes, L)
    sharded = ga * (np.maximum(ag - ov * fwd_micro, ag / L)
                    + np.maximum(ag_bwd + rs_l - ov * bwd_micro, rs_l / L))
    exposed = exposed + full * sharded
    gathers = 2.0 - is_["fsdp_shard_grad_op"]
    per_node = per_node + full * ga * (gathers * ag_b + rs_b)
    # Hybrid shard: shard inside the node, all-reduce the grad shard across nodes.
    hy = is_["fsdp_hybrid"]
    if np.any(hy):
        gi = comm.Group.of(links, m, m)
        replicas = np.maximum(dp // m, 1)
        gx = comm.Group.of(links, replicas, 1)
        ag_h, rs_h = gi.allgather_s(pbytes, L), gi.allgather_s(gbytes, L)
        ar_h = gx.allreduce_s(gbytes / m, L)
        hybrid = ga * (np.maximum(ag_h - OVERLAP["fsdp"] * fwd_micro, ag_h / L)
                       + np.maximum(ag_h + rs_h + ar_h - OVERLAP["fsdp"] * bwd_micro, rs_h / L))
        exposed = exposed + hy * hybrid
        per_node = per_node + hy * ga * gx.node_bytes(gbytes / m, 2.0)
    return exposed, per_node


def _tp_pp_comm(spec, layout, links: comm.Links, system: System):
    """TP all-reduces (2 forward + 2 backward per block, 2 more when recomputing; Shoeybi et al.
    2019) and PP activation sends (2 per micro batch and virtual stage), seconds per step."""
    tokens = layout.micro_batch * layout.seq_len
    act = compute_dtype_bytes(layout) * tokens * spec.hidden
    layers = spec.n_layers / layout.pp
    per_layer = 4.0 + 2.0 * (layout.activation_checkpointing == CKPT["full"])
    calls = layers * per_layer
    m_tp = comm.members_per_node(layout.tp, 1, links.gpus_per_node)
    tp_s = layout.grad_accum * comm.Group.of(links, layout.tp, m_tp).allreduce_s(calls * act, calls)
    # Scatter/gather optimisation or sequence parallelism: each GPU sends 1/t of the tensor.
    p2p_bytes = act / layout.tp
    inter = layout.gpus > system.gpus_per_node
    pp_s = (layout.pp > 1) * layout.grad_accum * 2.0 * layout.vpp * comm.p2p_s(links, p2p_bytes, inter)
    return tp_s, pp_s


def _offload(spec, layout, links: comm.Links, system: System, micro, bwd_micro):
    """ZeRO-Offload: grads to host (overlapped with backward), CPU Adam, params back; ZeRO-
    Infinity/FSDP param offload also fetches the parameter shard twice per micro batch."""
    ga = layout.grad_accum
    shard = _optimizer_shard(spec, layout)
    gb = _grad_bytes(layout)
    pb = compute_dtype_bytes(layout)
    per_micro_grads = layout.shards_grads
    d2h = shard * gb / links.host_Bps * (1.0 + per_micro_grads * (ga - 1.0))
    d2h_exposed = np.maximum(d2h - HOST_TRANSFER_OVERLAP * ga * bwd_micro, 0.0)
    host_Bps = HOST_MEMORY_GBYTES_PER_S_PER_NODE * 1e9 / system.gpus_per_node
    cpu_adam = shard * OPTIMIZER_BYTES_PER_PARAM[OPTIM["adamw"]] / host_Bps
    h2d = shard * pb / links.host_Bps
    opt = d2h_exposed + cpu_adam + h2d
    fetch = 2.0 * shard * pb / links.host_Bps
    params = ga * np.maximum(fetch - OVERLAP["zero3"] * micro, 0.0)
    off = layout.offload
    return (off != OFFLOAD["none"]) * (opt + (off == OFFLOAD["optimizer+params"]) * params)


_NUMERIC = ("tp", "pp", "vpp", "dp", "micro_batch", "grad_accum", "seq_len", "reduce_bucket_elems",
            "allgather_bucket_elems", "stage3_prefetch_elems", "stage3_max_live_params")


def _as_float(layout: Layout) -> Layout:
    """The numeric knobs as float64 once (mixed int/float arithmetic converts on every use)."""
    return replace(layout, **{k: np.asarray(getattr(layout, k), dtype=np.float64) for k in _NUMERIC})


def performance(spec: ModelSpec, layout: Layout, system: System, settings: Settings) -> dict[str, np.ndarray]:
    """Step-time breakdown, throughput, FLOPs utilisation and time-to-train of each plan."""
    layout = _as_float(layout)
    links = comm.Links.of(system, settings)
    fwd_micro, micro = _compute(spec, layout, system, settings)
    bwd_micro = micro - fwd_micro
    ga = layout.grad_accum
    compute_s = ga * micro + _optimizer_step_s(spec, layout, system, settings)

    tp_s, pp_s = _tp_pp_comm(spec, layout, links, system)
    dp_s, node_bytes = _dp_comm(spec, layout, links, fwd_micro, bwd_micro)
    comm_s = tp_s + pp_s + dp_s
    # Pipeline bubble: (p-1)/(m*v) of the busy time of a stage (Narayanan et al. SC21).
    busy = ga * micro + tp_s + pp_s
    bubble_s = (layout.pp - 1) / (ga * layout.vpp) * busy
    offload_s = _offload(spec, layout, links, system, micro, bwd_micro)
    step = compute_s + comm_s + bubble_s + offload_s

    tokens_step = (layout.global_batch * layout.seq_len).astype(np.float64)
    gpus = layout.gpus.astype(np.float64)
    tps = tokens_step / step
    peak = _peak_flops(system, layout.precision)
    model_tf = flops.model_flops_per_token(spec, layout.seq_len) * tps / gpus / 1e12
    hw_tf = flops.hardware_flops_per_token(spec, layout.seq_len, layout.activation_checkpointing) * tps / gpus / 1e12
    parts = np.stack(np.broadcast_arrays(compute_s, comm_s, bubble_s, offload_s))
    # Seed 001: the NICs must carry the DP traffic within the compute time to stay hidden.
    needed = node_bytes * 8 / 1e9 / compute_s / settings.calibration.network / comm.INTERNODE_LINK_EFFICIENCY

    out = {
        "step_time_s": step,
        "compute_s": compute_s,
        "comm_exposed_s": comm_s,
        "bubble_s": bubble_s,
        "offload_s": offload_s,
        "bottleneck": BOTTLENECKS[np.argmax(parts, axis=0)],
        "tokens_per_s": tps,
        "tokens_per_s_per_gpu": tps / gpus,
        "samples_per_s": layout.global_batch / step,
        "model_tflops_per_gpu": model_tf,
        "hw_tflops_per_gpu": hw_tf,
        "mfu": model_tf * 1e12 / peak,
        "hfu": hw_tf * 1e12 / peak,
        "network_gbps_needed": needed,
        "internode_gbps_available": np.broadcast_to(system.internode_gbps, np.shape(step)),
    }
    nan = np.full(np.shape(step), np.nan)
    if settings.tokens is not None:
        days = settings.tokens / tps / 86400.0
        out["days"] = days
        out["gpu_hours"] = days * 24.0 * gpus
        price = settings.price_per_gpu_hour
        out["cost"] = out["gpu_hours"] * price if price is not None else nan
    return out


def at(perf: dict[str, np.ndarray], i: int) -> tuple[StepTimeBreakdown, Performance]:
    """The pydantic models of candidate `i` of a `performance()` result."""

    def get(key):
        v = np.asarray(perf[key]).reshape(-1)[i] if key in perf else None
        if v is None or (isinstance(v, float | np.floating) and np.isnan(v)):
            return None
        return v.item() if hasattr(v, "item") else v

    time = StepTimeBreakdown(**{k: get(k) for k in StepTimeBreakdown.model_fields})
    speed = Performance(**{k: get(k) for k in Performance.model_fields})
    return time, speed
