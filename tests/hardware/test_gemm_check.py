"""The planner's dense GEMM throughput against published GEMM micro-benchmarks (validation/gemm_check.py:
MAMF table, zzc0721 torch.mm sweeps, Markidis 2018 V100 cuBLAS; each point cites its source there).

A100/H100 fix the anchor (the stack profiles were fitted through their curves); a part without dev rows is
right when its planner/measured ratio matches the anchor's, so the fitted profiles transfer to it."""

from __future__ import annotations

import pytest

from hardware.catalog import load_catalog
from validation import gemm_check

ROWS = gemm_check.ratios(load_catalog())
ANCHOR = gemm_check.anchor(ROWS)
# V100: the only published figure is CUDA 9 cuBLAS's "up to 83 Tflops/s" (Markidis 2018), a peak over sizes
# from a 2018 library, while the V100 rows (Megatron 2020-21) ran later cuBLAS; the catalog keeps the curve
# that reproduces it directly (tests/hardware/test_v100_gemm.py). Held to its own wider band here.
V100_BAND = (1.0, 1.25)


def test_anchor_is_the_curves_design_share_of_mamf() -> None:
    # the A100/H100 curves top at ~0.87 x their MAMF share (catalog/gpus/a100-80gb.toml); at the MAMF shapes,
    # with tile/wave quantization, the planner sits a little lower
    assert 0.78 <= ANCHOR <= 0.88


@pytest.mark.parametrize("row", [r for r in ROWS if not r[0].gpu.startswith("v100")],
                         ids=lambda r: f"{r[0].gpu}-{'x'.join(map(str, r[0].shape))}")
def test_every_part_within_tolerance_of_the_anchor(row) -> None:
    point, planner, ratio = row
    assert abs(ratio / ANCHOR - 1) <= gemm_check.TOLERANCE, (point.source, planner, point.tflops)


def test_amd_parts_sit_where_nvidia_parts_do_not_at_nvidia_share_of_peak() -> None:
    """MI300X reaches 51% of its peak in MAMF against H100's 80%: the planner follows the measurement,
    not the spec sheet (a catalog at H100's share would sit at ~1.5x the anchor)."""
    cat = load_catalog()
    mi = next(r for r in ROWS if r[0].gpu == "mi300x")
    assert mi[1] / cat.gpu("mi300x").bf16_tflops < 0.5
    assert abs(mi[2] / ANCHOR - 1) <= gemm_check.TOLERANCE


def test_v100_within_its_band() -> None:
    v100 = [r for r in ROWS if r[0].gpu.startswith("v100")]
    assert v100 and all(V100_BAND[0] <= r / ANCHOR <= V100_BAND[1] for _, _, r in v100)
