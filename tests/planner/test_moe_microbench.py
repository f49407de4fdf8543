"""The MoE time model's physics against published hardware micro-benchmarks (no end-to-end MoE run):
grouped expert GEMMs against DeepGEMM's figures (planner/moe_gemm.py), expert all-to-alls against
DeepEP's and NCCL's (planner/moe_time.py, planner/context_parallel.py all_to_all_s).

H800 = H100 SXM5 but for NVLink (8 links, 400 GB/s both directions: 200 GB/s each way, against
H100's 18 links / 450 GB/s each way): same 132 SMs, 1979 dense FP8 TFLOPS, 3.35 TB/s HBM3, so the
catalog's h100-80gb stands for it in the GEMM checks and an H100 node with its NVLink set to 1600
Gbps in the all-to-all checks.
"""

import pytest

from hardware.catalog import load_catalog
from planner import gemm_shape, moe_gemm, throughput

GPU = load_catalog().gpu("h100-80gb")
PTS = [(p.gemm_gflop, p.fraction) for p in GPU.matmul_efficiency]
SHAPE = gemm_shape.GemmShapeData.of(GPU)
HBM_BPS = GPU.hbm_gbytes_per_s * 1e9 * (GPU.hbm_efficiency or throughput.HBM_EFFICIENCY)
FP8_PEAK = GPU.fp8_tflops * 1e12

# deepseek-ai/DeepGEMM README (first release, Feb 2025), H800, NVCC 12.8, FP8 in / BF16 out:
# (groups, M per group, N, K, TFLOPS). "Contiguous" = training forward; "masked" draws each group's M
# within 0.7-1.3 x the expected M (tests/test_core.py).
CONTIGUOUS = [(4, 8192, 4096, 7168, 1297), (4, 8192, 7168, 2048, 1099), (8, 4096, 4096, 7168, 1288),
              (8, 4096, 7168, 2048, 1093)]
MASKED = [(1, 1024, 4096, 7168, 1233), (1, 1024, 7168, 2048, 925), (2, 512, 4096, 7168, 1040),
          (2, 512, 7168, 2048, 916), (4, 256, 4096, 7168, 932), (4, 256, 7168, 2048, 815)]
# DeepGEMM PR #95 (k-grouped weight-gradient GEMMs, H800; the figures quoted in DeepGEMM issue #107):
# (groups, M, N, K = tokens per group, TFLOPS), fp32 output accumulated (D = C + A B^T)
WGRAD = [(4, 7168, 4096, 4096, 939), (4, 2048, 7168, 4096, 900), (4, 7168, 4096, 8192, 1044),
         (4, 2048, 7168, 8192, 1033), (8, 7168, 4096, 4096, 942)]


def _tflops(g, m, n, k, out_bytes):
    t = float(moe_gemm.pass_s(m, n, k, g, SHAPE, PTS, FP8_PEAK, HBM_BPS, 1.0, out_bytes))
    return g * 2.0 * m * n * k / t / 1e12


@pytest.mark.parametrize("g,m,n,k,measured", CONTIGUOUS)
def test_grouped_gemm_training_shapes_within_ten_percent_of_deepgemm(g, m, n, k, measured):
    assert _tflops(g, m, n, k, 2.0) == pytest.approx(measured, rel=0.10)


@pytest.mark.parametrize("g,m,n,k,measured", MASKED)
def test_grouped_gemm_few_rows_per_expert_within_twenty_percent_of_deepgemm(g, m, n, k, measured):
    assert _tflops(g, m, n, k, 2.0) == pytest.approx(measured, rel=0.20)


@pytest.mark.parametrize("g,m,n,k,measured", WGRAD)
def test_weight_gradient_with_fp32_accumulation_within_ten_percent_of_deepgemm(g, m, n, k, measured):
    assert _tflops(g, m, n, k, moe_gemm.WGRAD_ACCUMULATE_BYTES) == pytest.approx(measured, rel=0.10)


def test_short_k_runs_slower_per_flop_from_its_epilogue():
    """K = 2048 against K = 7168 at 8 x 4096 rows: 1093 / 1288 = 0.85 measured; the epilogue's writes,
    not hidden behind the tensor cores, give the model the same drop (without them it had none)."""
    ratio = _tflops(8, 4096, 7168, 2048, 2.0) / _tflops(8, 4096, 4096, 7168, 2.0)
    assert 0.78 < ratio < 0.92
    no_epilogue = _tflops(8, 4096, 7168, 2048, 0.0) / _tflops(8, 4096, 4096, 7168, 0.0)
    assert no_epilogue > 0.97


def test_few_rows_per_expert_reach_a_lower_share_of_peak():
    """4 x 256 rows at 0.47 of the FP8 peak against 4 x 8192 at 0.66 (DeepGEMM, N 4096 / K 7168)."""
    small, large = _tflops(4, 256, 4096, 7168, 2.0), _tflops(4, 8192, 4096, 7168, 2.0)
    assert small < 0.9 * large
