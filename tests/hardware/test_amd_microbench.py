"""AMD curves pinned to the hardware micro-benchmarks cited in catalog/gpus/mi250x.toml, mi300x.toml
and mi325x.toml (never to end-to-end training runs).

- MI250X GEMM: the h100-80gb curve x the gfx90a / H100 share ratio of one and the same bf16 torch.mm
  benchmark (zzc0721/torch-performance-test-data issues #195 MI210, #79 H100 SXM), checked against the
  one-GCD MAMF spread 127-147 TFLOPS (stas00/ml-engineering issue #76 and its v1 MAMF table).
- MI300X/MI325X: 8-GPU rccl-tests all-reduce bus bandwidth 316.8 GB/s and BabelStream triad 4.09 TB/s
  on an Azure ND MI300X v5 node (Azure AI-benchmarking-guide, Azure_Results/ND_MI300X_v5_results.md).
"""

from __future__ import annotations

import pytest

from hardware.catalog import load_catalog
from planner import comm, flops, throughput
from planner.settings import Settings
from planner.system import System

# bf16 torch.mm n x n x n, TFLOPS (benchmark v2 of zzc0721/torch-performance-test-data)
MI210 = {2048: 102.47, 4096: 120.55, 8192: 124.18}  # issue #195, torch 2.13+rocm7.2, peak 181.0
H100 = {2048: 676.59, 4096: 788.72, 8192: 797.51}  # issue #79, torch 2.7+cu128, peak 989.4
MI210_PEAK, H100_PEAK = 181.0, 989.4
MAMF_ONE_GCD_TFLOPS = (127.0, 147.0)  # stas00/ml-engineering #76 (rlrs) .. v1 MAMF table (ROCm 6.2)


def _eff(gpu, gemm_gflop: float) -> float:
    return float(flops.efficiency([(p.gemm_gflop, p.fraction) for p in gpu.matmul_efficiency], gemm_gflop))


def _ratios() -> dict[int, float]:
    return {n: (MI210[n] / MI210_PEAK) / (H100[n] / H100_PEAK) for n in MI210}


def test_mi250x_gemm_curve_is_h100s_times_the_same_benchmark_share_ratio() -> None:
    cat = load_catalog()
    mi, h100 = cat.gpu("mi250x"), cat.gpu("h100-80gb")
    ratios = _ratios()
    lo, hi = min(ratios.values()), max(ratios.values())
    assert (lo, hi) == (pytest.approx(0.828, abs=0.001), pytest.approx(0.851, abs=0.001))
    for size in (0.1, 3.0, 50.0, 464.0, 3000.0):  # 464 GFLOP: a GPT-175B QKV GEMM at tp4, 2048 tokens
        r = _eff(mi, size) / _eff(h100, size)
        assert lo - 0.005 <= r <= hi + 0.005


@pytest.mark.parametrize("n", sorted(MI210))
def test_mi250x_curve_reproduces_the_measured_square_gemm_within_the_spread(n: int) -> None:
    """The catalog curve, carried back to the benchmark's square shape by H100's curve-to-measured
    factor at that n, gives the MI210 share measured there (same die) within the n-to-n spread."""
    cat = load_catalog()
    mi, h100 = cat.gpu("mi250x"), cat.gpu("h100-80gb")
    size = 2.0 * n**3 / 1e9
    implied_share = _eff(mi, size) / _eff(h100, size) * (H100[n] / H100_PEAK)
    assert implied_share == pytest.approx(MI210[n] / MI210_PEAK, rel=0.02)
    # on one MI250X GCD that share is inside the measured best-shape range
    assert implied_share * mi.bf16_tflops <= MAMF_ONE_GCD_TFLOPS[1]


def test_mi250x_curve_top_is_below_the_one_gcd_mamf_as_h100s_is_below_its_own() -> None:
    cat = load_catalog()
    mi = cat.gpu("mi250x")
    top_tflops = max(p.fraction for p in mi.matmul_efficiency) * mi.bf16_tflops
    lo, hi = MAMF_ONE_GCD_TFLOPS
    # H100: curve top 0.70 = 0.87 of its MAMF 0.803; MI250X: 113 TFLOPS = 0.77 .. 0.89 of 127 .. 147
    assert 0.75 * hi < top_tflops < 0.90 * lo


def _system(gid: str, cluster: str) -> System:
    cat = load_catalog()
    gpu, c = cat.gpu(gid), cat.cluster(cluster)
    return System(gpu=gpu, gpus=c.gpus_per_node, gpus_per_node=c.gpus_per_node, host_ram_gib=c.host_ram_gib,
                  host_to_gpu_gbps=c.host_to_gpu_gbps, intranode_gbps=gpu.intranode_gbps,
                  internode_gbps=c.internode_gbps)


@pytest.mark.parametrize("gid,cluster", [("mi300x", "mi300x-8"), ("mi325x", "mi325x-8")])
def test_mi300x_node_allreduce_busbw_is_the_measured_rccl_figure(gid: str, cluster: str) -> None:
    """rccl-tests all_reduce_perf, 8 x MI300X, in-place busbw 313.9 (1 GB) .. 316.8 GB/s (8 GB)."""
    busbw_gbytes = comm.Links.of(_system(gid, cluster), Settings()).intra_Bps / 1e9
    assert 313.9 <= busbw_gbytes <= 316.8 + 0.1
    assert busbw_gbytes < 7 * 48.0  # below RCCL's own per-link model (7 links x 48 GB/s)


def test_mi300x_streaming_bandwidth_is_the_measured_triad() -> None:
    """BabelStream on ND MI300X v5: triad 4.09 TB/s (copy 4.11, add 4.14) of 5.3 TB/s."""
    bw_tbs = throughput._hbm_Bps(_system("mi300x", "mi300x-8"), Settings()) / 1e12
    assert 4.09 - 0.01 <= bw_tbs <= 4.14


def test_gpus_without_a_measured_triad_keep_the_fitted_default() -> None:
    """The dev data's GPUs (and MI250X, with no published triad found) use HBM_EFFICIENCY."""
    cat = load_catalog()
    for gid in ("a100-80gb", "a100-40gb", "h100-80gb", "v100-32gb", "mi250x"):
        assert cat.gpu(gid).hbm_efficiency is None
    bw = throughput._hbm_Bps(_system("mi250x", "frontier"), Settings())
    assert bw == pytest.approx(1638.4e9 * throughput.HBM_EFFICIENCY)
