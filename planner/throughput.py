"""Step time, throughput and time-to-train of execution plans (vectorised, pure).

`performance(spec, layout, system, settings)` returns one numpy array per output key, one entry
per candidate in `layout`. The step of the busiest pipeline stage is

    step = compute + pipeline bubble + exposed communication + exposed offload + overhead

compute   block GEMMs at the GPU's peak x a GEMM-size efficiency (catalog curve; fp8 GEMMs at
          the fp8 peak, the curve read at the fp8 peak's size, under the fp8 memory roofline:
          planner/fp8_gemm.py), fused attention at the GPU's attention-kernel efficiency by sequence
          length, element-wise kernels at HBM speed, per-block framework overhead, the
          logits and loss, the optimizer step, the host time of synchronous kernel launches
          (CUDA_LAUNCH_BLOCKING=1 jobs: planner/launch_sync.py); each part scaled by the stack's profile;
bubble    the makespan of the pipeline's stages less the busiest stage's busy time: (p-1)/(m*v)
          of it with equal stages (Narayanan et al. SC21, eq. 1 and 2; more when an interleaved
          schedule has fewer micro batches than stages), the fill and drain through the lighter
          stages where stages differ (Alpa eq. 2), each stage's time with its exposed TP/CP comm
          and its p2p exchanges (planner/pipeline_comm.py, planner/pipeline_stages.py);
comm      TP collectives (hidden by async TP where the stack does it), the context-parallel
          exchange (ring, Ulysses all-to-all, all-gather: planner/context_parallel.py), PP sends, DP/ZeRO/FSDP collectives minus the part
          hidden behind compute (the stack's overlap fractions);
offload   host link transfers and CPU Adam of ZeRO-Offload / ZeRO-Infinity.

The raw parts (before the stack's time factors) are returned too (`raw_*`): the profile fit
(planner/profile_fit.py) is linear in those factors.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from planner import (adafactor, attention_kernel, attn_window, comm, deepspeed_era, dp_exposure,
                     dp_comm, eager_traffic, flops, fp8, fp8_gemm, gemm_shape, launch_sync, megatron_ddp, mla, moe,
                     moe_time, offload_time, parallel_block, pipeline_comm, pipeline_stages, ssm, ssm_time, stage_split)
from planner import memory_savings, mp_comm, shard_units
from planner.activation_offload import activation_offload_s
from planner.layout import ATTN, CKPT, OFFLOAD, OPTIM, PREC, Layout
from planner.memory import compute_dtype_bytes
from planner.model import ModelSpec
from planner.scenario import PRECISIONS, Performance, StepTimeBreakdown
from planner.settings import Settings, stack_profiles
from planner.stacks import merged, per_candidate
from planner.system import System

# Element-wise kernels (norms, dropout, residuals, activations) touch the activation bytes of
# Korthikanti et al. 2022 eq. 2/4 (34*h per token and layer at 16 bit) about once in forward
# and twice in backward; attention softmax/mask/dropout add 5*a*s without FlashAttention.
ELEMENTWISE_PASSES = 3.0
# Share of the datasheet HBM bandwidth that streaming kernels reach (STREAM-like copies on
# A100/H100 reach 80-90%: Jia et al. 2018 "Dissecting the Volta GPU" methodology; NVIDIA
# bandwidthTest).
HBM_EFFICIENCY = 0.80
# The loss: the fp32 logits are written, soft-maxed, read back for the gradient: ~4 passes of
# 4 bytes over s*b*V/t (Megatron's vocab-parallel cross entropy).
LOSS_PASSES = 4.0
# Optimizer step, bytes touched per parameter of the shard (fp32 master, grads and states read
# and written; Rajbhandari et al. 2020 sec. 3): AdamW, Adafactor (a fused kernel's; the step uses
# planner/adafactor.py's unfused PyTorch figures), SGD with momentum.
OPTIMIZER_BYTES_PER_PARAM = {OPTIM["adamw"]: 36.0, OPTIM["adafactor"]: 20.0, OPTIM["sgd"]: 16.0}
_OPTIMIZER_BYTES = np.array([OPTIMIZER_BYTES_PER_PARAM[i] for i in range(len(OPTIM))])

BOTTLENECKS = np.array(["compute", "network", "bubble", "offload"])
# The parts a stack profile scales, and the profile field that scales each.
FACTORS = {
    "gemm": "gemm_time_factor",
    "attention": "attention_time_factor",
    "elementwise": "elementwise_time_factor",
    "overhead": "layer_overhead_us",
    "unit_overhead": "unit_overhead_us",
    "launch_sync": "sync_launch_us",
    "dp_comm": "comm_time_factor",
    "optimizer": "optimizer_time_factor",
}


def _peak_flops(system: System, precision) -> np.ndarray:
    """Dense peak FLOP/s per precision code; a precision without tensor cores runs at fp32 speed."""
    table = []
    for name in PRECISIONS:
        try:
            table.append(system.gpu.peak_tflops(name))
        except ValueError:
            table.append(system.gpu.fp32_tflops)
    return np.asarray(table)[np.asarray(precision)] * 1e12


def _peak16(system: System, precision) -> np.ndarray:
    """The peak MFU is quoted against and attention/logits run at: fp8 plans use the 16-bit one."""
    p = np.asarray(precision)
    return _peak_flops(system, np.where(p == PREC["fp8"], PREC["bf16"], p))


def _efficiency_points(system: System):
    pts = [(p.gemm_gflop, p.fraction) for p in system.gpu.matmul_efficiency]
    return pts or list(flops.DEFAULT_EFFICIENCY)


def _hbm_Bps(system: System, settings: Settings) -> float:
    share = system.gpu.hbm_efficiency or HBM_EFFICIENCY  # a GPU's measured triad share, else the default
    return system.gpu.hbm_gbytes_per_s * 1e9 * share * settings.calibration.compute


def _layer_parts(spec: ModelSpec, layout: Layout, system: System, settings: Settings, prof):
    """Seconds per token of one block on one GPU, forward only: GEMMs, attention, element-wise.

    Tokens per GPU are micro_batch * seq_len / cp (context parallelism splits the sequence)."""
    k = settings.calibration.compute
    peak = _peak_flops(system, layout.precision) * k
    peak16 = _peak16(system, layout.precision) * k
    fp8 = layout.precision == PREC["fp8"]
    gemm_peak = np.where(fp8, peak * prof["gemm_efficiency"], peak)  # the fp8 recipe's GEMM share
    pts = _efficiency_points(system)
    tokens = layout.micro_batch * layout.seq_len / layout.cp
    gemm = 0.0
    shape_lin, shape_attn, _ = gemm_shape.plan_factors(spec, layout, system.gpu)  # tile/wave quantization
    hbm = _hbm_Bps(system, settings)
    dims = gemm_shape.block_linear_dims(spec, layout.tp)
    for (per_token, size), q, (n, k) in zip(flops.block_gemms(spec, tokens, layout.tp), shape_lin, dims):
        # fp8: the size curve at the fp8 peak and the memory roofline (planner/fp8_gemm.py)
        gemm = gemm + fp8_gemm.gemm_s_per_token(per_token, size, tokens, n, k, q, gemm_peak, peak16 / peak, pts, hbm,
                                                fp8)
    # Mamba layers of a hybrid stack (planner/ssm_time.py; 0 for a transformer)
    gemm = gemm + ssm_time.gemm_s_per_token(spec, layout, system.gpu, gemm_peak, peak16, pts,
                                            compute_dtype_bytes(layout))
    # Attention core: queries of this GPU against the whole sequence (ring attention with cp).
    attn_ft, attn_size = flops.attention_core_gemm(spec, tokens, layout.seq_len, layout.tp)
    eager = layout.attention == ATTN["eager"]
    if system.gpu.attention_efficiency:
        # the fused kernel skips the masked half of a causal score matrix (and what a sliding
        # window masks: each kind of layer at its own length, planner/attn_window.py)
        def eff_of(length):
            eff = attention_kernel.efficiency(system.gpu, length, spec.head_dim, prof["cudnn_attention"],
                                              layout.attention)
            cudnn = attention_kernel.uses_cudnn(layout.attention, prof["cudnn_attention"])
            return eff * mla.kernel_work_factor(spec, cudnn) if mla.is_mla(spec) else eff
        fused = attn_window.fused_s(spec, layout.seq_len, attn_ft, peak16, eff_of)
    else:  # no measured curve: a share of a dense GEMM's efficiency, on the causal half too
        fused = 0.5 * attn_ft / (peak16 * flops.efficiency(pts, attn_size) * flops.ATTENTION_CORE_FACTOR)
    fused = fused * attention_kernel.slowdown(layout.attention)  # the plan's kernel (FlashAttention in Triton)
    # eager attention computes the whole s x s score matrix, windowed or not
    eager_ft, eager_size = flops.attention_core_gemm(attn_window.unwindowed(spec), tokens, layout.seq_len, layout.tp)
    unfused = eager_ft / (peak16 * flops.efficiency(pts, eager_size) * shape_attn)
    attn = np.where(eager, unfused, fused)

    act_bytes = compute_dtype_bytes(layout)
    tp = layout.tp.astype(np.float64)
    # Korthikanti et al. 2022: sbh(10 + 24/t) bytes, or 34/t with sequence parallelism (a
    # parallel attention+MLP block has fewer norm-side tensors than their 10: parallel_block.py).
    sp = layout.sequence_parallel > 0
    rep = parallel_block.replicated_sbh(spec)
    act = (rep * ~sp + (24.0 + rep * sp) / tp) * (spec.hidden / 2)
    elem = ssm_time.elementwise_s_per_token(spec, layout, act * act_bytes / hbm, act_bytes, hbm)
    elem = elem * np.where(layout.compile == 1, prof["compile_elementwise_factor"], 1.0)
    return gemm, attn, elem


def _logits_s(spec: ModelSpec, layout: Layout, system: System, settings: Settings) -> np.ndarray:
    """Seconds per token of the output layer and the loss, forward + backward."""
    peak16 = _peak16(system, layout.precision) * settings.calibration.compute
    tokens = layout.micro_batch * layout.seq_len / layout.cp
    log_ft, log_size = flops.logits_gemm(spec, tokens, layout.tp)
    shape = gemm_shape.logits_efficiency(spec, tokens, layout.tp, gemm_shape.GemmShapeData.of(system.gpu),
                                         compute_dtype_bytes(layout))
    gemm = 3.0 * log_ft / (peak16 * flops.efficiency(_efficiency_points(system), log_size) * shape)
    loss = LOSS_PASSES * 4.0 * spec.vocab_padded / layout.tp / _hbm_Bps(system, settings)
    return gemm + loss


def _compute_parts(spec, layout, system, settings, prof) -> dict[str, np.ndarray]:
    """Per-micro-batch seconds of the busiest stage, by part (raw: before the stack's factors).

    The busiest stage holds ceil(L/pp) blocks, or floor(L/pp) blocks and the output layer
    (uneven stages put the extra blocks away from the last stage)."""
    gemm, attn, elem = _layer_parts(spec, layout, system, settings, prof)
    tokens = layout.micro_batch * layout.seq_len / layout.cp
    block, attn_share, linear_share = flops.recompute_share(layout.activation_checkpointing,
                                                            layout.checkpoint_fraction)
    # forward + backward (2x forward), plus what checkpointing recomputes
    gemm_t = gemm * (3.0 + block + linear_share + memory_savings.recompute_gemm_share(spec, layout, settings))
    attn_t = attn * attention_kernel.passes(layout.attention == ATTN["eager"], block + attn_share)
    elem_t = elem * (ELEMENTWISE_PASSES + block + 0.5 * linear_share)
    # eager attention's element-wise kernels over the score matrix (their own passes)
    elem_t = elem_t + (layout.attention == ATTN["eager"]) * eager_traffic.seconds_per_token(
        spec.n_heads, layout.seq_len, layout.tp, compute_dtype_bytes(layout), layout.precision == PREC["fp16"],
        prof["eager_softmax_fp32"], block + 0.5 * linear_share, _hbm_Bps(system, settings)) * ssm.attention_share(spec)
    # fp8 quantisation of the block linears' operands, forward + backward (the recipe's kernels)
    hbm = _hbm_Bps(system, settings)
    elem_t = elem_t + prof["fp8_cast_passes"] * fp8.cast_s_per_token(spec, layout, prof, hbm, block + linear_share)
    split = stage_split.of_layout(spec.n_layers, layout)
    logits = tokens * _logits_s(spec, layout, system, settings)
    per_layer = tokens * (gemm_t + attn_t + elem_t)
    # which stage is the busiest, with the default factors (the fit keeps that choice)
    layers, last_is_busiest = pipeline_stages.busiest(split, per_layer, logits)
    with_logits = last_is_busiest | (layout.pp == 1)
    fwd_share = 1.0 / 3.0
    return {
        "gemm": layers * tokens * gemm_t + with_logits * logits * 0.75,
        "block_gemm": layers * tokens * gemm_t,
        "attention": layers * tokens * attn_t,
        "elementwise": layers * tokens * elem_t + with_logits * logits * 0.25,
        "overhead": layers * 1e-6,  # x layer_overhead_us
        "unit_overhead": shard_units.raw_s(layout, layers),  # x unit_overhead_us (FSDP / ZeRO-3 only)
        "launch_sync": launch_sync.raw_s(layout, layers, system.launch_blocking),  # x sync_launch_us
        "fwd_share": np.full(np.shape(layers), fwd_share),
        "layers": layers,
        # for the pipeline's stage times (planner/pipeline_comm.py)
        "with_logits": with_logits,
        "logits": logits,
        "split": split,
        "pp_exchanges": pipeline_comm.busiest_exchanges(split, per_layer, logits, layout.pp, layout.vpp),
    }


def _optimizer_shard(spec: ModelSpec, layout: Layout) -> np.ndarray:
    """Parameters whose optimizer state one GPU updates (ZeRO-1+ shard it over dp x cp)."""
    dp = 1.0 + layout.shards_optimizer * (layout.dp * layout.cp - 1.0)
    return dp_comm.params_per_gpu(spec, layout) / dp


def _optimizer_step_s(spec, layout, system, settings) -> np.ndarray:
    shard = _optimizer_shard(spec, layout)
    optim = np.asarray(layout.optimizer)
    # Adafactor as PyTorch code runs it, unfused (planner/adafactor.py)
    per_param = np.where(optim == OPTIM["adafactor"], adafactor.bytes_per_param(layout), _OPTIMIZER_BYTES[optim])
    return (layout.offload == OFFLOAD["none"]) * shard * per_param / _hbm_Bps(system, settings)


_NUMERIC = ("tp", "pp", "vpp", "cp", "dp", "micro_batch", "grad_accum", "seq_len", "reduce_bucket_elems",
            "allgather_bucket_elems", "stage3_prefetch_elems", "stage3_max_live_params")


def _as_float(layout: Layout) -> Layout:
    """The numeric knobs as float64 once (mixed int/float arithmetic converts on every use)."""
    return replace(layout, **{k: np.asarray(getattr(layout, k), dtype=np.float64) for k in _NUMERIC})


def performance(spec: ModelSpec, layout: Layout, system: System, settings: Settings, *,
                fit_columns: bool = False, internode_scale=None) -> dict[str, np.ndarray]:
    """Step-time breakdown, throughput, FLOPs utilisation and time-to-train of each plan. A mixture-of-
    experts model runs as its active view plus its experts' terms (planner/moe_time.py); its model
    FLOPs (MFU) count the active parameters (planner/moe.py). `internode_scale` (per plan): each plan's
    inter-node bandwidth x this (planner/network_need.py asks how the step depends on the network)."""
    layout = _as_float(layout)
    moe_spec, spec = spec, moe.dense_view(spec)
    prof = merged(per_candidate(stack_profiles(settings), layout), fp8.per_candidate(fp8.recipes(settings), layout))
    prof = deepspeed_era.with_fetch_overlap(prof, system.deepspeed_version)
    prof = megatron_ddp.with_ddp_overlap(prof, system.ddp_after_backward, system.megatron_core_buckets,
                                         system.grad_reduce_bytes)
    links = comm.Links.of(system, settings)
    if internode_scale is not None:
        links = replace(links, inter_node_Bps=links.inter_node_Bps * np.asarray(internode_scale, dtype=np.float64))
    parts = _compute_parts(spec, layout, system, settings, prof)
    if moe_spec is not spec:  # torchtitan's expert units (ep > 1), on top of one unit per block
        moe_layers = parts["layers"] * moe.n_moe_layers(moe_spec) / moe_spec.n_layers
        parts["unit_overhead"] = parts["unit_overhead"] + 1e-6 * shard_units.expert_units(layout, moe_layers)
    scaled = {k: parts[k] * prof[f] for k, f in FACTORS.items() if k in parts}
    micro = sum(scaled.values())
    mt = _moe_terms(moe_spec, spec, layout, system, settings, links, prof, parts)
    micro = micro + mt["moe_gemm_s"] * prof["gemm_time_factor"]
    mt = moe_time.overlapped(mt, micro, layout, parts["layers"], system.gpu, settings, prof["gemm_time_factor"])
    fwd_micro = micro * parts["fwd_share"]
    bwd_micro = micro - fwd_micro
    ga = layout.grad_accum
    optimizer_raw = _optimizer_step_s(spec, layout, system, settings)
    compute_s = ga * micro + optimizer_raw * prof["optimizer_time_factor"] + prof["step_overhead_s"]

    tp_s, cp_s, pp_s, exch_s, cp_hidden = mp_comm.exposed_s(spec, layout, links, system, parts, prof)
    # k (comm_time_factor) slows the collectives, not the compute they hide behind (planner/dp_comm.py); they
    # hide behind the attention the CP ring's exchange has not already taken (one second of compute hides at
    # most one second of communication: both ride the NICs once cp spans nodes)
    dp_fwd = fwd_micro - parts["fwd_share"] * cp_hidden
    dp_bwd = bwd_micro - (1.0 - parts["fwd_share"]) * cp_hidden
    dp_s, _node_bytes = dp_comm.exposed_s(spec, layout, links, dp_fwd, dp_bwd, prof, hbm_Bps=_hbm_Bps(system, settings),
                                          moe_spec=moe_spec)
    comm_s = tp_s + cp_s + pp_s + dp_s + mt["moe_a2a_s"] + mt["moe_expert_grad_s"]
    # Pipeline bubble: the makespan of the stages, each with its comm, less the busiest stage's
    # busy time (Alpa eq. 2, Narayanan et al. SC21 sec. 2.2: planner/pipeline_comm.py)
    busy = ga * micro + tp_s + cp_s + pp_s + mt["moe_a2a_s"]
    logits_s = parts["logits"] * (0.75 * prof["gemm_time_factor"] + 0.25 * prof["elementwise_time_factor"])
    bubble_s = pipeline_comm.bubble_s(spec.n_layers, parts["split"], busy, pp_s, logits_s, exch_s, parts["layers"],
                                      parts["with_logits"], layout.pp, layout.vpp, ga)
    with np.errstate(divide="ignore", invalid="ignore"):
        bubble_frac = np.where(busy > 0, bubble_s / np.where(busy > 0, busy, 1.0), 0.0)
        sc21 = pipeline_stages.bubble_fraction(layout.pp, ga, layout.vpp)
        stage_factor = np.where(sc21 > 0, bubble_frac / np.where(sc21 > 0, sc21, 1.0), 1.0)
    offload_s = offload_time.offload_s(layout, links, system, _optimizer_shard(spec, layout),
                                       OPTIMIZER_BYTES_PER_PARAM[OPTIM["adamw"]], micro, bwd_micro, prof)
    offload_s = offload_s + activation_offload_s(spec, layout, links)
    step = compute_s + comm_s + bubble_s + offload_s

    tokens_step = (layout.global_batch * layout.seq_len).astype(np.float64)
    gpus = layout.gpus.astype(np.float64)
    tps = tokens_step / step
    peak = _peak16(system, layout.precision)
    model_tf = flops.model_flops_per_token(moe_spec, layout.seq_len) * tps / gpus / 1e12
    hw_tf = flops.hardware_flops_per_token(moe_spec, layout.seq_len, layout.activation_checkpointing,
                                           layout.checkpoint_fraction) * tps / gpus / 1e12
    parts_stack = np.stack(np.broadcast_arrays(compute_s, comm_s, bubble_s, offload_s))

    out = {
        "step_time_s": step,
        "compute_s": compute_s,
        "comm_exposed_s": comm_s,
        "bubble_s": bubble_s,
        "offload_s": offload_s,
        "bottleneck": BOTTLENECKS[np.argmax(parts_stack, axis=0)],
        "tokens_per_s": tps,
        "tokens_per_s_per_gpu": tps / gpus,
        "samples_per_s": layout.global_batch / step,
        "model_tflops_per_gpu": model_tf,
        "hw_tflops_per_gpu": hw_tf,
        "mfu": model_tf * 1e12 / peak,
        "hfu": hw_tf * 1e12 / peak,
        "internode_gbps_available": np.broadcast_to(system.internode_gbps, np.shape(step)),
        # raw parts per step (before the stack's factors), for the profile fit and --explain
        "raw_gemm_s": ga * parts["gemm"],
        "raw_attention_s": ga * parts["attention"],
        "raw_elementwise_s": ga * parts["elementwise"],
        "raw_overhead_s": ga * parts["overhead"],
        "raw_unit_overhead_s": ga * parts["unit_overhead"],
        "raw_launch_sync_s": ga * parts["launch_sync"],
        "raw_dp_comm_s": dp_s / prof["comm_time_factor"],  # per unit of k (the fit's column: dp_exposure.py)
        "raw_optimizer_s": optimizer_raw,
        "raw_step_overhead_s": np.ones(np.shape(step)),  # x step_overhead_s
        "bubble_fraction": bubble_frac,
        "bubble_stage_factor": np.broadcast_to(stage_factor, np.shape(step)),
        "optimizer_s": optimizer_raw * prof["optimizer_time_factor"],
        "launch_sync_s": ga * scaled["launch_sync"],
        "dp_comm_s": dp_s,
        "tp_comm_s": tp_s,
        "cp_comm_s": cp_s,
        "pp_comm_s": pp_s,
    }
    if fit_columns:  # the profile fit's tangent of the DP exposure in k and in the compute
        out.update(dp_exposure.fit_columns(spec, layout, links, dp_fwd, dp_bwd, prof, hbm_Bps=_hbm_Bps(
            system, settings), exposed=dp_s, compute_s=ga * micro, moe_spec=moe_spec))
    nan = np.full(np.shape(step), np.nan)
    if moe_spec is not spec:  # the MoE terms (absent for a dense model: None in the breakdown)
        out.update({"moe_compute_s": ga * mt["moe_gemm_s"] * prof["gemm_time_factor"], "moe_a2a_s": mt["moe_a2a_s"],
                    "moe_expert_grad_s": mt["moe_expert_grad_s"],
                    "moe_expert_gemm_s": ga * mt["moe_expert_gemm_s"] * prof["gemm_time_factor"]})  # all of it
    if settings.tokens is not None:
        days = settings.tokens / tps / 86400.0
        out["days"] = days
        out["gpu_hours"] = days * 24.0 * gpus
        price = settings.price_per_gpu_hour
        out["cost"] = out["gpu_hours"] * price if price is not None else nan
    return out


def _moe_terms(spec, view, layout, system, settings, links, prof, parts) -> dict[str, np.ndarray]:
    """planner/moe_time.py's terms at this plan's GEMM peaks (zeros for a dense model)."""
    k = settings.calibration.compute
    peak = _peak_flops(system, layout.precision) * k
    gemm_peak = np.where(layout.precision == PREC["fp8"], peak * prof["gemm_efficiency"], peak)
    return moe_time.terms(spec, view, layout, system, links, prof, parts, gemm_peak,
                          _peak16(system, layout.precision) * k, _efficiency_points(system),
                          # the experts' gradients reduce in the dtype the dense ones do (planner/dp_comm.py exposed_s)
                          dp_comm.grad_bytes(layout, prof.get("grad_reduce_bytes"), prof["fsdp_reduce_fp32"]),
                          _hbm_Bps(system, settings), moe_time.load_factor(settings), settings.moe_fp8_dispatch,
                          settings.moe_node_limit, _peak16(system, layout.precision) / peak)


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
