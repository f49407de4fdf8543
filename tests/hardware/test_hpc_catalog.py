"""The HPC machines of published runs and their parts: each entry loads, and the figures its sources
state (memory, peaks, network, node) are what the TOML says. Derived entries keep the relation to the
measured sibling they were derived from."""

from __future__ import annotations

import pytest

from hardware.catalog import load_catalog

CAT = load_catalog()

# id -> (GPU memory GiB, memory GB/s, dense bf16 TFLOPs, dense fp8 TFLOPs or None, intranode Gbps per direction)
GPUS = {
    "gh200-96gb": (96, 4000, 989.4, 1978.9, 3600),     # GH200 datasheet: 96GB HBM3, 4 TB/s, 1979* bf16, NVLink 900 GB/s
    "gh200-144gb": (144, 4900, 989.4, 1978.9, 3600),   # 144GB HBM3e, 4.9 TB/s
    "a100-64gb": (64, 1631, 312, None, 2400),          # Leonardo: 64GB HBM2e, NVLink 3.0; bandwidth a labelled stand-in
    "h100-nvl": (94, 3900, 835.5, 1670.5, 504),        # H100 NVL: 94GB, 3.9 TB/s, 1671* bf16, PCIe gen5 between cards
    "l40s": (48, 864, 362.05, 733, 252),               # L40S: 48GB GDDR6, 864 GB/s, 362.05 bf16, 1466* fp8, PCIe gen4
    "mi300a": (128, 5300, 980.6, 1961.2, 3072),        # MI300A: 128GB HBM3, 5.3 TB/s; 2 IF links x 64 GB/s x 3 peers
}
# id -> (gpu, gpus_per_node, internode Gbps, host RAM GiB, host link Gbps, cores, nodes)
CLUSTERS = {
    "perlmutter": ("a100-40gb", 4, 4 * 200, 256, 252, 64, 1536),          # 4 x Slingshot 11; 256 GB; EPYC 7763
    "polaris": ("a100-40gb", 4, 2 * 200, 512, 252, 32, 560),              # 2 Slingshot NICs; 512 GiB; 7543P
    "juwels-booster": ("a100-40gb", 4, 4 * 200, 512, 252, 48, 936),       # 4 x HDR200; 2 x EPYC 7402
    "leonardo-booster": ("a100-64gb", 4, 400, 512, 252, 32, 3456),        # "400 Gbps aggregated"; Xeon 8358
    "summit": ("v100-16gb", 6, 2 * 100, 512, 400, 42, 4608),              # dual-rail EDR; NVLink 2 to the CPU
    "alps": ("gh200-96gb", 4, 4 * 200, 480, 3600, 288, 2688),             # 4 NICs; C2C 450 GB/s per direction
    "jupiter-booster": ("gh200-96gb", 4, 4 * 200, 4 * 120, 3600, 288, 5938),  # 4 x NDR200; 4 x 120 GB LPDDR5X
    "eos": ("h100-80gb", 8, 8 * 400, 2048, 504, 112, 576),                # 576 DGX H100, 8 x NDR 400
    "selene": ("a100-80gb", 8, 8 * 200, 2048, 252, 128, None),            # DGX A100, 8 x HDR 200
    "el-capitan": ("mi300a", 4, 4 * 200, 512, 42400, 96, 11136),          # 4 x 128 GB unified HBM3
}


@pytest.mark.parametrize("gpu_id", sorted(GPUS))
def test_new_gpu_figures_are_the_cited_ones(gpu_id: str) -> None:
    g = CAT.gpu(gpu_id)
    mem, bw, bf16, fp8, nvlink = GPUS[gpu_id]
    assert (g.hbm_gib, g.hbm_gbytes_per_s, g.bf16_tflops, g.fp8_tflops, g.intranode_gbps) == (mem, bw, bf16, fp8, nvlink)
    assert len(g.source) > 20 and g.matmul_efficiency


@pytest.mark.parametrize("cluster_id", sorted(CLUSTERS))
def test_new_cluster_figures_are_the_cited_ones(cluster_id: str) -> None:
    c = CAT.cluster(cluster_id)
    gpu, per_node, net, ram, host, cores, nodes = CLUSTERS[cluster_id]
    assert (c.gpu, c.gpus_per_node, c.internode_gbps, c.host_ram_gib, c.host_to_gpu_gbps) == (gpu, per_node, net, ram, host)
    assert (c.cpu_cores_per_node, c.nodes) == (cores, nodes) and len(c.source) > 20


def test_gh200_is_h100_silicon_with_its_own_memory() -> None:
    """GH200's GPU is the H100 SXM die (132 SMs): same peaks and (derived) curves; its LPDDR5X is host
    memory behind NVLink-C2C, never counted as GPU memory."""
    h100 = CAT.gpu("h100-80gb")
    for gid in ("gh200-96gb", "gh200-144gb"):
        g = CAT.gpu(gid)
        assert (g.bf16_tflops, g.fp8_tflops, g.tf32_tflops, g.sm_count) == (989.4, 1978.9, 494.7, 132)
        assert (g.matmul_efficiency, g.attention_efficiency, g.cudnn_attention_efficiency) == (
            h100.matmul_efficiency, h100.attention_efficiency, h100.cudnn_attention_efficiency)
        assert g.hbm_gib < 200  # not the superchip's 480/576/624 GB
    for cid in ("alps", "jupiter-booster"):  # C2C: 900 GB/s both ways = 7x a PCIe gen5 x16 link
        assert CAT.cluster(cid).host_to_gpu_gbps == 900 / 2 * 8 > 7 * CAT.cluster("dgx-h100").host_to_gpu_gbps


def test_derived_curves_keep_their_sibling_relation() -> None:
    """A part without its own GEMM measurements takes its nearest measured sibling's curve, with GEMM sizes
    scaled by the peak ratio (a GEMM of equal duration reaches the same share)."""
    def scaled(part: str, sibling: str, ratio: float) -> None:
        a, b = CAT.gpu(part).matmul_efficiency, CAT.gpu(sibling).matmul_efficiency
        assert [p.fraction for p in a] == [p.fraction for p in b]
        for p, q in zip(a, b):
            assert p.gemm_gflop == pytest.approx(q.gemm_gflop * ratio, rel=0.02)
    scaled("h100-nvl", "h100-80gb", 835.5 / 989.4)
    scaled("mi300a", "mi300x", 980.6 / 1307.4)
    scaled("l40s", "a100-pcie-80gb", 362.05 / 312)
    scaled("a100-64gb", "a100-80gb", 1.0)
    mi300a, mi300x = CAT.gpu("mi300a"), CAT.gpu("mi300x")  # 228 of 304 CUs at the same 2.1 GHz
    for prec in ("bf16", "fp8", "tf32"):
        assert mi300a.peak_tflops(prec) == pytest.approx(mi300x.peak_tflops(prec) * 228 / 304, rel=1e-3)
    assert mi300a.attention_efficiency == mi300x.attention_efficiency


def test_selene_is_a_dgx_a100_node_and_summit_has_two_nvlink_groups() -> None:
    selene, dgx = CAT.cluster("selene"), CAT.cluster("dgx-a100")
    for key in ("gpu", "gpus_per_node", "host_ram_gib", "host_to_gpu_gbps", "internode_gbps",
                "internode_collective_efficiency", "intranode_gbps", "nvlink_domain"):
        assert getattr(selene, key) == getattr(dgx, key), key  # dev rows naming Selene predict as before
    summit = CAT.cluster("summit")  # 50 GB/s per direction per NVLink pair, CPU-GPU over NVLink too
    assert summit.intranode_gbps == summit.host_to_gpu_gbps == 50 * 8 and summit.nvlink_domain == 6
    assert summit.intranode_gbps < CAT.gpu("v100-16gb").intranode_gbps  # the DGX-1 figure would be optimistic
