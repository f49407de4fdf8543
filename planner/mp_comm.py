"""Exposed tensor-, context- and pipeline-parallel communication of a step (planner/throughput.py's
model-parallel part): TP collectives with the stack's overlap (flat share, PyTorch async TP's fused
pairs, Transformer Engine userbuffers), the context-parallel exchange and the PP activation sends."""

from __future__ import annotations

import numpy as np

from planner import async_tp, comm, context_parallel, flops, fp8, parallel_block, pipeline_comm, tp_overlap
from planner.memory import compute_dtype_bytes
from planner.system import System


def exposed_s(spec, layout, links: comm.Links, system: System, parts, prof):
    """Exposed seconds per step of TP collectives (2 forward + 2 backward per block, 2 more when
    recomputing; Shoeybi et al. 2019; half of them in a parallel attention+MLP block:
    planner/parallel_block.py), the context-parallel exchange of the plan's cp_impl (ring
    K/V chunks, Ulysses all-to-alls, all-gathered K/V: planner/context_parallel.py) and PP
    activation exchanges (planner/pipeline_comm.py: 1 or 2 per micro batch and model chunk), the
    seconds of one exchange, and the seconds of one micro batch's CP ring exchange hidden behind attention."""
    tokens = layout.micro_batch * layout.seq_len / layout.cp
    c = compute_dtype_bytes(layout)
    act = c * tokens * spec.hidden
    layers = parts["layers"]
    block, _, linear_share = flops.recompute_share(layout.activation_checkpointing, layout.checkpoint_fraction)
    calls = layers * parallel_block.tp_calls_per_block(spec, block)
    m_tp = comm.members_per_node(layout.tp, 1, links.gpus_per_node)
    act = act * fp8.tp_bytes_factor(layout, prof, block)
    tp_raw = comm.Group.of(links, layout.tp, m_tp).tp_exchange_s(calls * act, calls, layout.sequence_parallel == 1)
    ov_tp = np.where(layout.async_tp == 1, prof["overlap_async_tp"], prof["overlap_tp"])
    gemm_micro = parts["gemm"] * prof["gemm_time_factor"]
    # a stack without its own async TP (generic): at most ov_tp of the TP time hidden beside all GEMMs
    tp_s = np.maximum(tp_raw - ov_tp * gemm_micro, tp_raw * (1 - ov_tp))
    block_gemm = parts["block_gemm"] * prof["gemm_time_factor"]
    # PyTorch's micro-pipelined fused pairs (planner/async_tp.py) or TE userbuffers (planner/tp_overlap.py)
    args = (spec, layout, tp_raw, block_gemm, layers, block, linear_share)
    pairs = np.where(np.asarray(prof["async_tp_fused_pairs"], dtype=bool), async_tp.exposed_s(*args, ov_tp),
                     tp_overlap.exposed_s(*args, system.gpu.sm_count))
    tp_s = layout.grad_accum * np.where((layout.async_tp == 1) & (prof["async_tp"] > 0), pairs, tp_s)

    attn_micro = parts["attention"] * prof["attention_time_factor"]
    cp_micro, cp_hidden = context_parallel.exposed_and_hidden_s(spec, layout, links, layers, attn_micro,
                                                                prof["overlap_cp"])
    cp_s = layout.grad_accum * cp_micro

    # Scatter/gather optimisation or sequence parallelism: each GPU sends 1/t of the tensor; the
    # busiest stage's exchanges per micro batch (planner/pipeline_comm.py)
    p2p_bytes = act / layout.tp
    inter = layout.gpus > system.gpus_per_node
    exch = pipeline_comm.exchange_s(links, p2p_bytes, inter)
    pp_s = layout.grad_accum * parts["pp_exchanges"] * exch
    return tp_s, cp_s, pp_s, exch, cp_hidden
