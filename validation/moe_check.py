"""Mixture-of-experts time model against hardware micro-benchmarks, and where the time goes.

    python -m validation.moe_check

Prints (1) the model's grouped expert GEMMs against DeepGEMM's published FP8 figures on H800,
(2) the model's all-to-all against DeepEP's low-latency kernel times (H800 + CX7 400 Gb/s), and
(3) the step-time shares of the routed experts' GEMMs, the expert all-to-alls and attention for
Mixtral-8x7B on 64 H100 (ep 8) and a DeepSeek-V3-like shape at ep 64 over 8-GPU nodes. The cited
figures and their sources are in tests/planner/test_moe_microbench.py, which pins each of them.
No end-to-end MoE training run is compared: the dev data holds none.
"""

from __future__ import annotations

import numpy as np

from hardware.catalog import load_catalog
from planner import memory, throughput
from planner.context_parallel import all_to_all_s
from planner.layout import Layout
from planner.model import LLAMA_BLOCK, ModelSpec
from planner.moe_time import FP8_DISPATCH_BYTES, node_limited_s
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from tests.planner import test_moe_microbench as bench
from tests.planner.moe_models import MIXTRAL_8X7B

# DeepSeek-V3's MoE shape (arXiv 2412.19437, sec. 4.2; deepseek-ai/DeepSeek-V3 config.json): 61 layers,
# hidden 7168, the first 3 dense (ffn 18432), then 1 shared + 256 routed experts of ffn 2048, top-8,
# vocab 129280. Multi-head latent attention is stood in for by 128 heads of 128 (MHA): the attention
# share below is indicative only.
DEEPSEEK_V3_LIKE = ModelSpec(
    name="deepseek-v3-like", family="deepseek", n_layers=61, hidden=7168, n_heads=128, attn_head_dim=128,
    ffn_hidden=18432, vocab=129280, max_positions=4096, **LLAMA_BLOCK, moe_experts=256, moe_top_k=8,
    moe_ffn_hidden=2048, moe_shared_experts=1, moe_first_dense_layers=3)


def _gemm_rows() -> list[str]:
    out = ["grouped GEMMs, FP8 on H800 (DeepGEMM README / PR #95): TFLOPS measured vs model",
           f"  {'kind':<10}{'groups':>7}{'M':>7}{'N':>7}{'K':>7}{'measured':>10}{'model':>8}{'ratio':>7}"]
    for kind, rows, out_bytes in (("contiguous", bench.CONTIGUOUS, 2.0), ("masked", bench.MASKED, 2.0),
                                  ("wgrad", bench.WGRAD, 8.0)):
        for g, m, n, k, measured in rows:
            model = bench._tflops(g, m, n, k, out_bytes)
            out.append(f"  {kind:<10}{g:>7}{m:>7}{n:>7}{k:>7}{measured:>10.0f}{model:>8.0f}{model / measured:>7.2f}")
    return out


def _a2a_rows() -> list[str]:
    links = bench._links(bench.H800_NVLINK_GBPS)
    out = ["all-to-all, 128 tokens x 7168 x top-8 (DeepEP low-latency kernels, H800 + CX7): us measured vs model",
           f"  {'EP':>5}{'dispatch':>10}{'model':>8}{'combine':>10}{'model':>8}"]
    for ep, d_us, c_us in bench.DEEPEP_LOW_LATENCY:
        d, c = (float(all_to_all_s(links, 128 * 8 * 7168 * b * (ep - 1) / ep, ep, 8, 1)) * 1e6
                for b in (FP8_DISPATCH_BYTES, 2.0))
        out.append(f"  {ep:>5}{d_us:>10.0f}{d:>8.0f}{c_us:>10.0f}{c:>8.0f}")
    spec = DEEPSEEK_V3_LIKE
    out += ["node-limited dispatch, 4 nodes per token (DeepEP V1 normal kernels, H800 + CX7): ms measured vs model",
            f"  {'EP':>5}{'tokens':>8}{'dispatch':>10}{'model':>8}{'combine':>10}{'model':>8}"]
    for ep, tokens, d_gbps, c_gbps in bench.DEEPEP_NORMAL:
        row = []
        for b, gbps in ((FP8_DISPATCH_BYTES, d_gbps), (2.0, c_gbps)):
            measured = tokens * min(ep // 8, 4) * 7168 * b / (gbps * 1e9) * 1e3
            model = float(node_limited_s(spec, links, tokens * 8 * 7168 * b * (ep - 1) / ep, float(ep), 8.0, 1, 4)) * 1e3
            row += [measured, model]
        out.append(f"  {ep:>5}{tokens:>8}{row[0]:>10.2f}{row[1]:>8.2f}{row[2]:>10.2f}{row[3]:>8.2f}")
    return out


def _shares(name, spec, gpus, plan: ExecutionPlan, **moe_settings) -> list[str]:
    cat = load_catalog()
    system = resolve_system(Scenario(gpu="h100-80gb", gpus=gpus), cat)
    settings = Settings(stacks=cat.stacks, **moe_settings)
    lay = Layout.from_plan(plan)
    perf = {k: np.asarray(v).reshape(-1)[0] for k, v in throughput.performance(spec, lay, system, settings).items()}
    mem = memory.memory_arrays(spec, lay, system, settings)
    step = float(perf["step_time_s"])
    gib = float(np.asarray(mem["total_bytes"]).reshape(-1)[0]) / 2**30
    parts = {"routed expert GEMMs": perf["moe_expert_gemm_s"], "expert all-to-all": perf["moe_a2a_s"],
             "attention core (raw)": perf["raw_attention_s"], "expert gradient reduction": perf["moe_expert_grad_s"]}
    how = ", ".join(f"{k.removeprefix('moe_')} {v}" for k, v in moe_settings.items()) or "flat NCCL all-to-all"
    out = [f"{name} ({how}): {gpus} x H100, tp {plan.tp} pp {plan.pp} dp {plan.dp} ep {plan.ep} etp {plan.etp}, micro batch "
           f"{plan.micro_batch} x {plan.seq_len}, grad accum {plan.grad_accum}: step {step:.2f} s, MFU "
           f"{float(perf['mfu']):.1%}, {gib:.0f} GiB per GPU"]
    out += [f"  {k:<28}{float(v):>8.3f} s  {float(v) / step:>6.1%} of the step" for k, v in parts.items()]
    return out


def report() -> str:
    lines = _gemm_rows() + [""] + _a2a_rows() + [""]
    lines += _shares("Mixtral-8x7B", MIXTRAL_8X7B, 64, ExecutionPlan(
        tp=1, dp=64, ep=8, sharding="zero1", activation_checkpointing="full", micro_batch=1, grad_accum=16,
        seq_len=4096))
    v3 = ExecutionPlan(tp=1, pp=8, dp=64, ep=64, sharding="zero1", activation_checkpointing="full", micro_batch=1,
                       grad_accum=64, seq_len=4096)
    lines += [""] + _shares("DeepSeek-V3-like", DEEPSEEK_V3_LIKE, 512, v3)
    lines += [""] + _shares("DeepSeek-V3-like", DEEPSEEK_V3_LIKE, 512, v3, moe_node_limit=4, moe_fp8_dispatch=True)
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
