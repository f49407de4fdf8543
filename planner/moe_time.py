"""Step-time terms of a mixture-of-experts model beyond its active view (pure, vectorised over plans);
planner/throughput.py runs the view (planner/moe.py `dense_view`) and adds these.

- Grouped expert GEMMs: a token's top-k routed experts run as small GEMMs, one per local expert, of
  M = the tokens routed to that expert (tokens x top-k x ep x etp / (tp x experts) per micro batch),
  N/K = the expert's width split by etp. Their efficiency comes from the GPU's GEMM-size curve (the
  group's FLOPs, one grouped kernel) times the tile and wave quantization of planner/gemm_shape.py
  at the per-expert M (the local experts' tiles run in the same waves), bounded by the HBM time of
  the local experts' weights and tokens (few rows per expert: memory-bound); the view charged the same
  FLOPs as one wide dense GEMM of M = tokens: the difference is added, with the router's GEMM.
- Router load imbalance: the busiest expert rank gets more than its share of tokens; its expert
  GEMMs and all-to-all volume are scaled by LOAD_IMBALANCE, Switch Transformer's capacity factor
  1.25 (Fedus et al. 2022, JMLR 23, sec. 2.2 and Table 1: the capacity that leaves few tokens
  dropped with the auxiliary load-balancing loss; GShard trains with 2, Lepikhin et al. 2020).
- Expert-parallel all-to-all: dispatch and combine in forward, their two transposes in backward
  (and the forward's two again when a block is recomputed), per MoE layer and micro batch; each GPU
  sends tokens x hidden x top-k x bytes x (ep-1)/ep: the top-k copies of its tokens' hidden states,
  all but the 1/ep bound for its own experts (DeepSpeed-MoE, Rajbhandari et al. 2022, arXiv
  2201.05596; deepspeed/moe/sharded_moe.py MOELayer.forward runs two all-to-alls, dispatch and
  combine, of the routed tokens x model dim), over NVLink while the ep group fits in a node, else the
  NICs (planner/context_parallel.py `all_to_all_s`). Not overlapped with compute (Megatron-Core's
  default; its 1F1B all-to-all overlap is opt-in).
- Expert gradients: reduced over the expert-data-parallel group instead of the view's dp x cp group
  (the expert part's collective in place of the view's top-k share of it), not hidden further.
"""

from __future__ import annotations

import numpy as np

from planner import comm, flops, gemm_shape, moe, moe_parallel, ssm
from planner.context_parallel import all_to_all_s
from planner.layout import Layout
from planner.memory import compute_dtype_bytes

LOAD_IMBALANCE = 1.25

ZERO = ("moe_gemm_s", "moe_a2a_s", "moe_expert_grad_s")


def _f(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def tokens_per_expert(spec, layout: Layout) -> np.ndarray:
    """M of one local expert's GEMM per micro batch (balanced routing)."""
    tokens = _f(layout.micro_batch) * layout.seq_len / layout.cp
    return tokens * spec.moe_top_k * _f(layout.ep) * layout.etp / (_f(layout.tp) * spec.moe_experts)


def _grouped_efficiency(m, n, k, local, shape, eb) -> np.ndarray:
    """Forward, input-gradient and weight-gradient GEMMs of `local` experts at once (gemm_shape's rules)."""
    fwd = gemm_shape.gemm_efficiency(m, n, k, shape, batch=local, elem_bytes=eb)
    dgrad = gemm_shape.gemm_efficiency(m, k, n, shape, batch=local, elem_bytes=eb)
    wgrad = gemm_shape.gemm_efficiency(n, k, m, shape, batch=local, elem_bytes=eb)
    return gemm_shape.harmonic([fwd, dgrad, wgrad])


def expert_gemm_s_per_token(spec, layout: Layout, gpu, pts, gemm_peak, hbm_Bps) -> np.ndarray:
    """Forward seconds per token (of the stage's micro batch) of one MoE layer's grouped expert GEMMs
    on one GPU, at the busiest rank's load; no faster than reading the local experts' weights and the
    routed tokens from HBM (the roofline, Williams et al. 2009: a few rows per expert leave the GEMM
    memory-bound)."""
    h, w, mats = spec.hidden, moe.expert_ffn(spec), moe.mlp_matrices(spec)
    etp = _f(layout.etp)
    m = tokens_per_expert(spec, layout)
    local = spec.moe_experts / _f(layout.ep)
    shape = gemm_shape.GemmShapeData.of(gpu)
    eb = compute_dtype_bytes(layout)
    tokens = _f(layout.micro_batch) * layout.seq_len / layout.cp
    t = 0.0
    for n, k in ((w * (mats - 1) / etp, np.full(np.shape(etp), float(h))), (np.full(np.shape(etp), float(h)), w / etp)):
        per_token = 2.0 * n * k * spec.moe_top_k * etp / _f(layout.tp)  # per token of the micro batch
        group_gflop = m * local * 2.0 * n * k / 1e9
        eff = flops.efficiency(pts, group_gflop) * _grouped_efficiency(m, n, k, local, shape, eb)
        streamed = local * (n * k + m * (n + k)) * eb / hbm_Bps / tokens  # weights, inputs, outputs
        t = t + np.maximum(per_token / (gemm_peak * eff), streamed)
    return LOAD_IMBALANCE * t


def view_expert_gemm_s_per_token(spec, view, layout: Layout, gpu, pts, gemm_peak) -> np.ndarray:
    """What the view charged, per token and MoE layer, for the routed experts' share of its MLP GEMMs."""
    tokens = _f(layout.micro_batch) * layout.seq_len / layout.cp
    gemms = flops.block_gemms(view, tokens, layout.tp)[2:]  # up (and gate), down
    shapes = gemm_shape.plan_factors(view, layout, gpu)[0][2:]
    t = sum(per_token / (gemm_peak * flops.efficiency(pts, size) * q) for (per_token, size), q in zip(gemms, shapes))
    share = spec.moe_top_k * moe.expert_ffn(spec) / view.ffn
    return share * t / ssm.mlp_share(view)  # a hybrid view's block GEMMs carry its MLP share (planner/ssm.py)


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


def a2a_s_per_layer(spec, layout: Layout, links: comm.Links) -> np.ndarray:
    ep = _f(layout.ep)
    m = comm.members_per_node(ep, layout.etp, links.gpus_per_node)
    calls = a2a_calls_per_layer(layout)
    return all_to_all_s(links, LOAD_IMBALANCE * calls * a2a_bytes_per_call(spec, layout), ep, m, calls)


def _grad_collective_s(links, group, stride, params, gbytes, layout) -> np.ndarray:
    """An all-reduce's worth (DDP all-reduce; ZeRO-1/2 reduce-scatter + all-gather; FSDP every micro
    batch's gathers and reduce-scatter) of `params` over a group."""
    g = comm.Group.of(links, group, comm.members_per_node(group, stride, links.gpus_per_node))
    once = g.allreduce_s(params * gbytes)
    fsdp = layout.is_fsdp * (layout.grad_accum * 1.5 - 1.0)  # 2 gathers + 1 reduce-scatter = 1.5 all-reduces
    return once * (1.0 + fsdp)


def expert_grad_s(spec, view, layout: Layout, links: comm.Links, gbytes) -> np.ndarray:
    from planner.moe_memory import expert_params_per_gpu, view_expert_params_per_gpu

    edp = moe_parallel.edp(layout)
    experts = _grad_collective_s(links, edp, _f(layout.ep) * layout.etp, expert_params_per_gpu(spec, view, layout),
                                 gbytes, layout)
    in_view = _grad_collective_s(links, _f(layout.dp) * layout.cp, layout.tp,
                                 view_expert_params_per_gpu(spec, view, layout), gbytes, layout)
    return np.maximum(experts - in_view, 0.0)


def terms(spec, view, layout: Layout, system, links: comm.Links, prof, parts, gemm_peak, peak16, pts, gbytes,
          hbm_Bps):
    """Per-micro-batch compute seconds (raw, before the stack's GEMM factor) and per-step exposed
    communication seconds of the MoE layers of the busiest stage, by part."""
    zero = np.zeros(np.shape(layout.tp))
    if not moe.is_moe(spec):
        return {k: zero for k in ZERO}
    tokens = _f(layout.micro_batch) * layout.seq_len / layout.cp
    block, _, linear_share = flops.recompute_share(layout.activation_checkpointing, layout.checkpoint_fraction)
    moe_layers = parts["layers"] * moe.n_moe_layers(spec) / spec.n_layers
    per_token = (expert_gemm_s_per_token(spec, layout, system.gpu, pts, gemm_peak, hbm_Bps)
                 - view_expert_gemm_s_per_token(spec, view, layout, system.gpu, pts, gemm_peak)
                 + router_s_per_token(spec, layout, pts, peak16))
    gemm = moe_layers * tokens * per_token * (3.0 + block + linear_share)
    a2a = layout.grad_accum * moe_layers * a2a_s_per_layer(spec, layout, links)
    grads = expert_grad_s(spec, view, layout, links, gbytes) * prof["comm_time_factor"]
    return {"moe_gemm_s": gemm, "moe_a2a_s": a2a, "moe_expert_grad_s": grads}


__all__ = ["LOAD_IMBALANCE", "a2a_bytes_per_call", "a2a_calls_per_layer", "terms", "tokens_per_expert"]
