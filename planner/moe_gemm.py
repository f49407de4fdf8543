"""Grouped expert GEMMs of a mixture-of-experts layer on one GPU (pure, vectorised): the time of one
grouped GEMM pass, checked against published grouped-GEMM micro-benchmarks
(tests/planner/test_moe_microbench.py).

One grouped GEMM runs `groups` GEMMs of the same N x K (one per local expert) in one kernel over the
tokens routed to each (DeepGEMM's "m-grouped contiguous" layout; Megatron-Core's --moe-grouped-gemm,
Transformer Engine GroupedLinear; torch._grouped_mm). Its time is

    max(tensor-core time, operand reads / HBM) + output writes / HBM

- tensor-core time: the GPU's GEMM-size curve at the whole group's FLOPs (one kernel fills the GPU
  with every expert's tiles) x the tile and wave quantization of planner/gemm_shape.py at the
  per-expert M (taken as the mean: DeepGEMM's masked benchmark draws each group's M within +-30% of
  it, and the mean's quantization matches its figures better than half an empty tile per expert, which
  lands 13-37% below them);
- operand reads: every local expert's weights and the routed tokens (a few rows per expert leave the
  GEMM memory-bound: the roofline, Williams et al. 2009);
- output writes: the epilogue stores each tile's result after its main loop; it is not hidden behind
  the tensor cores. The weight-gradient GEMM accumulates into the fp32 main gradient
  (Megatron-Core's gradient_accumulation_fusion; DeepGEMM's k-grouped wgrad kernel D = C + A B^T in
  fp32): it reads and writes 8 bytes per weight.

fp8 plans (planner/moe_time.py): operands read in 1 byte, outputs written in bf16 (planner/fp8_gemm.py's
roofline bytes, torchao roofline_utils "read in float8, output in bfloat16"), the tensor cores at the fp8
GEMM peak, 1-byte tiles. The dense fp8 GEMMs' other rule, the size curve read at size x 16-bit peak / fp8
peak, is not applied here: DeepGEMM's grouped figures below, at the fp8 peak, fit the unshifted curve
(shifted, the masked shapes' mean error grows from 10% to 14%, two of them to 20-21% slow, the contiguous
ones from 2-3% to 3-5% slow; tests/planner/test_moe_microbench.py).

Checked against DeepGEMM's published FP8 grouped GEMMs on H800 (deepseek-ai/DeepGEMM README of the
first release, Feb 2025; PR #95 for the k-grouped weight-gradient kernels): 4 x 8192 / 8 x 4096 rows
per group 0.55-0.66 of the FP8 peak (the model within 3%; before the epilogue term it was 22% fast on
the K = 2048 shapes), 1 x 1024 .. 4 x 256 rows 0.41-0.62 (within 15%), k-grouped weight gradients
0.45-0.53 (within 5%). Not captured: at equal total FLOPs, 4 x 256 rows run 12-24% slower than
1 x 1024 (the model: equal).
"""

from __future__ import annotations

import numpy as np

from planner import flops, fp8_gemm, gemm_shape

# fp32 main gradient read and written by each weight-gradient GEMM (accumulated over micro batches)
WGRAD_ACCUMULATE_BYTES = 8.0


def _f(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def pass_s(m, n, k, groups, shape, pts, peak, hbm_Bps, elem_bytes, out_bytes) -> np.ndarray:
    """Seconds of one grouped GEMM: `groups` GEMMs of M rows (the mean over the experts), N x K."""
    m, n, k, g = _f(m), _f(n), _f(k), _f(groups)
    flop = g * 2.0 * m * n * k
    eff = flops.efficiency(pts, flop / 1e9) * gemm_shape.gemm_efficiency(m, n, k, shape, batch=g, elem_bytes=elem_bytes)
    reads = g * (n * k + m * k) * elem_bytes
    writes = g * m * n * out_bytes
    return np.maximum(flop / (peak * eff), reads / hbm_Bps) + writes / hbm_Bps


def expert_passes_s(m, mats, hidden, width, groups, shape, pts, peak, hbm_Bps, elem_bytes) -> dict[str, np.ndarray]:
    """Forward, input-gradient and weight-gradient seconds of one MoE layer's routed experts on one GPU:
    the up (and gate: `mats` - 1 matrices fused, N = width x (mats - 1)) and the down projection,
    `groups` local experts of `m` rows each (hidden x width per expert, width already split by etp)."""
    out = np.maximum(_f(elem_bytes), fp8_gemm.OUTPUT_BYTES)  # fp8 GEMMs write bf16
    fwd = dgrad = wgrad = 0.0
    for n, k in ((_f(width) * (mats - 1), _f(hidden)), (_f(hidden) + 0 * _f(width), _f(width))):
        fwd = fwd + pass_s(m, n, k, groups, shape, pts, peak, hbm_Bps, elem_bytes, out)
        dgrad = dgrad + pass_s(m, k, n, groups, shape, pts, peak, hbm_Bps, elem_bytes, out)
        wgrad = wgrad + pass_s(n, k, m, groups, shape, pts, peak, hbm_Bps, elem_bytes, WGRAD_ACCUMULATE_BYTES)
    return {"fwd": fwd, "dgrad": dgrad, "wgrad": wgrad}


__all__ = ["WGRAD_ACCUMULATE_BYTES", "expert_passes_s", "pass_s"]
