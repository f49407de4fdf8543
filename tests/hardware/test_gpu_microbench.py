"""The GPU curves of the parts the dev data has no rows for (MI250X, MI300X, MI325X, H200, B200)
against the published micro-benchmarks their TOML comments cite.

GEMM curves are the h100-80gb curve (the one the stack profiles were fitted with) scaled by the
ratio of Maximum Achievable Matmul FLOPS shares (stas00/ml-engineering, compute/accelerator/README.md,
bf16 torch.mm at the best shape), with GEMM sizes scaled by the peak ratio (MI250X: tests/hardware/test_amd_microbench.py); attention
curves are FlashAttention kernel benchmarks; MI250X's collective efficiency is RCCL's own per-link
xGMI figure (MI300X/MI325X: a measured rccl-tests figure, test_amd_microbench.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from hardware.catalog import load_catalog
from planner import comm, flops
from planner.attention_kernel import curves
from planner.settings import Settings
from planner.system import System

# MAMF share of the dense bf16 peak (mean of 100 runs at the best shape) and the table it is from.
MAMF_SHARE = {
    "h100-80gb": 0.803,   # v2: 794.5 / 989
    "mi300x": 0.514,      # v2: 668.4 / 1300 (torch 2.5.1+rocm6.3)
    "mi325x": 0.604,      # v2: 784.9 / 1300 (1000 W)
    "b200": 0.776,        # v2: 1745.0 / 2250
}


def _top(gpu) -> float:
    return max(p.fraction for p in gpu.matmul_efficiency)


def _eff(gpu, gemm_gflop: float) -> float:
    return float(flops.efficiency([(p.gemm_gflop, p.fraction) for p in gpu.matmul_efficiency], gemm_gflop))


@pytest.mark.parametrize("gid", ["mi300x", "mi325x", "b200"])
def test_gemm_curve_follows_the_mamf_ratio_to_h100(gid: str) -> None:
    cat = load_catalog()
    gpu, h100 = cat.gpu(gid), cat.gpu("h100-80gb")
    ratio = MAMF_SHARE[gid] / MAMF_SHARE["h100-80gb"]
    assert _top(gpu) / _top(h100) == pytest.approx(ratio, abs=0.005)
    # a GEMM of equal duration reaches the same share: sizes scale with the peak
    scale = gpu.bf16_tflops / h100.bf16_tflops
    for size in (0.1, 3.0, 50.0, 1000.0):
        assert _eff(gpu, size * scale) == pytest.approx(ratio * _eff(h100, size), rel=0.01)
    # never above the measured best-shape share (the curve is for the shapes a model runs)
    assert _top(gpu) < MAMF_SHARE[gid]


def test_h200_gemm_is_h100s() -> None:
    """MAMF table: H100 SXM 80.3%, "H200 is the same" (same SMs and clocks)."""
    cat = load_catalog()
    assert cat.gpu("h200-141gb").matmul_efficiency == cat.gpu("h100-80gb").matmul_efficiency


def test_mi300x_attention_at_16k_matches_ck_flash_attention() -> None:
    """ROCm/flash-attention #142 (MI300X, ROCm 6.3.2, hd 128, 16k): 223.1-231.6 TFLOPs/s fwd+bwd."""
    cat = load_catalog()
    for gid in ("mi300x", "mi325x"):
        gpu = cat.gpu(gid)
        fa2, _ = curves(gpu)
        at_16k = dict(fa2)[16384] * gpu.bf16_tflops
        assert 223.0 <= at_16k <= 231.6
        # far below H100's FlashAttention-2 share (335 of 989 TFLOPs/s at 16k)
        assert dict(fa2)[16384] < 0.6 * dict(curves(cat.gpu("h100-80gb"))[0])[16384]


def test_mi250x_attention_is_derived_from_mi300x_by_the_gemm_curve_ratio() -> None:
    """No MI250X kernel figure: its curve keeps MI300X's attention-to-GEMM share ratio (CK on CDNA)."""
    cat = load_catalog()
    mi250x, mi300x = (dict(curves(cat.gpu(g))[0]) for g in ("mi250x", "mi300x"))
    ratio = _top(cat.gpu("mi250x")) / _top(cat.gpu("mi300x"))
    for seq in (512, 2048, 16384):
        assert mi250x[seq] == pytest.approx(mi300x[seq] * ratio, abs=0.0015)
    # below the share H100's FlashAttention-2 reaches relative to its GEMM curve (0.34 / 0.70)
    assert mi250x[16384] / _top(cat.gpu("mi250x")) < 0.34 / _top(cat.gpu("h100-80gb"))


def test_b200_attention_curves_match_kernel_benchmarks() -> None:
    gpu = load_catalog().gpu("b200")
    fa2, cudnn = (dict(c) for c in curves(gpu))
    # flash-attention #1589: FA2 hd 64 fwd+bwd 258.7 (512) .. 345.8 (16k) TFLOPs/s; hd 64 = 0.85 x hd 128
    for seq, measured in ((512, 258.71), (2048, 320.70), (16384, 345.80)):
        assert fa2[seq] * gpu.bf16_tflops * 0.85 == pytest.approx(measured, rel=0.01)
    # flash-attention PR #2280: FA4 hd 128 causal 8k fwd 1418.1, bwd 1117.9 TFLOPS (bwd = 2.5 x fwd FLOPs)
    fwd_bwd = 3.5 / (1 / 1418.1 + 2.5 / 1117.9)
    assert cudnn[8192] * gpu.bf16_tflops == pytest.approx(fwd_bwd, rel=0.01)


def test_mi250x_xgmi_bus_bandwidth_within_rccls_link_model() -> None:
    """RCCL src/graph/topo.h ncclTopoXGMISpeed: gfx90a 36 GB/s usable per 50 GB/s link."""
    cat = load_catalog()
    gpu, c = cat.gpu("mi250x"), cat.cluster("frontier")
    assert gpu.intranode_collective_efficiency == pytest.approx(36.0 / 50.0)
    system = System(gpu=gpu, gpus=c.gpus_per_node, gpus_per_node=c.gpus_per_node, host_ram_gib=c.host_ram_gib,
                    host_to_gpu_gbps=c.host_to_gpu_gbps, intranode_gbps=gpu.intranode_gbps,
                    internode_gbps=c.internode_gbps)
    busbw_gbytes = comm.Links.of(system, Settings()).intra_Bps / 1e9
    assert busbw_gbytes == pytest.approx(gpu.intranode_gbps / 8 / 50.0 * 36.0)


def test_nvlink_gpus_keep_the_fitted_default() -> None:
    """A100/H100 (the dev data) carry no per-GPU figure: their CV cannot move."""
    cat = load_catalog()
    for gid in ("a100-80gb", "a100-40gb", "h100-80gb", "h100-96gb", "v100-32gb", "h200-141gb", "b200"):
        assert cat.gpu(gid).intranode_collective_efficiency is None


def test_frontier_is_eight_gcds_with_four_slingshot_nics() -> None:
    """OLCF Frontier User Guide: 4 MI250X = 8 GCDs, 64 GB HBM2e each, 36+36 GB/s host links, 4 x 25 GB/s."""
    cat = load_catalog()
    c = cat.cluster("frontier")
    assert c.gpu == "mi250x" and c.gpus_per_node == 8
    assert cat.gpu(c.gpu).hbm_gib == 64
    assert c.host_to_gpu_gbps == 36 * 8 and c.internode_gbps == 4 * 25 * 8
    assert np.isclose(c.host_ram_gib, 512)


# A100 entries of the same MAMF table (v2, bf16 torch.mm best shape, mean of 100 runs, CUDA 12.4-12.6).
A100_SXM_SHARE = 0.869   # 271.2 / 312 (torch 2.6.0+cu126)
A100_PCIE_SHARE = 0.811  # 252.9 / 312 (torch 2.5.1+cu124)


@pytest.mark.parametrize("gid", ["a100-80gb", "a100-40gb"])
def test_a100_gemm_top_is_the_same_share_of_its_mamf_as_h100s(gid: str) -> None:
    """A100 and H100 measured with the same software (CUDA 12.6): the curve tops keep their ratio.
    (0.72 before: 0.83 x A100's MAMF against 0.87 x H100's, which made A100 plans ~5% slow.)"""
    cat = load_catalog()
    a100, h100 = cat.gpu(gid), cat.gpu("h100-80gb")
    assert _top(a100) / _top(h100) == pytest.approx(A100_SXM_SHARE / MAMF_SHARE["h100-80gb"], abs=0.005)
    assert 0.75 < _top(a100) < A100_SXM_SHARE
    # 271.2 TFLOPs/s best shape; a large GEMM the curve's top covers reaches ~0.87 of it
    assert a100.bf16_tflops * _eff(a100, 1100.0) == pytest.approx(0.872 * 271.2, rel=0.01)


@pytest.mark.parametrize(("pcie", "sxm"), [("a100-pcie-80gb", "a100-80gb"), ("a100-pcie-40gb", "a100-40gb")])
def test_a100_pcie_gemm_is_the_sxm_curve_by_the_mamf_ratio(pcie: str, sxm: str) -> None:
    cat = load_catalog()
    p, s = cat.gpu(pcie), cat.gpu(sxm)
    for size in (0.1, 3.0, 50.0, 1000.0):
        assert _eff(p, size) / _eff(s, size) == pytest.approx(A100_PCIE_SHARE / A100_SXM_SHARE, abs=0.01)
