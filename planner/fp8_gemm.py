"""fp8 GEMM physics beyond the recipe's kernel share (pure, vectorised over candidate plans).

Small GEMMs gain little or nothing from fp8 (torchao.float8 README, "Performance": on an H100 a
linear of M, K, N = 1024, 2048, 1024 runs fwd+bwd at 0.80x its bf16 speed with float8 tensorwise
scaling, one of 4096, 8192, 16384 at 1.39x). Two effects of the GEMM itself make that, besides the
casts (planner/fp8.py):

- the size curve: the catalog's GEMM efficiency by size (gpus/*.toml matmul_efficiency) is where
  the fixed costs of a kernel (launch, prologue, the last partial wave) stop mattering, and a GPU
  with a higher peak needs proportionally larger GEMMs for them to (the catalog moves the curve
  with the peak: h100-80gb's "A100 shape moved to 4x larger GEMMs (3.2x the peak per wave)",
  h100-nvl's points at 835.5 / 989.4 of the SXM's sizes). An fp8 GEMM runs at the fp8 peak, so
  its efficiency is the curve's at size x (16-bit peak / fp8 peak): half the size on Hopper.
- the memory roofline: an fp8 GEMM reads its operands in 1 byte but writes its output in 16 bits
  (2 bytes), so its arithmetic intensity drops less than its compute time: each of the three
  GEMMs of a linear takes max(compute, bytes / HBM bandwidth) (torchao's float8 roofline model,
  torchao/testing/training/roofline_utils.py get_individual_gemm_time_sympy: "read in float8,
  output in bfloat16"). A row-parallel linear with a small K (o_proj under TP8 of an 8B model:
  K = 512) is memory-bound in fp8 while its bf16 GEMM is not.
The 16-bit GEMMs keep the measured curve as it is (its points already hold their memory costs).
"""

from __future__ import annotations

import numpy as np

from planner import flops

FP8_OPERAND_BYTES = 1.0  # e4m3 / e5m2 inputs
OUTPUT_BYTES = 2.0  # bf16 output of the scaled GEMM (forward output, grad_input, grad_weight)


def curve_size(size_gflop, fp8, peak16_over_peak):
    """GEMM size at which to read the efficiency curve: scaled by 16-bit peak / fp8 peak for fp8."""
    return np.where(fp8, np.asarray(size_gflop, dtype=np.float64) * peak16_over_peak, size_gflop)


def gemm_bytes(m, n, k):
    """HBM bytes of the forward (M x K @ K x N), input-gradient (M x N @ N x K) and weight-gradient
    (K x M @ M x N) fp8 GEMMs of one linear: fp8 operands read once, 16-bit output written once."""
    m, n, k = (np.asarray(a, dtype=np.float64) for a in (m, n, k))
    fwd = FP8_OPERAND_BYTES * (m * k + k * n) + OUTPUT_BYTES * m * n
    dgrad = FP8_OPERAND_BYTES * (m * n + n * k) + OUTPUT_BYTES * m * k
    wgrad = FP8_OPERAND_BYTES * (k * m + m * n) + OUTPUT_BYTES * k * n
    return fwd, dgrad, wgrad


def roofline_factor(m, n, k, compute_s, hbm_Bps, fp8) -> np.ndarray:
    """Time of the three GEMMs of a linear under the memory roofline over their compute time
    (>= 1; 1 for plans not in fp8). `compute_s`: one GEMM's compute-bound seconds (2 m n k FLOPs)."""
    c = np.maximum(np.asarray(compute_s, dtype=np.float64), 1e-30)
    total = sum(np.maximum(c, b / hbm_Bps) for b in gemm_bytes(m, n, k))
    return np.where(fp8, total / (3.0 * c), 1.0)


def gemm_s_per_token(per_token, size_gflop, tokens, n, k, shape_share, gemm_peak, peak16_over_peak, points,
                     hbm_Bps, fp8) -> np.ndarray:
    """Seconds per token of one forward GEMM of a linear (M = tokens, N x K weight on one GPU):
    `per_token` FLOPs at `gemm_peak` x the size curve (at the fp8 peak's size for fp8) x the tile/wave
    share, fp8 GEMMs no faster than their bytes allow (the roofline over the linear's three GEMMs)."""
    eff = flops.efficiency(points, curve_size(size_gflop, fp8, peak16_over_peak)) * shape_share
    one_gemm_s = 2.0 * np.asarray(tokens, dtype=np.float64) * n * k / (gemm_peak * eff)
    return per_token * roofline_factor(tokens, n, k, one_gemm_s, hbm_Bps, fp8) / (gemm_peak * eff)
