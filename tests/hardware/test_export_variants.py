"""A800 / H800 (export variants: the A100 / H100 SXM with NVLink cut to 400 GB/s in total) as catalog
entries of their own: `plan estimate --gpu h800` and a runs-file row written "H800" / "A800-80GB" both
reach them, with the base part's compute and the variant's NVLink."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from hardware.catalog import load_catalog
from plan_cli.main import app
from planner.api import estimate
from planner.run_hardware import resolve
from planner.scenario import Scenario

SAME_AS_BASE = ("hbm_gib", "hbm_gbytes_per_s", "fp16_tflops", "bf16_tflops", "fp8_tflops", "matmul_efficiency",
                "attention_efficiency", "sm_count", "gemm_tiles")


def test_variants_are_their_base_part_but_for_nvlink() -> None:
    cat = load_catalog()
    for variant, base in (("h800", "h100-80gb"), ("a800-80gb", "a100-80gb")):
        v, b = cat.gpu(variant), cat.gpu(base)
        assert all(getattr(v, f) == getattr(b, f) for f in SAME_AS_BASE)
        assert v.intranode_gbps == 1600.0 < b.intranode_gbps  # 400 GB/s both ways vs 900 / 600
        assert cat.clusters[f"hgx-{variant[:4]}"].gpu == variant


def test_runs_rows_resolve_to_the_variant_entries() -> None:
    ids = set(load_catalog().gpus)
    for text, gpu, cluster in (("H800", "h800", "hgx-h800"), ("H800 SXM5", "h800", "hgx-h800"),
                               ("A800-80GB", "a800-80gb", "hgx-a800")):
        hw = resolve(text, "", ids)
        assert (hw.gpu_id, hw.cluster_id, hw.intranode_gbps) == (gpu, cluster, None)


def _tokens_per_s(gpu: str) -> float:
    # tp=8 all-reduces every layer's activations over NVLink: the cut link must show
    scenario = Scenario(model="llama2-7b", gpu=gpu, gpus=16, tp=8, seq_len=4096, global_batch=256)
    return estimate(scenario, top=1).best.performance.tokens_per_s_per_gpu


def test_estimate_takes_the_variants_and_charges_their_slower_nvlink() -> None:
    for variant, base in (("h800", "h100-80gb"), ("a800-80gb", "a100-80gb")):
        assert _tokens_per_s(variant) < 0.99 * _tokens_per_s(base)


def test_cli_estimate_accepts_the_variant_ids() -> None:
    r = CliRunner().invoke(app, ["estimate", "--model", "llama2-7b", "--gpu", "h800", "--gpus", "16", "--top", "1"])
    assert r.exit_code == 0, r.output


def test_h800_collective_plateau_keeps_the_measured_ratio_to_h100() -> None:
    """nccl-tests all_reduce busbw on 8 GPUs: H800 215 GB/s (NVIDIA/nccl #1374) vs 480.7 GB/s on the H200 sweep
    (catalog/links/nvlink.toml, same NVLink 4 / NVSwitch generation): the planner's plateaus keep that ratio."""
    from planner.comm import INTRANODE_LINK_EFFICIENCY

    cat = load_catalog()
    h800, h100 = (cat.gpu(g) for g in ("h800", "h100-80gb"))
    plateau = [g.intranode_gbps * (g.intranode_collective_efficiency or INTRANODE_LINK_EFFICIENCY) for g in (h800, h100)]
    assert plateau[0] / plateau[1] == pytest.approx(215.0 / cat.links["nvlink"].plateau_busbw_gbytes_per_s, rel=0.05)
