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


# ------------------------------------------------------------------ expert all-to-all

def _links(nvlink_gbps=None):
    from planner import comm
    from planner.resolve import resolve_system
    from planner.scenario import Scenario
    from planner.settings import Settings

    system = resolve_system(Scenario(gpu="h100-80gb", gpus=256), load_catalog())  # 8 x CX7 400 Gb/s per node
    if nvlink_gbps:
        system = system.model_copy(update={"intranode_gbps": nvlink_gbps})
    return comm.Links.of(system, Settings())


H800_NVLINK_GBPS = 1600  # 400 GB/s both directions = 200 GB/s each way
# DeepEP low-latency kernels (deepseek-ai/DeepEP docs/legacy.md, V1 "Low-latency kernels with pure
# RDMA"): H800 + CX7 400 Gb/s per GPU, 128 tokens, hidden 7168, top-8, FP8 dispatch, BF16 combine.
# Each (token, expert) pair is its own message, as Megatron's all-to-all dispatcher sends them:
# (EP, dispatch us, combine us)
DEEPEP_LOW_LATENCY = [(16, 118, 195), (32, 155, 273), (64, 173, 314), (128, 192, 369), (256, 194, 360)]


@pytest.mark.parametrize("ep,dispatch_us,combine_us", DEEPEP_LOW_LATENCY)
def test_all_to_all_time_within_ten_percent_of_deepep_low_latency(ep, dispatch_us, combine_us):
    from planner.context_parallel import all_to_all_s
    from planner.moe_time import FP8_DISPATCH_BYTES

    links = _links(H800_NVLINK_GBPS)
    copies = 128 * 8 * 7168  # elements a GPU sends, top-8 copies of its tokens
    for nbytes, measured in ((FP8_DISPATCH_BYTES, dispatch_us), (2.0, combine_us)):
        sent = copies * nbytes * (ep - 1) / ep
        assert float(all_to_all_s(links, sent, ep, 8, 1)) * 1e6 == pytest.approx(measured, rel=0.10)


def test_nic_rate_of_an_all_to_all_matches_deepep_and_nccl():
    """What one GPU pushes through its NIC in an all-to-all across nodes: the model's 0.85 x 50 GB/s
    = 42.5 GB/s. Measured: DeepEP normal kernels' RDMA "bottleneck bandwidth" counts the copies to
    every node a token goes to, its own included (docs/legacy.md; V2 README: "logical bandwidth ...
    contains local rank traffic"): V1 EP 32 (4 nodes, each token to 4) 58 x 3/4 = 43.5 GB/s on the
    wire, EP 64 (4 of 8 nodes) 51 x 3.5/4 = 44.6; V2 EP 8x2 90 / 2 = 45, EP 8x4 61 x 3/4 = 45.8.
    NCCL: "CX-7 NICs at NDR rate (400Gbps) should achieve up to 48-49GB/s per NIC" and an all-to-all
    "cannot aggregate the bandwidth of multiple NICs" (NVIDIA/nccl-tests#267)."""
    from planner.context_parallel import all_to_all_s

    links = _links(H800_NVLINK_GBPS)
    sent = 1e9
    for ep in (16, 32, 64):
        nic_bytes = sent * (ep - 8) / (ep - 1)
        rate = nic_bytes / float(all_to_all_s(links, sent, ep, 8, 0))
        for wire in (43.5e9, 44.6e9, 45.0e9, 45.8e9):
            assert rate == pytest.approx(wire, rel=0.10)
        assert rate < 48e9


def test_nvlink_rate_of_an_all_to_all_inside_a_node():
    """H100: NVLink's 450 GB/s line rate less NCCL's ~20% protocol overhead, "an effective NVLink
    bandwidth of 370GB/s, which you can observe as BusBw when running non-allreduce operations"
    (NVIDIA/nccl-tests#212); the model 0.80 x 450 = 360. H800: DeepEP's intranode normal kernels
    reach 153 / 158 GB/s (dispatch / combine, EP 8, own rank's tokens included: 7/8 of it, 134-138
    GB/s, on NVLink) of "~160 GB/s NVLink maximum bandwidth" (docs/legacy.md): the model's 160 is
    NCCL's rate, DeepEP's copy kernels reach 84-86% of it."""
    from planner.context_parallel import all_to_all_s

    for gbps, nccl in ((None, 370e9), (H800_NVLINK_GBPS, 370e9 * 200 / 450)):
        links = _links(gbps)
        rate = 1e9 / float(all_to_all_s(links, 1e9, 8, 8, 0))
        assert rate == pytest.approx(nccl, rel=0.05)
    h800 = 1e9 / float(all_to_all_s(_links(H800_NVLINK_GBPS), 1e9, 8, 8, 0))
    for logical in (153e9, 158e9):
        assert 0.80 < logical * 7 / 8 / h800 < 0.90


def test_fp8_dispatch_halves_the_dispatch_bytes_only():
    """DeepSeek-V3 (arXiv 2412.19437, sec. 3.3.2): activations quantized to FP8 before the dispatch
    (and the activation gradients before the backward dispatch), the combines kept in BF16."""
    from planner import moe_time
    from planner.layout import Layout
    from planner.scenario import ExecutionPlan
    from tests.planner.moe_models import MIXTRAL_8X7B

    lay = Layout.from_plan(ExecutionPlan(tp=1, dp=64, ep=64 // 8, activation_checkpointing="none",
                                         micro_batch=1, grad_accum=1, seq_len=4096))
    links = _links()
    bf16 = float(moe_time.a2a_s_per_layer(MIXTRAL_8X7B, lay, links, 1.0, False)[0])
    fp8 = float(moe_time.a2a_s_per_layer(MIXTRAL_8X7B, lay, links, 1.0, True)[0])
    assert fp8 / bf16 == pytest.approx((1 + (1 + 4 / 128) / 2) / 2, rel=0.02)


# DeepEP normal kernels (node-limited routing, sent once per node over RDMA, forwarded over NVLink):
# H800 + CX7, 4096 tokens per GPU, hidden 7168, top-8 of 256 experts, each token to at most 4 nodes
# (tests/test_internode.py: num_topk_groups = min(nodes, 4)), FP8 dispatch / BF16 combine. Their RDMA
# "bottleneck bandwidth" is num_rdma_token_sent x hidden x bytes / time, num_rdma_token_sent counting
# a token's copy to every node it goes to, its own node's included (test_internode.py):
# (EP, dispatch GB/s, combine GB/s), docs/legacy.md. Left out: V1's EP 16 (43 / 43 GB/s, half V2's
# rate on the same 2 nodes) and V2's README figures (EP 8x2 90 / 81 GB/s, 8x4 61 / 61 GB/s at 8192
# tokens), whose byte count the V2 tests define differently (the model's NVLink forwarding of top-k
# copies makes EP 8x2 NVLink-bound at twice their time).
DEEPEP_NORMAL = [(32, 4096, 58, 57), (64, 4096, 51, 50)]


def _expected_nodes(nodes, limit=4):
    return min(nodes, limit)


@pytest.mark.parametrize("ep,tokens,dispatch_gbps,combine_gbps", DEEPEP_NORMAL)
def test_node_limited_dispatch_within_ten_percent_of_deepep_normal_kernels(ep, tokens, dispatch_gbps, combine_gbps):
    from planner import moe_time
    from planner.model import LLAMA_BLOCK, ModelSpec

    spec = ModelSpec(n_layers=4, hidden=7168, n_heads=56, vocab=1000, ffn_hidden=2048, **LLAMA_BLOCK,
                     moe_experts=256, moe_top_k=8, moe_ffn_hidden=2048)
    links = _links(H800_NVLINK_GBPS)
    nodes = ep // 8
    for nbytes, logical_gbps in ((moe_time.FP8_DISPATCH_BYTES, dispatch_gbps), (2.0, combine_gbps)):
        flat = tokens * 8 * 7168 * nbytes * (ep - 1) / ep  # what a flat all-to-all would send
        model_s = float(moe_time.node_limited_s(spec, links, flat, float(ep), 8.0, 1, 4))
        measured_s = tokens * _expected_nodes(nodes) * 7168 * nbytes / (logical_gbps * 1e9)
        assert model_s == pytest.approx(measured_s, rel=0.10)


def test_node_limited_routing_cuts_the_nic_bytes_of_a_wide_ep():
    """DeepSeek-V3's 4-node limit at ep 64 sends a token over the NICs 3.5 times instead of 7 (its 8
    experts spread over 7 other nodes): about half the all-to-all time of Megatron's flat dispatcher."""
    from planner import moe_time
    from planner.model import LLAMA_BLOCK, ModelSpec

    spec = ModelSpec(n_layers=4, hidden=7168, n_heads=56, vocab=1000, ffn_hidden=2048, **LLAMA_BLOCK,
                     moe_experts=256, moe_top_k=8, moe_ffn_hidden=2048)
    links = _links()
    flat = 4096 * 8 * 7168 * 2.0 * 63 / 64
    from planner.context_parallel import all_to_all_s

    ratio = float(moe_time.node_limited_s(spec, links, flat, 64.0, 8.0, 1, 4)) / float(all_to_all_s(links, flat, 64, 8, 1))
    assert 0.45 < ratio < 0.6
