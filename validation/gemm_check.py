"""A CHECK, not a fit: the planner's dense GEMM throughput (catalog curve x planner/gemm_shape.py shape
factor x the 16-bit peak) against published GEMM MICRO-benchmarks, per GPU and shape.

    python -m validation.gemm_check

The catalog curves are meant for the GEMMs a model runs, not for a benchmark's best shape: on A100 and
H100 (whose curves the stack profiles were fitted with) the planner sits at ~0.83 of the measured best-shape
throughput (ANCHOR below). A GPU the dev data has no rows for is right when it sits at the SAME ratio: then
a profile fitted on A100/H100 transfers. tests/hardware/test_gemm_check.py holds every part within
TOLERANCE of the anchor. No training-run throughput (tokens/s, MFU) is used here.

Sources (each point names its own):
- MAMF v2 / v1: stas00/ml-engineering compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS
  comparison table": bf16 torch.mm, mean of 100 runs after 50 warm-ups at the best shape mamf-finder.py
  found; v2 flushes the cache between runs, v1 does not.
- zzc0721: zzc0721/torch-performance-test-data, benchmark v2 bf16 torch.mm n x n x n, issues #79 (H100 SXM,
  torch 2.7+cu128) and #195 (MI210 = the CDNA2 gfx90a die of one MI250X GCD, 104 vs 110 CUs, same clock;
  rescaled here to one GCD's 191.5 peak: 124.18 x 191.5 / 181.0).
- Markidis 2018: Markidis et al., "NVIDIA Tensor Core Programmability, Performance & Precision", IPDPSW 2018
  (arXiv 1803.04014): cuBLAS fp16-in/fp32-accumulate GEMM on a Tesla V100 SXM2 "up to 83 Tflops/s" (CUDA 9).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from hardware.catalog import Catalog, load_catalog
from planner import flops, gemm_shape

MAMF = "stas00/ml-engineering compute/accelerator/README.md MAMF table"


@dataclass(frozen=True)
class Point:
    gpu: str
    shape: tuple[int, int, int]  # M x N x K
    tflops: float  # measured
    source: str
    anchor: bool = False  # A100/H100: the stack profiles were fitted through these curves


POINTS = (
    Point("a100-80gb", (1024, 10240, 5120), 271.2, f"{MAMF} v2, A100 SXM, torch 2.6.0+cu126", True),
    Point("a100-80gb", (6912, 2048, 16384), 267.9, f"{MAMF} v1, A100 SXM, CUDA 12.1", True),
    Point("h100-80gb", (2048, 2048, 13312), 794.5, f"{MAMF} v2, H100 SXM, torch 2.7.0+cu126", True),
    Point("h100-80gb", (6144, 2816, 17920), 792.1, f"{MAMF} v1, H100 SXM, CUDA 12.1", True),
    Point("h100-80gb", (8192, 8192, 8192), 797.51, "zzc0721/torch-performance-test-data #79, H100 SXM, n=8192"),
    Point("a100-pcie-80gb", (2048, 5120, 6144), 252.9, f"{MAMF} v2, A100 PCIe, torch 2.5.1+cu124"),
    Point("mi300x", (10240, 15360, 8192), 668.4, f"{MAMF} v2, MI300X, torch 2.5.1+rocm6.3, TunableOp"),
    Point("mi325x", (13312, 10240, 8192), 784.9, f"{MAMF} v2, MI325X 1000 W, torch 2.6.0+rocm6.2.4, TunableOp"),
    Point("mi250x", (1024, 19968, 14080), 147.0, f"{MAMF} v1, MI250X one GCD, ROCm 6.2"),
    Point("mi250x", (8192, 8192, 8192), 124.18 * 191.5 / 181.0,
          "zzc0721/torch-performance-test-data #195, MI210 (gfx90a) n=8192, scaled to one MI250X GCD"),
    Point("v100-32gb", (8192, 8192, 8192), 83.0, "Markidis et al. 2018 (arXiv 1803.04014), V100 SXM2 cuBLAS, CUDA 9"),
)
# Every part's planner/measured ratio within this share of the A100/H100 anchor's. 15%: the anchor
# points alone spread 0.75-0.88 (shape luck of the best-shape search, cache flushing v1 vs v2).
TOLERANCE = 0.15


def planner_tflops(cat: Catalog, point: Point) -> float:
    """What the planner charges a bf16/fp16 GEMM of that shape: peak x size curve x tile/wave share."""
    gpu = cat.gpu(point.gpu)
    m, n, k = point.shape
    curve = [(p.gemm_gflop, p.fraction) for p in gpu.matmul_efficiency] or list(flops.DEFAULT_EFFICIENCY)
    size = float(flops.efficiency(curve, 2.0 * m * n * k / 1e9))
    shape = float(gemm_shape.gemm_efficiency(m, n, k, gemm_shape.GemmShapeData.of(gpu)))
    return (gpu.bf16_tflops or gpu.fp16_tflops) * size * shape


def ratios(cat: Catalog | None = None) -> list[tuple[Point, float, float]]:
    """(point, planner TFLOPS, planner / measured) for every point."""
    cat = cat or load_catalog()
    out = []
    for p in POINTS:
        t = planner_tflops(cat, p)
        out.append((p, t, t / p.tflops))
    return out


def anchor(rows: list[tuple[Point, float, float]]) -> float:
    return statistics.mean(r for p, _, r in rows if p.anchor)


def main() -> None:
    rows = ratios()
    a = anchor(rows)
    print(f"{'gpu':15s} {'M x N x K':>20s} {'measured':>9s} {'planner':>8s} {'ratio':>6s} {'vs anchor':>9s}  source")
    for p, t, r in rows:
        shape = "x".join(map(str, p.shape))
        print(f"{p.gpu:15s} {shape:>20s} {p.tflops:9.1f} {t:8.1f} {r:6.3f} {r / a - 1:+9.1%}  {p.source}")
    print(f"anchor (A100/H100 mean ratio) {a:.3f}; tolerance +-{TOLERANCE:.0%}")


if __name__ == "__main__":
    main()
