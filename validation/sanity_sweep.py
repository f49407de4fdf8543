"""Sanity sweep of the analytic model: invariants of physics over a grid of pinned plans.

    python -m validation.sanity_sweep [--limit N] [--only vpp seq_len ...]

Prints numbers, not a test: every violation with its plan(s) and step-time breakdown, then a
count per check (~15k plans, 2-3 minutes). The plans (validation/sanity_plans.py) cover GPUs
(V100 .. B200, MI250X, MI300X) x stacks x models (GPT 125M .. 1T with GELU, LLaMA 8B .. 405B with
SwiGLU/GQA) x sequence lengths (512 .. 128k) x layouts (tp, pp with vpp and uneven stages, cp,
sequence parallelism) x GPU counts (1 .. 16k). Checks (scaling ones in validation/sanity_scaling.py):

- per plan: every time term finite and >= 0, step = sum of its parts, tokens/s > 0, hfu >= mfu,
  MFU of the executed FLOPs at most the GPU's GEMM plateau (fp8: against the fp8 peak), a
  pipelined step at least one micro batch's trip through every stage;
- monotonic: more gradient accumulation never slower per GPU; vpp never a larger bubble share; a
  faster network never slower (and inside one node, no effect at all); weak scaling (dp only)
  never faster per GPU but for the sharded optimizer step; a larger model never more tokens/s; a
  longer sequence never a smaller attention share nor more tokens/s at the same tokens per micro
  batch; recompute never faster nor more activations; sequence parallelism never slower nor more
  activations; offload never faster; a bigger micro batch (no pipeline) not slower beyond tile
  quantization; flash attention never slower than eager; the same chip with more HBM bandwidth
  (A100 80 vs 40, H200 vs H100) never slower; GPU speed ratios within their peak/HBM ratios;
- continuity: per-GPU tokens/s across adjacent node counts (from 2 nodes and dp 4), MFU across
  doubled sequence lengths, compute speed across cp doublings (jumps > 30%);
- pipeline: adding a block never shortens the step; uneven stages (126 layers on 16, 49 on 32,
  95 on 8) never more work per second than the even split with the same heaviest stage; vpp
  that does not divide the stage's layers refused with a reason naming the layers;
- memory: cp 2 / 4 about 1/2 / 1/4 of the activations; ZeRO-3 / FSDP model states = sharded / dp
  + constant, ~16 bytes per parameter sharded;
- MoE presets with local attention (validation/sanity_moe.py: Llama 4's chunked attention, gpt-oss's
  sliding window): seq_len, window / chunk size, GPU count and expert-parallel memory;
- feasibility: fp8 refused on GPUs without fp8 (A100, V100, MI250X), bf16 refused on V100, both
  accepted where present; cp accepted on any head count.

Found and fixed (tests/planner/test_corner_physics.py): cp refused where it does not divide the
heads (ring attention splits the sequence, not the heads); an interleaved pipeline with fewer
micro batches than stages predicted faster than one micro batch's trip through the stages (up to
3x with one micro batch and vpp 6); fused attention on GPUs without a measured curve (MI300X, B200,
MI250X, V100, PCIe parts) charged for the whole causal score matrix (1.33x slower than the eager
GEMMs instead of ~2x faster). Legitimate effects that narrowed a check are said where it is made.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python validation/sanity_sweep.py` from anywhere

from planner import flops  # noqa: E402
from validation.sanity_plans import catalog, model_columns, plateau
from validation.sanity_moe import MOE_CHECKS
from validation.sanity_record import (COUNTS, GPUS, SEEN, TERMS, TOL, VIOLATIONS, _ok, flag, gpt, monotonic, prec,
                                      run)
from validation.sanity_scaling import (check_broad_grid, check_cp_scaling, check_gpu_ratio, check_grad_accum,
                                       check_micro_batch, check_model_size, check_network, check_same_chip,
                                       check_seq_len, check_weak_scaling)


def check_feasibility() -> None:
    for gpu in GPUS:
        g = catalog().gpus[gpu]
        for p in ("fp8", "bf16", "fp16"):
            has = {"fp8": g.fp8_tflops, "bf16": g.bf16_tflops, "fp16": g.fp16_tflops}[p]
            r = run(**gpt("gpt-1.3b"), gpu=gpu, gpus=8, seq_len=2048, global_batch=64, precision=p)
            COUNTS["feasibility"] += 1
            if bool(has) == bool(r.refused) or (r.refused and p not in r.refused):
                flag("feasibility", f"{p} on {gpu} (has {p}: {bool(has)}) "
                     f"{'refused' if r.refused else 'accepted'}", r)


def check_vpp() -> None:
    for model, pp in (("gpt-175b", 8), ("llama-70b", 4), ("gpt-39b", 8), ("llama-405b", 16)):
        n_layers = model_columns(model)["n_layers"]
        for ga in (1, 2, 4, 16):
            rs = []
            for vpp in (1, 2, 3, 4, 6):
                r = run(**gpt(model), gpu="h100-80gb", gpus=8 * pp, tp=8, pp=pp, vpp=vpp, seq_len=4096,
                        global_batch=ga)
                divides = vpp == 1 or n_layers % (pp * vpp) == 0
                COUNTS["vpp_refusal"] += 1
                if divides == bool(r.refused) or (r.refused and "n_layers" not in r.refused):
                    flag("vpp_refusal", f"vpp {vpp} on {n_layers} layers / pp {pp} "
                         f"{'refused' if r.refused else 'accepted'}", r)
                rs.append(r)
            # the bubble's share of the busy time (bubble_s itself also carries the 2 x vpp sends
            # per micro batch, which interleaving adds: with one micro batch it cannot shrink)
            monotonic("vpp_bubble", rs, "bubble_fraction", -1, "more virtual stages")


def check_checkpointing_sp_offload() -> None:
    for gpu in ("a100-80gb", "h100-80gb", "mi250x"):
        for model, tp, pp in (("llama-70b", 8, 4), ("gpt-13b", 4, 1), ("gpt-175b", 8, 8)):
            common = dict(**gpt(model), gpu=gpu, gpus=tp * pp * 4, tp=tp, pp=pp, seq_len=4096, global_batch=64,
                          precision=prec(gpu))
            ck = [run(**common, activation_checkpointing=c) for c in ("none", "selective", "full")]
            monotonic("recompute_speed", ck, "tokens_per_s_per_gpu", -1, "more recompute")
            monotonic("recompute_memory", ck, "activations_bytes", -1, "more recompute")
            sp = [run(**common, sequence_parallel=s) for s in (False, True)]
            monotonic("sp_speed", sp, "tokens_per_s_per_gpu", +1, "sequence parallelism")
            monotonic("sp_memory", sp, "activations_bytes", -1, "sequence parallelism")
        for model in ("gpt-13b", "llama-8b"):
            for stack, sharding, off in (("hf", "zero3", ("none", "optimizer", "optimizer+params")),
                                         ("fsdp", "fsdp_full_shard", ("none", "optimizer+params")),
                                         ("hf", "zero2", ("none", "optimizer"))):
                rs = [run(**gpt(model), gpu=gpu, gpus=16, seq_len=2048, global_batch=64, precision=prec(gpu),
                          stack=stack, sharding=sharding, offload=o) for o in off]
                monotonic("offload", rs, "tokens_per_s_per_gpu", -1, "more offload")


def check_uneven_pp() -> None:
    """Adding a block never makes a step faster (L = q*pp - 2 .. q*pp + 2 at a fixed pp). With a
    negligible output layer (vocab 128), uneven stages keep the lighter stages idle part of the
    time: the work per second (layers x tokens/s) never beats the even split with the same
    heaviest stage (pp * ceil(L / pp) blocks). With a real vocabulary the even split is NOT the
    reference: its last stage carries a full share of blocks plus the output layer, so 126 blocks
    on 16 stages (the last gets 7 + logits) are better balanced than 128 (8 + logits) - that is
    why Megatron takes blocks off the first/last stage - and the Alpa bubble (sum of the lighter
    stages) is smaller, legitimately. Checked with m >= p only: with fewer micro batches than stages
    the step is mostly the fill and drain across every stage, which a lighter first or last stage
    shortens (Megatron's schedule replayed op by op, tests/planner/test_interleaved_split.replay, blocks
    of 1, m 4: 126 on 16 stages 149.02 against 128's 152.04, 0.846 against 0.842 block-micro-batches
    per unit; 95 / 96 on 8: 0.736 against 0.727; the planner is exact there, planner/plain_paths.py)."""
    for gpu in ("h100-80gb", "a100-80gb"):
        for hidden, heads, uneven, pp in ((16384, 128, 126, 16), (8192, 64, 49, 32), (8192, 64, 95, 8)):
            even = pp * -(-uneven // pp)
            for vocab in (128, 32000, 256000):
                for ga in (4, 32):
                    def one(n):
                        return run(n_layers=n, hidden=hidden, n_heads=heads, n_kv_heads=8, ffn_hidden=hidden * 13 // 4,
                                   vocab=vocab, mlp="swiglu", gpu=gpu, gpus=8 * pp, tp=8, pp=pp, seq_len=4096,
                                   global_batch=ga)
                    rs = [one(n) for n in range(max(even - pp - 2, pp), even + 3)]
                    monotonic("layers_step", rs, "step_time_s", +1, "one more block")
                    u, e = one(uneven), one(even)
                    if vocab == 128 and ga >= pp and _ok(u, e):
                        COUNTS["uneven_pp"] += 1
                        work_u = u["tokens_per_s"] * uneven
                        work_e = e["tokens_per_s"] * even
                        if work_u > work_e * (1 + TOL):
                            flag("uneven_pp", f"layer-tokens/s {work_u:.4g} (uneven {uneven}/{pp}) > "
                                 f"{work_e:.4g} (even {even}/{pp})", u, e)


def check_cp_and_zero_memory() -> None:
    for gpu in ("h100-80gb", "mi300x"):
        for model in ("llama-8b", "llama-70b"):
            base = dict(**gpt(model), gpu=gpu, gpus=64, tp=8, seq_len=32768, global_batch=8,
                        sequence_parallel=True)
            rs = {cp: run(**base, cp=cp) for cp in (1, 2, 4)}
            for cp in (2, 4):
                if _ok(rs[1], rs[cp]):
                    COUNTS["cp_memory"] += 1
                    ratio = rs[cp]["activations_bytes"] / rs[1]["activations_bytes"]
                    if not 0.8 / cp <= ratio <= 1.25 / cp:
                        flag("cp_memory", f"cp {cp} activations {ratio:.3f} x cp 1 (expected ~{1 / cp:.2f})",
                             rs[1], rs[cp])
    for gpu in ("a100-80gb", "h100-80gb"):
        for model in ("gpt-13b", "llama-70b", "gpt-175b"):
            for stack, sharding in (("hf", "zero3"), ("fsdp", "fsdp_full_shard"), ("torchtitan", "fsdp_full_shard")):
                rs = [run(**gpt(model), gpu=gpu, gpus=g, seq_len=2048, global_batch=g, stack=stack,
                          sharding=sharding) for g in (16, 32, 64)]
                # Model states = sharded / dp + what is gathered at once (FSDP's unsharded block and
                # its prefetch, ZeRO-3's live parameters and buckets: constant in dp), so the
                # differences halve when dp doubles, and the sharded part is ~16-20 bytes/parameter.
                if not _ok(*rs):
                    continue
                COUNTS["zero3_memory"] += 1
                states = [sum(r[k] for k in ("weights_bytes", "grads_bytes", "optimizer_bytes")) for r in rs]
                d1, d2 = states[0] - states[1], states[1] - states[2]
                per_param = d1 * 32 / rs[0].spec.n_params
                if not (d2 > 0 and 1.8 <= d1 / d2 <= 2.2 and 12 <= per_param <= 20):
                    flag("zero3_memory", f"model states {[round(x / 2**30, 2) for x in states]} GiB at dp 16/32/64: "
                         f"not sharded/dp + constant (sharded part {per_param:.1f} bytes/param)", *rs)


def check_fp8() -> None:
    for gpu in ("h100-80gb", "h200-141gb", "b200", "mi300x"):
        for model, tp in (("llama-8b", 1), ("llama-70b", 8), ("gpt-175b", 8)):
            for recipe in ("tensorwise", "rowwise", "delayed"):
                common = dict(**gpt(model), gpu=gpu, gpus=64, tp=tp, seq_len=4096, global_batch=64 // tp * 2,
                              stack="megatron" if recipe == "delayed" else "torchtitan",
                              sharding="zero1" if recipe == "delayed" else "fsdp_full_shard")
                b, f = run(**common), run(**common, precision="fp8", fp8_recipe=recipe)
                if _ok(b, f):
                    COUNTS["fp8_speedup"] += 1
                    s = f["tokens_per_s"] / b["tokens_per_s"]
                    if not 1.0 <= s <= 2.0:
                        flag("fp8_speedup", f"fp8 ({recipe}) / bf16 tokens/s = {s:.3f} (expected within 1..2)", b, f)


def check_cp_refusal() -> None:
    """Ring attention (Megatron-Core CP, torchtitan CP) splits the sequence, not the heads: a cp
    that divides the GPUs and the sequence (in 2 x cp chunks, the load-balanced causal split) is
    accepted whatever the head count (40 heads, cp 16; 8 key/value heads, cp 16)."""
    for model, cp in (("gpt-13b", 16), ("gpt-13b", 8), ("llama-70b", 16), ("gpt-1.3b", 32), ("llama-405b", 16)):
        for stack, sharding in (("megatron", "zero1"), ("torchtitan", "fsdp_full_shard")):
            tp = 8 if model.startswith("llama") else 1
            r = run(**gpt(model), gpu="h100-80gb", gpus=tp * cp * 2, tp=tp, cp=cp, seq_len=131072, global_batch=2,
                    stack=stack, sharding=sharding, sequence_parallel=tp > 1)
            COUNTS["cp_refusal"] += 1
            if r.refused:
                flag("cp_refusal", f"cp {cp} refused on {model_columns(model)['n_heads']} heads", r)


def check_network_invariance() -> None:
    """Inside one node the inter-node network carries nothing: its bandwidth changes no term."""
    for gpu in ("a100-80gb", "h100-80gb", "mi250x"):
        for model, tp, pp, sharding, stack in (("gpt-6.7b", 1, 1, "zero1", "megatron"), ("llama-8b", 2, 2, "zero1",
                                                                                          "megatron"),
                                               ("gpt-13b", 1, 1, "zero3", "hf"), ("llama-8b", 1, 1, "fsdp_full_shard",
                                                                                   "fsdp")):
            rs = [run(**gpt(model), gpu=gpu, gpus=8, tp=tp, pp=pp, seq_len=2048, global_batch=64, sharding=sharding,
                      stack=stack, precision=prec(gpu), internode_gbps=bw) for bw in (10, 100, 3200)]
            rs = [r for r in rs if not r.refused]
            for a in rs[1:]:
                COUNTS["network_invariance"] += 1
                if abs(a["step_time_s"] / rs[0]["step_time_s"] - 1) > 1e-9:
                    flag("network_invariance", "one node: the step time depends on the inter-node bandwidth", rs[0], a)


def check_flash_vs_eager() -> None:
    """A fused (flash) attention kernel computes the causal half of the scores and never writes
    them: its attention time is never above the eager (materialised) one, on any GPU."""
    for gpu in GPUS:
        for model, seq in (("gpt-1.3b", 2048), ("llama-8b", 8192), ("gpt-13b", 32768)):
            rs = [run(**gpt(model), gpu=gpu, gpus=8, seq_len=seq, global_batch=8, precision=prec(gpu), attention=a)
                  for a in ("eager", "flash")]
            monotonic("flash_vs_eager", rs, "tokens_per_s_per_gpu", +1, "flash instead of eager attention")
            # the core plus the element-wise passes (where the eager scores' HBM traffic is): on
            # Hopper FlashAttention-2 reaches ~35% of the peak on the causal half (Dao 2023; the
            # catalog's H100 curve) against cuBLAS's ~70% on the whole score GEMMs, so its core alone
            # is about the eager one; on MI300X CK's FlashAttention-2 reaches 0.17 (ROCm/flash-attention
            # #142) against 0.45 for GEMMs: its core is slower, and it wins by not writing the scores
            core = [r["raw_attention_s"] + r["raw_elementwise_s"] for r in rs] if _ok(*rs) else None
            if core and core[1] > 1.1 * core[0]:
                flag("flash_vs_eager", "fused attention core slower than the eager score GEMMs", *rs)


def check_per_plan() -> None:
    for r in SEEN:
        COUNTS["per_plan"] += 1
        p = r.perf
        bad = [k for k in TERMS if not math.isfinite(p[k]) or p[k] < 0]
        if bad or not p["tokens_per_s"] > 0:
            flag("per_plan", f"negative or non-finite terms {bad}", r)
            continue
        parts = p["compute_s"] + p["comm_exposed_s"] + p["bubble_s"] + p["offload_s"]
        if abs(parts - p["step_time_s"]) > 1e-6 * p["step_time_s"]:
            flag("per_plan", f"step {p['step_time_s']:.6g} != sum of parts {parts:.6g}", r)
        if r.knobs["pp"] > 1 and p["bubble_fraction"] > 0:
            # one micro batch crosses every stage forward and backward: the step is at least that
            # latency, (1 + (pp-1) x the lighter stages' share) micro batches of the slowest stage
            busy = p["bubble_s"] / p["bubble_fraction"]
            ga = r.knobs["global_batch"] / (r.knobs["micro_batch"] * p["gpus_dp"])
            latency = busy / ga * (1 + (r.knobs["pp"] - 1) * p["bubble_stage_factor"])
            COUNTS["pipeline_latency"] += 1
            if busy + p["bubble_s"] < latency * (1 - TOL):
                flag("pipeline_latency", f"busy {busy:.4g} + bubble {p['bubble_s']:.4g} s < one micro batch through "
                     f"the {r.knobs['pp']} stages ({latency:.4g} s)", r)
        if p["hfu"] < p["mfu"] * (1 - 1e-9):
            flag("per_plan", f"hfu {p['hfu']:.3f} < mfu {p['mfu']:.3f}", r)
        # MFU counts the full s x s score matrix (Megatron/PaLM convention) where a causal fused kernel
        # computes half: long sequences legitimately show "MFU" above the GEMM plateau. The check
        # takes the FLOPs executed (causal attention halved); the plateau is the catalog's, over
        # the stack's fitted GEMM time factor where that is below 1 (its GEMMs run above the curve).
        gpu = catalog().gpus[r.knobs["gpu"]]
        spec, s = r.spec, r.knobs["seq_len"]
        executed = flops.model_flops_per_token(spec, s) - 1.5 * spec.n_layers * flops.attention_core_forward_flops_per_token(spec, s)
        mfu = p["mfu"] * executed / flops.model_flops_per_token(spec, s)
        if r.knobs["precision"] == "fp8":  # against the fp8 peak
            mfu = mfu * gpu.peak_tflops("bf16") / gpu.fp8_tflops
        top = plateau(r.knobs["gpu"]) / min(1.0, catalog().stacks[r.knobs["stack"]].gemm_time_factor)
        if mfu > top * (1 + TOL):
            flag("mfu_plateau", f"executed-FLOPs mfu {mfu:.3f} above the GEMM plateau {top:.3f}", r)


CHECKS = (check_feasibility, check_grad_accum, check_vpp, check_network, check_weak_scaling, check_model_size,
          check_seq_len, check_checkpointing_sp_offload, check_same_chip, check_uneven_pp, check_cp_and_zero_memory,
          check_fp8, check_cp_refusal, check_network_invariance, check_micro_batch, check_gpu_ratio, check_cp_scaling, check_flash_vs_eager, check_broad_grid,
          *MOE_CHECKS, check_per_plan)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=5, help="violations printed per check (0: all)")
    ap.add_argument("--only", nargs="*", default=None, help="run only these checks (e.g. vpp seq_len); "
                    "the per-plan checks always run on what they evaluated")
    args = ap.parse_args(argv)
    for check in CHECKS:
        name = check.__name__.removeprefix("check_")
        if args.only is None or name in args.only or check is check_per_plan:
            check()
    for name, items in VIOLATIONS.items():
        shown = items if args.limit == 0 else items[: args.limit]
        print("\n".join(shown))
        if len(items) > len(shown):
            print(f"    ... {len(items) - len(shown)} more [{name}]")
    print(f"\n{len(SEEN)} plans evaluated")
    for name in sorted(COUNTS):
        print(f"{name:24s} {COUNTS[name]:6d} checked {len(VIOLATIONS.get(name, [])):5d} violations")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
