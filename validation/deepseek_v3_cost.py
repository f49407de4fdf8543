"""Sanity check (not a data row, not a fit): DeepSeek-V3's own training cost against the planner.

DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" (arXiv 2412.19437), Table 1: pre-training 2664K H800
GPU hours for 14.8T tokens (+ 119K context extension + 5K post-training = 2788K); sec. 3.1-3.2: 2048
H800 GPUs, 8 per node on NVLink/NVSwitch, InfiniBand across nodes ("IB (50 GB/s)", "NVLink (160 GB/s)"
achievable per GPU, sec. 3.2.2), 16-way pipeline parallelism (DualPipe), 64-way expert parallelism over
8 nodes, ZeRO-1 data parallelism, no tensor parallelism, FP8 mixed precision with fine-grained
(1x128 tile / 128x128 block) scaling; sec. 4.2: sequence length 4K, batch 15360 sequences (after the
ramp-up).

Prints (1) the MFU the reported GPU hours imply with the planner's FLOP count (model FLOPs without and
with the MTP module; against the 16-bit dense peak as MFU is quoted, and the fp8 one), and (2) what
the planner predicts for that layout on an H800 built for this script from the H100 SXM entry (same
compute and HBM; NVLink 400 GB/s bidirectional per the H800 spec, IB 400 Gb/s per GPU) with the fp8
row-wise recipe (the catalog's closest to DeepSeek's tile-wise scaling) and the Megatron profile, twice:
with the planner's defaults (bf16 all-to-all, every token free to reach all 8 nodes, all-to-all fully
exposed) and with the paper's own settings: node-limited routing to 4 nodes (sec. 2.1.2 / 3.2.2, "each
token will be sent to at most 4 nodes"), fp8 dispatch (sec. 3.3.2, "we quantize the activation before MoE
up-projections into FP8 and then apply dispatch components"; combine in BF16) and the all-to-all
overlapped with another micro batch's compute (sec. 3.2.1, DualPipe; Settings.moe_a2a_overlap, 20 of 132
SMs to communication), and its memory recipe (planner/memory_savings.py: RMSNorm and MLA up-projections
recomputed, sec. 3.2.3; linear inputs cached in FP8, sec. 3.3.2; BF16 AdamW moments, sec. 3.3.2), without
which its layout needs full recompute, and its fp32 gradients (sec. 3.3.3; hardware/stacks.py
main_grads_fp32). DualPipe itself is not a schedule the planner expresses: the pipeline is taken as
1F1B (planner/plain_paths.py), without DualPipe's second copy of the parameters (sec. 3.2.1: "DualPipe
requires keeping two copies of the model parameters") or its own bubble. Nothing here is fitted to the reported cost, nor feeds the fitted
profiles.

    python validation/deepseek_v3_cost.py
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from planner import api, flops, mtp
from planner.presets import resolve_model
from planner.scenario import Scenario
from planner.settings import Settings

PAPER_SETTINGS = {"moe_node_limit": 4, "moe_fp8_dispatch": True, "moe_a2a_overlap": True,
                  "recompute_norms_mla_up": True, "fp8_activation_cache": True, "optimizer_moments_bf16": True}
PRETRAIN_GPU_HOURS = 2_664_000
TOTAL_GPU_HOURS = 2_788_000
TOKENS = 14.8e12
SEQ_LEN = 4096
CATALOG = Path(__file__).resolve().parents[1] / "catalog"


def _h800_catalog(root: Path, fp32_grads: bool = False) -> None:
    """gpus/h800.toml (the H100 SXM entry, NVLink 400 GB/s both ways = 1600 Gbps per direction) and
    clusters/h800-ib.toml (8 per node, 8 x 400 Gb/s InfiniBand per node); `fp32_grads`: the Megatron
    profile with the paper's fp32 gradients of the whole stage (sec. 3.3.3: "gradients (used for batch
    size accumulation) are still retained in FP32"; hardware/stacks.py main_grads_fp32)."""
    gpu = (CATALOG / "gpus" / "h100-80gb.toml").read_text()
    gpu = gpu.replace('name = "NVIDIA H100 80GB HBM3 (SXM5)"', 'name = "NVIDIA H800 80GB (SXM5), built from the H100 entry"')
    gpu = re.sub(r"(?m)^intranode_gbps = \d+", "intranode_gbps = 1600", gpu)
    (root / "gpus").mkdir(parents=True)
    (root / "gpus" / "h800.toml").write_text(gpu)
    cluster = (CATALOG / "clusters" / "dgx-h100.toml").read_text()
    cluster = cluster.replace('gpu = "h100-80gb"', 'gpu = "h800"').replace('name = "NVIDIA DGX H100"', 'name = "H800 x 8, IB"')
    (root / "clusters").mkdir()
    (root / "clusters" / "h800-ib.toml").write_text(cluster)
    if fp32_grads:
        (root / "stacks").mkdir()
        stack = (CATALOG / "stacks" / "megatron.toml").read_text()
        if re.search(r"(?m)^main_grads_fp32 = ", stack):  # the refit writes the key (false for Megatron)
            stack = re.sub(r"(?m)^main_grads_fp32 = \w+", "main_grads_fp32 = true", stack, count=1)
        else:
            stack = stack.replace("\nfit_method =", "\nmain_grads_fp32 = true\nfit_method =", 1)
        (root / "stacks" / "megatron.toml").write_text(stack)


def main() -> None:
    spec = resolve_model("deepseek-v3")
    model_f = float(flops.model_flops_per_token(spec, SEQ_LEN))
    mtp_f = mtp.training_flops_per_token(spec, SEQ_LEN)
    peak16, peak8 = 989.4e12, 1978.9e12  # H800 = H100 SXM compute (dense)
    print(f"{spec.describe()}\nMTP module: {mtp.params(spec) / 1e9:.2f}B own parameters (not in n_params)")
    print(f"model FLOPs per token at {SEQ_LEN}: {model_f / 1e9:.1f} G (6 x activated + attention core, full s x s); "
          f"MTP adds {mtp_f / 1e9:.1f} G")
    for label, hours in (("pre-training 2664K GPU h", PRETRAIN_GPU_HOURS), ("all 2788K GPU h", TOTAL_GPU_HOURS)):
        tps = TOKENS / (hours * 3600.0)
        for what, f in (("model", model_f), ("model+MTP", model_f + mtp_f)):
            print(f"  {label:25s} {tps:7.0f} tokens/s/GPU -> {what:9s} {tps * f / 1e12:5.0f} TFLOPs/GPU, "
                  f"MFU {tps * f / peak16:5.1%} of bf16 peak ({tps * f / peak8:5.1%} of fp8 peak)")
    scenario = Scenario(model="deepseek-v3", gpus=2048, cluster="h800-ib", tp=1, pp=16, ep=64, sharding="zero1",
                        precision="fp8", fp8_recipe="rowwise", stack="megatron", seq_len=SEQ_LEN,
                        global_batch=15360, tokens=TOKENS)
    exposed = {**PAPER_SETTINGS, "moe_a2a_overlap": False}
    for label, settings in (("planner defaults", Settings()), ("the paper's settings, all-to-all exposed",
                                                                Settings(**exposed)),
                            ("the paper's settings " + str(PAPER_SETTINGS), Settings(**PAPER_SETTINGS))):
        with tempfile.TemporaryDirectory() as tmp:
            _h800_catalog(Path(tmp), fp32_grads=settings.moe_fp8_dispatch)  # the paper's settings
            report = api.estimate(scenario, catalog_dirs=[tmp], settings=settings, top=3)
        print(f"planner, {label}, {report.system.gpus} x {report.system.gpu.name}: {report.fitting} fitting plans")
        for est in report.results:
            p, perf, t = est.plan, est.performance, est.time
            print(f"  tp{p.tp} pp{p.pp} ep{p.ep} dp{p.dp} mb{p.micro_batch} ga{p.grad_accum} ckpt "
                  f"{p.activation_checkpointing}: {perf.tokens_per_s_per_gpu:6.0f} tokens/s/GPU, MFU {perf.mfu:5.1%}, "
                  f"{perf.gpu_hours / 1e3:6.0f}K GPU h for 14.8T (reported 2664K: x{perf.gpu_hours / PRETRAIN_GPU_HOURS:.2f}); "
                  f"step {t.step_time_s:.1f} s = compute {t.compute_s:.1f} + comm {t.comm_exposed_s:.1f} "
                  f"(all-to-all {t.moe_a2a_s or 0:.1f}) + bubble {t.bubble_s:.1f}; "
                  f"{est.memory.total_bytes / 2**30:.1f} GiB of {est.memory.capacity_bytes / 2**30:.0f}")

if __name__ == "__main__":
    main()
