"""Exposed seconds of the data-parallel collectives (DDP, ZeRO-1/2/3, FSDP, HSDP) per step, and the
inter-node bytes they move (planner/throughput.py adds them to the step; pure, vectorised)."""

from __future__ import annotations

import numpy as np

from planner import comm, fsdp_overlap, grad_buckets, interleaved_dp, param_gather, zero3, zeropp
from planner.layout import GRAD_REDUCE, PREC, SHARD, Layout
from planner.memory import compute_dtype_bytes
from planner.model import ModelSpec


def params_per_gpu(spec: ModelSpec, layout: Layout) -> np.ndarray:
    return spec.n_params / (layout.tp * layout.pp).astype(np.float64)


def grad_bytes(layout: Layout, stated=None, fsdp_fp32=None) -> np.ndarray:
    """Bytes per gradient element on the wire: AMP keeps fp32 grads under DDP; DeepSpeed and
    FSDP mixed precision reduce in 16 bit (Micikevicius et al. 2018; FSDP MixedPrecision); `stated`: what
    the run's framework reduces in where it fixes it (Megatron-LM fp16: 2, planner/megatron_ddp.py);
    `fsdp_fp32` (per candidate, the profile's fsdp_reduce_fp32): an FSDP stack whose reduce-scatters run in fp32
    whatever the compute dtype (torchtitan's mixed_precision_reduce accepts only "float32"). The
    plan's grad_reduce_dtype, where it names one, wins: fp32 reduces 4 bytes (Megatron-Core
    param_and_grad_buffer.py reduce-scatters its grad_data, fp32 with grad_reduce_in_fp32; DeepSpeed
    engine.py communication_data_type; FSDP2 MixedPrecisionPolicy.reduce_dtype), bf16 2 (fp32 plans: 4)."""
    p = layout.precision
    fp32_grads = (p == PREC["fp32"]) | ((layout.sharding == SHARD["none"]) & (p != PREC["bf16_pure"]))
    default = 2.0 + 2.0 * fp32_grads
    if fsdp_fp32 is not None:
        # fp16 too: the FSDP export writes reduce_dtype float32 for it on such a stack (planner/grad_dtype.py);
        # bf16_pure: the reduction in the parameters' bf16
        mixed = (p == PREC["bf16"]) | (p == PREC["fp8"]) | (p == PREC["fp16"])
        default = np.where((np.asarray(fsdp_fp32) > 0) & mixed & (layout.sharding >= SHARD["fsdp_full_shard"]), 4.0,
                           default)
    default = default if stated is None else np.where(np.asarray(stated) > 0, stated, default)
    knob = np.asarray(getattr(layout, "grad_reduce_dtype", GRAD_REDUCE["default"]))
    return np.select([knob == GRAD_REDUCE["fp32"], knob == GRAD_REDUCE["bf16"]],
                     [4.0, np.where(p == PREC["fp32"], 4.0, 2.0)], default=default)


def gather_bytes(spec: ModelSpec, layout: Layout, prof) -> np.ndarray:
    """Bytes per parameter all-gathered by ZeRO-3/FSDP: the compute dtype, or 1 for the block
    linears under fp8 where the stack all-gathers float8 weights (torchao)."""
    c = compute_dtype_bytes(layout).astype(np.float64)
    f8 = (layout.precision == PREC["fp8"]) & (prof["fp8_allgather"] > 0)
    linear_share = spec.n_layers * spec.params_per_layer / spec.n_params
    return np.where(f8, c - linear_share * (c - 1.0), c)


def buckets(layout: Layout, P, gbytes, prof, dp) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """NCCL calls of (the DDP all-reduce, the ZeRO-1/2 reduce-scatter, the ZeRO-1/2 all-gather) per
    step of a GPU holding `P` parameters and `gbytes` gradient bytes: the stack's own bucket rule
    (Megatron-Core's max(40M, 1M x dp) parameters, one flat buffer for Megatron-LM's local DDP:
    planner/grad_buckets.py), else PyTorch DDP's bucket_cap_mb (the profile's ddp_bucket_mib) and
    DeepSpeed's reduce/allgather_bucket_size (the plan's)."""
    own = np.asarray(prof["grad_bucket_params"], dtype=np.float64) > 0
    ddp = np.where(own, grad_buckets.count(P, 1.0, dp, prof),
                   np.maximum(np.ceil(gbytes / (prof["ddp_bucket_mib"] * 2.0**20)), 1.0))
    rs = grad_buckets.count(P, layout.reduce_bucket_elems, dp, prof)
    ag = grad_buckets.count(P, layout.allgather_bucket_elems, dp, prof)
    return ddp, rs, ag


def _last_bucket_share(spec: ModelSpec, layout: Layout, buckets) -> np.ndarray:
    """Share of a bucketed gradient reduction that no backward is left to hide: the last bucket, which holds
    the input embedding (its gradient is ready when backward ends; DDP fills buckets in reverse
    parameter order and never splits a tensor: Li et al. VLDB 2020 sec. 3.2.3 and 4.1; Megatron-Core's
    distributed optimizer gives the shared embedding a bucket of its own). It is also the first bucket the
    next forward's parameter all-gather waits for. With pipeline stages the embedding sits on the first
    stage, not the busiest: one bucket's share."""
    emb = spec.vocab_padded * spec.hidden / layout.tp / params_per_gpu(spec, layout)
    return np.where(layout.pp == 1, np.maximum(np.minimum(emb, 1.0), 1.0 / buckets), 1.0 / buckets)


def exposed_s(spec, layout, links: comm.Links, fwd_micro, bwd_micro, prof, *, hbm_Bps, moe_spec=None):
    """Exposed seconds per step of DP/ZeRO/FSDP collectives, and inter-node bytes per node
    (`hbm_Bps`: the GPU memory bandwidth ZeRO++'s quantization kernels run at).

    The stack's comm_time_factor k slows the collectives only, not the compute they hide behind: each
    term is max(k x comm - overlap x compute, k x floor), as planner/zero3.py (a second of compute hides
    at most one second of communication). The data-parallel group is dp x cp: context-parallel ranks
    hold the same parameters. `moe_spec`: the mixture-of-experts model whose active view `spec` is
    (its ZeRO-3 fetch calls, planner/zero3.py)."""
    k = prof["comm_time_factor"]
    dp = layout.dp * layout.cp
    ga, s = layout.grad_accum, layout.sharding
    m = comm.members_per_node(dp, layout.tp, links.gpus_per_node)
    g = comm.Group.of(links, dp, m)
    P = params_per_gpu(spec, layout)
    gbytes = P * grad_bytes(layout, prof.get("grad_reduce_bytes"), prof["fsdp_reduce_fp32"])
    pbytes = P * gather_bytes(spec, layout, prof)
    nb_ddp, nb_r, nb_g = buckets(layout, P, gbytes, prof, dp)
    L = np.maximum(np.ceil(spec.n_layers / layout.pp), 1.0)
    is_ = {name: s == code for name, code in SHARD.items()}

    # DDP: one bucketed all-reduce at the accumulation boundary, pipelined behind the last backward
    # (Li et al. VLDB 2020; planner/grad_buckets.py).
    # Megatron-Core under the interleaved schedule: one reduction and one all-gather per model chunk, chunk 0 in
    # buckets, the others in one call each (planner/interleaved_dp.py)
    vp = interleaved_dp.on(layout, prof)
    n0_ddp = interleaved_dp.chunk0_buckets(P, 1.0, dp, layout.vpp, prof)
    nb_ddp = np.where(vp, n0_ddp + layout.vpp - 1.0, nb_ddp)
    ar = k * g.allreduce_s(gbytes, nb_ddp)
    ddp = np.where(vp, interleaved_dp.grad_sync_s(ar, prof["overlap_ddp"] * bwd_micro, layout.pp, layout.vpp),
                   grad_buckets.pipelined_s(ar, prof["overlap_ddp"] * bwd_micro, nb_ddp,
                                            _last_bucket_share(spec, layout, nb_ddp)))
    exposed = is_["none"] * ddp
    per_node = is_["none"] * g.node_bytes(gbytes, 2.0)
    # ZeRO-1/2 (DeepSpeed): reduce-scatter of grads (ZeRO-1 at the boundary, ZeRO-2 every micro
    # batch) behind backward, then an all-gather of the updated 16-bit parameters (Rajbhandari
    # et al. SC20).
    z12 = is_["zero1"] | is_["zero2"]
    n0_r = interleaved_dp.chunk0_buckets(P, layout.reduce_bucket_elems, dp, layout.vpp, prof)
    n0_g = interleaved_dp.chunk0_buckets(P, layout.allgather_bucket_elems, dp, layout.vpp, prof)
    nb_r, nb_g = np.where(vp, n0_r + layout.vpp - 1.0, nb_r), np.where(vp, n0_g + layout.vpp - 1.0, nb_g)
    rs = k * g.allgather_s(gbytes, nb_r)
    # ZeRO-1 reduces once, after backward in DeepSpeed (engine.allreduce_gradients): its own overlap
    ov12 = np.where(is_["zero1"], prof["overlap_zero1"], prof["overlap_zero12"])
    rs_hidden = np.where(vp, interleaved_dp.grad_sync_s(rs, ov12 * bwd_micro, layout.pp, layout.vpp),
                         grad_buckets.pipelined_s(rs, ov12 * bwd_micro, nb_r, _last_bucket_share(spec, layout, nb_r)))
    times = 1.0 + is_["zero2"] * (ga - 1.0)
    # the updated parameters' all-gather: after the step (DeepSpeed) or behind the next forward (Megatron)
    ag_s = k * g.allgather_s(pbytes, nb_g)
    ag12 = np.where(vp, interleaved_dp.param_gather_s(ag_s, prof["overlap_param_gather"] * fwd_micro, layout.pp,
                                                      layout.vpp, n0_g),
                    param_gather.exposed_s(ag_s, fwd_micro, prof["overlap_param_gather"], nb_g,
                                           _last_bucket_share(spec, layout, nb_g)))
    exposed = exposed + z12 * (times * rs_hidden + ag12)
    rs_b, ag_b = g.node_bytes(gbytes, 1.0), g.node_bytes(pbytes, 1.0)
    per_node = per_node + z12 * (times * rs_b + ag_b)
    # DeepSpeed ZeRO-3: fetches per submodule and recompute, every micro batch (planner/zero3.py).
    if np.any(is_["zero3"]):
        z3, z3_bytes = zero3.exposed_s(spec, layout, g, gather_bytes(spec, layout, prof), grad_bytes(layout),
                                       fwd_micro, bwd_micro, prof, moe_spec)
        zpp = zeropp.any_on(layout) & is_["zero3"]
        if np.any(zpp):  # ZeRO++: quantized / hierarchical ZeRO-3 collectives (planner/zeropp.py)
            q, q_bytes = zeropp.exposed_s(spec, layout, links, g, gather_bytes(spec, layout, prof), grad_bytes(layout),
                                          fwd_micro, bwd_micro, prof, hbm_Bps, moe_spec)
            z3, z3_bytes = np.where(zpp, q, z3), np.where(zpp, q_bytes, z3_bytes)
        exposed = exposed + is_["zero3"] * z3
        per_node = per_node + is_["zero3"] * z3_bytes
    # FSDP: gather parameters for forward and again for backward (not SHARD_GRAD_OP),
    # reduce-scatter grads, every micro batch, unit by unit behind the prefetch (Zhao et al. VLDB 2023).
    full = is_["fsdp_full_shard"] | is_["fsdp_shard_grad_op"]
    ov = prof["overlap_fsdp"]
    ag = k * g.allgather_s(pbytes, L)
    ag_bwd = ~is_["fsdp_shard_grad_op"] * ag
    rs_l = k * g.allgather_s(gbytes, L)
    floor = fsdp_overlap.exposed_floor  # the first gather / last reduce-scatter and more (fms-fsdp traces)
    sharded = ga * (np.maximum(ag - ov * fwd_micro, floor(ag, L))
                    + np.maximum(ag_bwd + rs_l - ov * bwd_micro, floor(ag_bwd + rs_l, L)))
    exposed = exposed + full * sharded
    gathers = 2.0 - is_["fsdp_shard_grad_op"]
    per_node = per_node + full * ga * (gathers * ag_b + rs_b)
    # Hybrid shard: shard inside the node, all-reduce the grad shard across nodes.
    hy = is_["fsdp_hybrid"]
    if np.any(hy):
        gi = comm.Group.of(links, m, m)
        replicas = np.maximum(dp // m, 1)
        gx = comm.Group.of(links, replicas, 1)
        ag_h, rs_h = k * gi.allgather_s(pbytes, L), k * gi.allgather_s(gbytes, L)
        ar_h = k * gx.allreduce_s(gbytes / m, L)
        ovf = prof["overlap_fsdp"]
        hybrid = ga * (np.maximum(ag_h - ovf * fwd_micro, floor(ag_h, L))
                       + np.maximum(ag_h + rs_h + ar_h - ovf * bwd_micro, floor(ag_h + rs_h + ar_h, L)))
        exposed = exposed + hy * hybrid
        per_node = per_node + hy * ga * gx.node_bytes(gbytes / m, 2.0)
    return exposed, per_node
