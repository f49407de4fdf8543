"""Step-time terms of a mixture-of-experts model beyond its active view (pure, vectorised over plans);
planner/throughput.py runs the view (planner/moe.py `dense_view`) and adds these.

- Grouped expert GEMMs (planner/moe_gemm.py, checked against DeepGEMM's grouped-GEMM figures): a
  token's top-k routed experts run as one grouped GEMM per projection over the local experts, of
  M = the tokens routed to each (tokens x top-k x ep x etp / (tp x experts) per micro batch, times the
  busiest rank's load), N/K = the expert's width split by etp; forward, input- and weight-gradient
  passes each timed (tensor cores or operand reads, plus the epilogue's writes: the weight gradient
  accumulates into the fp32 main gradient); the view charged the same FLOPs as one wide dense GEMM of
  M = tokens: the difference is added, with the router's GEMM.
- Router load (`load_factor`): with a capacity factor c (Settings.moe_capacity_factor; GShard,
  Lepikhin et al. 2020, and Switch Transformer, Fedus et al. 2022, sec. 2.2: expert capacity =
  c x tokens x top-k / experts; Megatron-Core --moe-expert-capacity-factor with
  --moe-pad-expert-input-to-capacity) every expert's buffer is padded to c x the mean: the GEMMs and
  all-to-alls run c x the balanced rows (tokens beyond capacity dropped). Dropless (None, Megatron-Core's
  default): the busiest expert rank gets more than its share, LOAD_IMBALANCE x the mean, Switch's
  capacity factor 1.25 (ibid. Table 1: the capacity that leaves few tokens dropped with the auxiliary
  load-balancing loss; GShard trains with 2). Megatron's capacity without padding drops but does not
  pad: its busiest rank runs at most c x the mean, between the two.
- Expert-parallel all-to-all: dispatch and combine in forward, their two transposes in backward
  (and the forward's two again when a block is recomputed), per MoE layer and micro batch; each GPU
  sends tokens x hidden x top-k x bytes x (ep-1)/ep: the top-k copies of its tokens' hidden states,
  all but the 1/ep bound for its own experts (DeepSpeed-MoE, Rajbhandari et al. 2022, arXiv
  2201.05596; deepspeed/moe/sharded_moe.py MOELayer.forward runs two all-to-alls, dispatch and
  combine, of the routed tokens x model dim), over NVLink while the ep group fits in a node, else the
  NICs (planner/context_parallel.py `all_to_all_s`: the node's share over NVLink, the rest over the
  GPU's own NIC, both at once: NCCL's all-to-all, NVIDIA/nccl-tests#130 and NVIDIA/nccl#866).
  Checked against DeepEP's and NCCL's figures (tests/planner/test_moe_microbench.py). FP8 dispatch
  (Settings.moe_fp8_dispatch; DeepEP, DeepSeek-V3 sec. 3.3.2): the forward dispatch and its backward
  counterpart carry e4m3 values plus one fp32 scale per 128 (1 + 4/128 bytes per element), the combines
  bf16. Node-limited routing (Settings.moe_node_limit = M; DeepSeek-V3 sec. 3.2.2: each token to at
  most M nodes, sent once to each over InfiniBand and forwarded to its experts' GPUs over NVLink;
  DeepEP's normal kernels, Megatron-Core's flex dispatcher): a GPU's NIC carries its tokens once per
  remote node chosen (min(M, nodes, top-k) of the ep group's nodes, its own among them at random),
  its NVLink the tokens forwarded to it. Not overlapped with compute by default (Megatron-Core's default);
  Settings.moe_a2a_overlap / moe_shared_expert_overlap hide it behind compute (planner/moe_overlap.py).
- Expert gradients: reduced over the expert-data-parallel group instead of the view's dp x cp group
  (the expert part's collective in place of the view's top-k share of it), not hidden further; under
  DeepSpeed ZeRO-3 none: planner/zero3.py gathers and reduces every expert with the view's parameters.
  torchtitan with ep > 1 under FSDP: the experts are a unit of their own per MoE layer (planner/shard_units.py
  `expert_units`), gathered twice and reduce-scattered once per micro batch over edp, one call per layer each.
"""

from __future__ import annotations

import numpy as np

from planner import comm, flops, fp8_gemm, gemm_shape, moe, moe_gemm, moe_parallel, ssm
from planner.context_parallel import all_to_all_s
from planner.layout import PREC, SHARD, Layout
from planner.memory import compute_dtype_bytes

LOAD_IMBALANCE = 1.25
FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128.0  # e4m3 + an fp32 scale per 128 elements (DeepEP's fp8 dispatch)

ZERO = ("moe_gemm_s", "moe_a2a_s", "moe_expert_grad_s", "moe_expert_gemm_s", "moe_a2a_layer_s", "moe_layers",
        "moe_shared_gemm_s")


def _f(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def load_factor(settings) -> float:
    """The busiest expert rank's routed tokens over the balanced mean: the capacity factor (padded to
    capacity) or, dropless, LOAD_IMBALANCE."""
    c = getattr(settings, "moe_capacity_factor", None)
    return LOAD_IMBALANCE if c is None else float(c)


def tokens_per_expert(spec, layout: Layout) -> np.ndarray:
    """M of one local expert's GEMM per micro batch (balanced routing)."""
    tokens = _f(layout.micro_batch) * layout.seq_len / layout.cp
    return tokens * spec.moe_top_k * _f(layout.ep) * layout.etp / (_f(layout.tp) * spec.moe_experts)


def expert_passes_s_per_token(spec, layout: Layout, gpu, pts, gemm_peak, hbm_Bps, load=LOAD_IMBALANCE) -> dict:
    """Seconds per token (of the stage's micro batch) of one MoE layer's grouped expert GEMMs on one GPU
    at the busiest rank's load (`load` x the balanced M), by pass: fwd, dgrad, wgrad. fp8 plans read their
    operands in 1 byte (planner/fp8_gemm.py; the grouped GEMM writes bf16), as DeepGEMM's kernels
    (planner/moe_gemm.py: why the size curve stays unshifted)."""
    eb = np.where(_is_fp8(layout), fp8_gemm.FP8_OPERAND_BYTES, compute_dtype_bytes(layout))
    m = load * tokens_per_expert(spec, layout)
    local = spec.moe_experts / _f(layout.ep)
    passes = moe_gemm.expert_passes_s(m, moe.mlp_matrices(spec), spec.hidden, moe.expert_ffn(spec) / _f(layout.etp),
                                      local, gemm_shape.GemmShapeData.of(gpu), pts, gemm_peak, hbm_Bps, eb)
    tokens = _f(layout.micro_batch) * layout.seq_len / layout.cp
    return {k: v / tokens for k, v in passes.items()}


def view_expert_gemm_s_per_token(spec, view, layout: Layout, gpu, pts, gemm_peak, hbm_Bps=np.inf,
                                 peak16_over_peak=1.0) -> np.ndarray:
    """What the view charged, per token and MoE layer, for the routed experts' share of its MLP GEMMs
    (planner/throughput.py's dense GEMM time, fp8 rules included)."""
    tokens = _f(layout.micro_batch) * layout.seq_len / layout.cp
    gemms = flops.block_gemms(view, tokens, layout.tp)[2:]  # up (and gate), down
    shapes = gemm_shape.plan_factors(view, layout, gpu)[0][2:]
    dims = gemm_shape.block_linear_dims(view, layout.tp)[2:]
    t = sum(fp8_gemm.gemm_s_per_token(per_token, size, tokens, n, k, q, gemm_peak, peak16_over_peak, pts, hbm_Bps,
                                      _is_fp8(layout))
            for (per_token, size), q, (n, k) in zip(gemms, shapes, dims))
    share = spec.moe_top_k * moe.expert_ffn(spec) / view.ffn
    return share * t / ssm.mlp_share(view)  # a hybrid view's block GEMMs carry its MLP share (planner/ssm.py)


def _is_fp8(layout: Layout) -> np.ndarray:
    return np.asarray(layout.precision) == PREC["fp8"]


def router_s_per_token(spec, layout: Layout, pts, peak16) -> np.ndarray:
    tokens = _f(layout.micro_batch) * layout.seq_len / layout.cp
    per_token = 2.0 * spec.hidden * spec.moe_experts / _f(layout.tp)
    return per_token / (peak16 * flops.efficiency(pts, tokens * per_token / 1e9))


def a2a_bytes_per_call(spec, layout: Layout) -> np.ndarray:
    """Bytes one GPU sends in one dispatch (or combine) all-to-all: its tokens (a tp rank's share,
    repeated on the etp ranks) x hidden x top-k x bytes x (ep-1)/ep."""
    tokens = _f(layout.micro_batch) * layout.seq_len / layout.cp * layout.etp / layout.tp
    ep = _f(layout.ep)
    return tokens * spec.hidden * spec.moe_top_k * compute_dtype_bytes(layout) * (ep - 1.0) / ep


def a2a_calls_per_layer(layout: Layout) -> np.ndarray:
    """Dispatch + combine forward, their transposes backward, the forward's again where recomputed."""
    block, _, _ = flops.recompute_share(layout.activation_checkpointing, layout.checkpoint_fraction)
    return 4.0 + 2.0 * block


def node_limited_s(spec, links: comm.Links, sent, ep, m, calls, node_limit) -> np.ndarray:
    """The all-to-alls of node-limited routing with hierarchical dispatch; `sent`: the top-k copies'
    bytes a flat all-to-all would send (a2a_bytes_per_call's convention, every call)."""
    nodes = np.maximum(ep / m, 1.0)
    per_copy = sent / (spec.moe_top_k * (ep - 1.0) / np.maximum(ep, 1.0) + 1e-30)  # one copy of the tokens
    chosen = np.minimum(np.minimum(float(node_limit), nodes), spec.moe_top_k)
    nic = per_copy * chosen * (nodes - 1.0) / nodes
    nvlink = per_copy * spec.moe_top_k * (m - 1.0) / m  # forwarded to this GPU's experts inside the node
    inter_bw = np.minimum(links.intra_Bps, links.inter_node_Bps / links.gpus_per_node)
    t = np.maximum(nic / inter_bw, nvlink / links.intra_Bps) + calls * comm.INTERNODE_LATENCY_S
    return np.where(ep > m, t, all_to_all_s(links, sent, ep, m, calls))


def a2a_s_per_layer(spec, layout: Layout, links: comm.Links, load=LOAD_IMBALANCE, fp8_dispatch=False,
                    node_limit=None) -> np.ndarray:
    """Every all-to-all of one MoE layer and micro batch: half of the calls dispatch (forward dispatch,
    the combine's backward, the recomputed dispatch), half combine."""
    ep = _f(layout.ep)
    m = np.minimum(comm.members_per_node(ep, layout.etp, links.gpus_per_node), ep)
    calls = a2a_calls_per_layer(layout)
    dispatch = FP8_DISPATCH_BYTES / compute_dtype_bytes(layout) if fp8_dispatch else 1.0
    sent = load * 0.5 * calls * (1.0 + dispatch) * a2a_bytes_per_call(spec, layout)
    if node_limit is None:
        return all_to_all_s(links, sent, ep, m, calls)
    return (ep > 1) * node_limited_s(spec, links, sent, ep, m, calls, node_limit)


def _grad_collective_s(links, group, stride, params, gbytes, layout) -> np.ndarray:
    """An all-reduce's worth (DDP all-reduce; ZeRO-1/2 reduce-scatter + all-gather; FSDP every micro
    batch's gathers and reduce-scatter) of `params` over a group."""
    g = comm.Group.of(links, group, comm.members_per_node(group, stride, links.gpus_per_node))
    once = g.allreduce_s(params * gbytes)
    fsdp = layout.is_fsdp * (layout.grad_accum * 1.5 - 1.0)  # 2 gathers + 1 reduce-scatter = 1.5 all-reduces
    return once * (1.0 + fsdp)


def expert_grad_s(spec, view, layout: Layout, links: comm.Links, gbytes, moe_layers=0.0) -> np.ndarray:
    from planner.moe_memory import expert_params_per_gpu, view_expert_params_per_gpu
    from planner.shard_units import expert_units

    # DeepSpeed ZeRO-3 gathers and reduce-scatters every expert with the rest of the model (planner/zero3.py)
    zero3 = np.asarray(layout.sharding) == SHARD["zero3"]
    edp = moe_parallel.edp(layout)
    p_e = expert_params_per_gpu(spec, view, layout)
    experts = _grad_collective_s(links, edp, _f(layout.ep) * layout.etp, p_e, gbytes, layout)
    # torchtitan ep > 1: per micro batch, each MoE layer's expert unit gathered for forward and backward and
    # reduce-scattered, one call each (planner/shard_units.py expert_units)
    units = expert_units(layout, moe_layers)
    g = comm.Group.of(links, edp, comm.members_per_node(edp, _f(layout.ep) * layout.etp, links.gpus_per_node))
    calls = np.maximum(units, 1.0)
    unit_wise = layout.grad_accum * (2.0 * g.allgather_s(p_e * compute_dtype_bytes(layout), calls)
                                     + g.allgather_s(p_e * gbytes, calls))
    experts = np.where(units > 0, unit_wise, experts)
    in_view = _grad_collective_s(links, _f(layout.dp) * layout.cp, layout.tp,
                                 view_expert_params_per_gpu(spec, view, layout), gbytes, layout)
    return np.where(zero3, 0.0, np.maximum(experts - in_view, 0.0))


def terms(spec, view, layout: Layout, system, links: comm.Links, prof, parts, gemm_peak, peak16, pts, gbytes,
          hbm_Bps, load=LOAD_IMBALANCE, fp8_dispatch=False, node_limit=None, peak16_over_peak=1.0):
    """Per-micro-batch compute seconds (raw, before the stack's GEMM factor) and per-step exposed
    communication seconds of the MoE layers of the busiest stage, by part; `load`: the busiest expert
    rank's tokens over the mean (LOAD_IMBALANCE by default); `peak16_over_peak`: 16-bit peak / the plan's
    peak (the view's fp8 GEMMs' size curve, planner/fp8_gemm.py)."""
    zero = np.zeros(np.shape(layout.tp))
    if not moe.is_moe(spec):
        return {k: zero for k in ZERO}
    tokens = _f(layout.micro_batch) * layout.seq_len / layout.cp
    block, _, linear_share = flops.recompute_share(layout.activation_checkpointing, layout.checkpoint_fraction)
    passes_fwd = 3.0 + block + linear_share  # forward, two backward GEMMs, the recomputed forward
    moe_layers = parts["layers"] * moe.n_moe_layers(spec) / spec.n_layers
    p = expert_passes_s_per_token(spec, layout, system.gpu, pts, gemm_peak, hbm_Bps, load)
    experts = (passes_fwd - 2.0) * p["fwd"] + p["dgrad"] + p["wgrad"]
    in_view = view_expert_gemm_s_per_token(spec, view, layout, system.gpu, pts, gemm_peak, hbm_Bps, peak16_over_peak)
    per_token = experts + passes_fwd * (router_s_per_token(spec, layout, pts, peak16) - in_view)
    gemm = moe_layers * tokens * per_token
    a2a_layer = a2a_s_per_layer(spec, layout, links, load, fp8_dispatch, node_limit)
    a2a = layout.grad_accum * moe_layers * a2a_layer
    shared = spec.moe_shared_experts * shared_ffn_share(spec) * passes_fwd * tokens * in_view
    grads = expert_grad_s(spec, view, layout, links, gbytes, moe_layers) * prof["comm_time_factor"]
    # moe_gemm_s: what the view did not charge; moe_expert_gemm_s: the routed experts' GEMMs in all (reported)
    return {"moe_gemm_s": gemm, "moe_a2a_s": a2a, "moe_expert_grad_s": grads,
            "moe_expert_gemm_s": moe_layers * tokens * experts,
            # per micro batch and MoE layer, for planner/moe_overlap.py: its all-to-alls, its shared experts' GEMMs
            "moe_a2a_layer_s": a2a_layer, "moe_layers": moe_layers, "moe_shared_gemm_s": shared}


def shared_ffn_share(spec) -> float:
    """One shared expert's MLP width over the routed experts' (top-k x expert width) of a token."""
    return moe.shared_ffn(spec) / (spec.moe_top_k * moe.expert_ffn(spec))


def overlapped(mt: dict, micro, layout: Layout, layers, gpu, settings, gemm_time_factor) -> dict:
    """`mt` with its exposed all-to-all after the settings' overlap (planner/moe_overlap.py); unchanged
    when neither overlap is set. `micro`: the stage's compute seconds per micro batch."""
    from planner import moe_overlap

    batch = getattr(settings, "moe_a2a_overlap", False)
    if not (batch or getattr(settings, "moe_shared_expert_overlap", False)):
        return mt
    share = moe_overlap.comm_sm_share(gpu)
    a2a_layer, n = mt["moe_a2a_layer_s"], mt["moe_layers"]
    if batch:
        a2a = moe_overlap.batch_overlap_a2a_s(a2a_layer, n, layers, micro, layout.pp, layout.vpp,
                                              layout.grad_accum, share)
    else:
        a2a = moe_overlap.shared_overlap_a2a_s(a2a_layer, n, mt["moe_shared_gemm_s"] * gemm_time_factor,
                                               layout.grad_accum, share)
    return {**mt, "moe_a2a_s": np.where(n > 0, a2a, mt["moe_a2a_s"])}


__all__ = ["FP8_DISPATCH_BYTES", "LOAD_IMBALANCE", "a2a_bytes_per_call", "a2a_calls_per_layer", "load_factor",
           "overlapped", "terms", "tokens_per_expert"]
