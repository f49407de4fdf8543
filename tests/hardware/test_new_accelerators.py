"""The newest parts (B300 / DGX B300, GB300 NVL72, MI355X and MI350X): their figures against the sources
their TOML files cite, their GEMM and attention curves against the measured sibling each is derived
from (the derivation written in the file, checked here numerically), and a plan on each new cluster.

No dev row runs on these parts: the checks are physics and cited figures, not fitted speeds.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hardware.catalog import load_catalog
from plan_cli.main import app
from planner import api, flops
from planner.attention_kernel import curves
from planner.scenario import Scenario

CAT = load_catalog()
# part -> (measured sibling its curves come from, share factor written in its file)
SIBLING = {"b300": ("b200", 1.0), "gb300": ("gb200", 1.0), "mi355x": ("mi325x", 1.0), "mi350x": ("mi325x", 1.0)}


def _eff(gpu, gemm_gflop: float) -> float:
    return float(flops.efficiency([(p.gemm_gflop, p.fraction) for p in gpu.matmul_efficiency], gemm_gflop))


def test_peaks_are_the_vendors_sparse_figures_halved() -> None:
    b300, gb300 = CAT.gpu("b300"), CAT.gpu("gb300")
    # HGX/DGX B300 per 8 GPUs, with sparsity: 72 PF FP8, 36 PF FP16/BF16, 18 PF TF32; FP32 600 TF dense
    assert (b300.fp8_tflops * 8 * 2, b300.bf16_tflops * 8 * 2, b300.tf32_tflops * 8 * 2) == (72_000, 36_000, 18_000)
    assert b300.fp32_tflops * 8 == 600
    # GB300 NVL72 rack, with sparsity: 720 PF FP8, 360 PF BF16, 180 PF TF32; FP32 6 PF dense
    rack_sparse = (gb300.fp8_tflops * 72 * 2, gb300.bf16_tflops * 72 * 2, gb300.tf32_tflops * 72 * 2)
    assert rack_sparse == (720_000, 360_000, 180_000)
    assert gb300.fp32_tflops * 72 == pytest.approx(6000, rel=1e-3)
    # Blackwell Ultra keeps Blackwell's BF16/FP8 tensor-core peaks (its gains are FP4 and attention)
    assert (b300.bf16_tflops, b300.fp8_tflops) == (CAT.gpu("b200").bf16_tflops, CAT.gpu("b200").fp8_tflops)
    assert (gb300.bf16_tflops, gb300.fp8_tflops) == (CAT.gpu("gb200").bf16_tflops, CAT.gpu("gb200").fp8_tflops)
    # MI355X: 8,192 FP8 FLOPs/clock/CU x 256 CUs x 2.4 GHz; MI350X the same at 2.2 GHz; BF16 half of FP8
    for gid, ghz in (("mi355x", 2.4), ("mi350x", 2.2)):
        g = CAT.gpu(gid)
        assert g.fp8_tflops == pytest.approx(8192 * 256 * ghz / 1e3, abs=0.1)
        assert g.bf16_tflops == pytest.approx(g.fp8_tflops / 2, abs=0.1)
        assert g.fp32_tflops == pytest.approx(256 * 256 * ghz / 1e3, abs=0.1)  # FP32 matrix
        assert g.tf32_tflops is None and g.peak_tflops("tf32") == g.fp32_tflops  # CDNA4: no TF32 matrix path


def test_memory_links_and_nodes_match_their_sources() -> None:
    b300, gb300, mi355x = CAT.gpu("b300"), CAT.gpu("gb300"), CAT.gpu("mi355x")
    assert b300.hbm_gib == pytest.approx(275040 / 1024, abs=0.05)  # nvidia-smi: 275040 MiB
    assert gb300.hbm_gib == b300.hbm_gib and gb300.hbm_gbytes_per_s * 72 == 576_000  # rack: 576 TB/s
    assert mi355x.hbm_gib == CAT.gpu("mi350x").hbm_gib == 288  # ROCm specs table, GiB
    assert b300.intranode_gbps == gb300.intranode_gbps == 7200  # NVLink 5: 1.8 TB/s both ways
    assert mi355x.intranode_gbps == pytest.approx(7 * 153.6 / 2 * 8)  # 7 xGMI links, 153.6 GB/s bidirectional
    dgx, rack, amd = CAT.cluster("dgx-b300"), CAT.cluster("gb300-nvl72"), CAT.cluster("mi355x-8")
    assert (dgx.gpus_per_node, dgx.internode_gbps) == (8, 8 * 800)  # 8 x ConnectX-8 800 Gb/s
    assert (rack.gpus_per_node, rack.nvlink_domain, rack.internode_gbps) == (4, 72, 4 * 800)  # 4 CX8 per tray
    assert (amd.gpus_per_node, amd.internode_gbps) == (8, 8 * 400)  # 8 x Pollara 400G
    assert CAT.cluster("mi350x-8").gpu == "mi350x"
    # per GPU, the new nodes' NICs carry at least what their predecessors' did (B300/GB300: twice)
    assert dgx.internode_gbps == 2 * CAT.cluster("dgx-b200").internode_gbps
    assert rack.internode_gbps == 2 * CAT.cluster("gb200-nvl72").internode_gbps


@pytest.mark.parametrize("gid", sorted(SIBLING))
def test_gemm_curve_is_the_measured_siblings_moved_by_the_peak_ratio(gid: str) -> None:
    """A GEMM of equal duration reaches the same share: sizes x (peak / sibling's peak), shares x factor."""
    gpu = CAT.gpu(gid)
    parent_id, factor = SIBLING[gid]
    parent = CAT.gpu(parent_id)
    scale = gpu.bf16_tflops / parent.bf16_tflops
    assert len(gpu.matmul_efficiency) == len(parent.matmul_efficiency)
    for p, q in zip(gpu.matmul_efficiency, parent.matmul_efficiency):
        assert p.gemm_gflop == pytest.approx(q.gemm_gflop * scale, rel=0.01), (gid, p)
        assert p.fraction == pytest.approx(q.fraction * factor, abs=1e-3), (gid, p)
    for size in (0.2, 5.0, 100.0, 3000.0):
        assert _eff(gpu, size * scale) == pytest.approx(factor * _eff(parent, size), rel=0.01)
    # so the GEMM TFLOPS at each equal-duration size scale with the peak
    assert gpu.bf16_tflops * _eff(gpu, 100 * scale) == pytest.approx(
        scale * parent.bf16_tflops * _eff(parent, 100), rel=0.01)


@pytest.mark.parametrize("gid,parent", [("b300", "b200"), ("gb300", "b200"), ("mi355x", "mi325x"),
                                        ("mi350x", "mi325x")])
def test_attention_curves_are_the_measured_siblings_share_for_share(gid: str, parent: str) -> None:
    assert curves(CAT.gpu(gid)) == curves(CAT.gpu(parent))


def test_gb300_flashattention4_forward_agrees_with_the_b200_derived_cudnn_curve() -> None:
    """flash-attention PR #2605: FA4 fwd, hd 128, causal, 4096 on GB300 = 1431 TFLOPS; B200 (PR #2280) at
    8192: fwd 1418.1, fwd+bwd share 0.529 of 2250 -> fwd+bwd / fwd = 0.84."""
    gb300 = CAT.gpu("gb300")
    fwd_share = 1431 / gb300.bf16_tflops
    ratio = 0.529 / (1418.1 / CAT.gpu("b200").bf16_tflops)
    assert dict(curves(gb300)[1])[4096] == pytest.approx(fwd_share * ratio, abs=0.01)


def _plan(model: str, gpus: int, cluster: str, **kw):
    return api.estimate(Scenario(model=model, gpus=gpus, cluster=cluster, **kw), top=1).results[0]


def test_each_new_part_is_at_least_as_fast_as_the_one_it_follows() -> None:
    """Equal BF16 peaks and curves, more memory and NIC bandwidth: never slower (B300 vs B200, GB300 vs
    GB200 NVL72 at 72 GPUs); MI355X: 1.92x the MI325X's peak on the same curve shape."""
    for new, old in (("dgx-b300", "dgx-b200"), ("gb300-nvl72", "gb200-nvl72")):
        a, b = _plan("llama3-70b", 64, new), _plan("llama3-70b", 64, old)
        assert a.performance.tokens_per_s >= 0.999 * b.performance.tokens_per_s, (new, old)
    a, b = _plan("llama3-8b", 8, "mi355x-8"), _plan("llama3-8b", 8, "mi325x-8")
    assert 1.3 < a.performance.tokens_per_s / b.performance.tokens_per_s < 1.93


@pytest.mark.parametrize("cluster,gpus,gpu", [("dgx-b300", 16, "b300"), ("gb300-nvl72", 72, "gb300"),
                                               ("mi355x-8", 8, "mi355x"), ("mi350x-8", 8, "mi350x")])
def test_plan_estimate_runs_on_each_new_cluster(cluster: str, gpus: int, gpu: str) -> None:
    r = CliRunner().invoke(app, ["estimate", "--model", "llama3-8b", "--gpus", str(gpus), "--cluster", cluster,
                                 "--top", "2", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["system"]["gpu"]["id"] == gpu and data["system"]["cluster_id"] == cluster
    best = data["results"][0]
    assert best["fits"] and best["memory"]["total_bytes"] <= best["memory"]["capacity_bytes"]
    assert 0.2 < best["performance"]["mfu"] < 0.8
