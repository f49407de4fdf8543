"""Sanity sweep of the analytic model: invariants of physics over a grid of pinned plans.

    python -m validation.sanity_sweep [--verbose]

Prints numbers, not a test: every violation with its plan(s) and step-time breakdown, then a
count per check. The plans (validation/sanity_plans.py) cover GPUs (V100 .. B200, MI250X,
MI300X) x stacks x models (GPT 125M .. 1T with GELU, LLaMA 8B .. 405B with SwiGLU/GQA) x
sequence lengths (512 .. 128k) x layouts (tp, pp with vpp and uneven stages, cp, sequence
parallelism) x GPU counts (1 .. 16k). Checks:

- per plan: every time term finite and >= 0, tokens/s > 0, hfu >= mfu, MFU (bf16/fp16) at most
  the GPU's GEMM plateau, fp8 MFU against the fp8 peak at most the plateau;
- monotonic: more gradient accumulation never slower per GPU; vpp never a larger bubble; a
  faster network never slower; weak scaling (dp only) never faster per GPU; a larger model never
  more tokens/s; a longer sequence never a smaller attention share nor more tokens/s at the same
  tokens per micro batch; recompute never faster; sequence parallelism never slower; offload never
  faster; a GPU with the same chip and more HBM bandwidth (A100 80 vs 40, H200 vs H100) never slower;
- continuity: per-GPU tokens/s across adjacent node counts, MFU across doubled sequence lengths
  (jumps > 30%);
- pipeline: uneven stages (126 layers on 16, 49 on 32) never more work per second than even ones;
  vpp that does not divide the stage's layers refused with a reason naming it;
- memory: sequence parallelism and recompute never more activations; cp 2 / 4 about 1/2 / 1/4 of
  the activations; ZeRO-3 / FSDP model states about 1/dp;
- feasibility: fp8 refused on GPUs without fp8, bf16 refused on V100, both accepted where present.
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict

from planner import flops
from validation.sanity_plans import BASE, GPT, LLAMA, Result, catalog, evaluate, model_columns, plateau

TOL = 1e-3  # relative slack of the monotonic checks (float noise)
JUMP = 0.30  # continuity: the largest relative step between adjacent grid points
TERMS = ("step_time_s", "compute_s", "comm_exposed_s", "bubble_s", "offload_s", "tp_comm_s", "cp_comm_s",
         "pp_comm_s", "dp_comm_s", "optimizer_s")
SEEN: list[Result] = []  # every plan evaluated, for the per-plan checks
VIOLATIONS: dict[str, list[str]] = defaultdict(list)
COUNTS: dict[str, int] = defaultdict(int)  # comparisons made per check


def run(**knobs) -> Result:
    r = evaluate(**knobs)
    if not r.refused:
        SEEN.append(r)
    return r


def flag(check: str, why: str, *results: Result) -> None:
    lines = [f"[{check}] {why}"] + [f"    {r.describe()}\n      {r.breakdown()}" for r in results]
    VIOLATIONS[check].append("\n".join(lines))


def _ok(*rs: Result) -> bool:
    return all(not r.refused for r in rs)


def monotonic(check: str, rs: list[Result], key: str, direction: int, label: str) -> None:
    """`direction` +1: key never falls along rs; -1: never rises."""
    rs = [r for r in rs if not r.refused]
    for a, b in zip(rs, rs[1:]):
        COUNTS[check] += 1
        va, vb = a[key], b[key]
        if direction * (vb - va) < -TOL * max(abs(va), abs(vb), 1e-30):
            flag(check, f"{key} {'falls' if direction > 0 else 'rises'} {va:.4g} -> {vb:.4g} with {label}", a, b)


def continuous(check: str, rs: list[Result], key: str, label: str, jump: float = JUMP) -> None:
    rs = [r for r in rs if not r.refused]
    for a, b in zip(rs, rs[1:]):
        COUNTS[check] += 1
        va, vb = a[key], b[key]
        if min(va, vb) <= 0 or max(va, vb) / min(va, vb) - 1 > jump:
            flag(check, f"{key} jumps {va:.4g} -> {vb:.4g} ({vb / va - 1:+.0%}) with {label}", a, b)


def weak_scaling(check: str, rs: list[Result]) -> None:
    """More data-parallel GPUs at the same work per GPU are never faster per GPU, except for the
    optimizer step, which ZeRO/FSDP shard over dp (it shrinks as 1/dp): the step without it never
    shrinks."""
    for r in rs:
        if not r.refused:
            r.perf["step_less_optimizer_s"] = r["step_time_s"] - r["optimizer_s"]
    monotonic(check, rs, "step_less_optimizer_s", +1, "more GPUs (dp only), same work per GPU")


# ------------------------------------------------------------------------------- plan families
def gpt(name):
    return model_columns(name)


STACK_LAYOUTS = {  # stack -> sharding and the (tp, pp) it can run
    "megatron": ("zero1", True), "megatron_deepspeed": ("zero1", True), "generic": ("zero1", True),
    "torchtitan": ("fsdp_full_shard", True), "fsdp": ("fsdp_full_shard", False), "hf": ("zero3", False),
}
GPUS = ("v100-32gb", "a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb", "mi250x", "mi300x", "b200")


def prec(gpu: str) -> str:
    return "bf16" if catalog().gpus[gpu].bf16_tflops else "fp16"


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


def check_grad_accum() -> None:
    for gpu in ("a100-80gb", "h100-80gb", "mi250x", "b200"):
        for model, tp, pps in (("gpt-13b", 2, (1, 4)), ("llama-70b", 8, (1, 4, 8)), ("gpt-175b", 8, (8, 16))):
            for stack in ("megatron", "megatron_deepspeed", "torchtitan"):
                for pp in pps:
                    gpus = tp * pp * 8
                    rs = [run(**gpt(model), gpu=gpu, gpus=gpus, tp=tp, pp=pp, seq_len=2048, stack=stack,
                              sharding=STACK_LAYOUTS[stack][0], precision=prec(gpu), global_batch=8 * ga)
                          for ga in (1, 2, 4, 8, 16, 32, 64)]
                    monotonic("grad_accum", rs, "tokens_per_s_per_gpu", +1, "more grad accumulation")


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


def check_network() -> None:
    for gpu in ("a100-80gb", "h100-80gb", "mi300x"):
        for model, tp, pp, sharding, stack in (("gpt-6.7b", 1, 1, "zero1", "megatron"),
                                               ("llama-70b", 8, 4, "zero1", "megatron"),
                                               ("gpt-13b", 1, 1, "fsdp_full_shard", "fsdp"),
                                               ("gpt-13b", 1, 1, "zero3", "hf")):
            rs = [run(**gpt(model), gpu=gpu, gpus=256, tp=tp, pp=pp, seq_len=2048, global_batch=512,
                      sharding=sharding, stack=stack, internode_gbps=bw)
                  for bw in (25, 100, 200, 400, 800, 1600, 3200)]
            monotonic("network", rs, "tokens_per_s_per_gpu", +1, "faster network")


NODES = (0.125, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)


def check_weak_scaling() -> None:
    cases = (("gpt-1.3b", 1, 1, "zero1", "megatron", 2048), ("gpt-6.7b", 1, 1, "fsdp_full_shard", "fsdp", 2048),
             ("llama-8b", 1, 1, "zero3", "hf", 4096), ("llama-70b", 8, 8, "zero1", "megatron", 8192),
             ("llama-70b", 8, 8, "fsdp_full_shard", "torchtitan", 8192),
             ("gpt-175b", 8, 16, "zero1", "megatron_deepspeed", 2048))
    for gpu in ("a100-80gb", "h100-80gb", "mi250x", "b200"):
        for model, tp, pp, sharding, stack, seq in cases:
            rs = []
            for nodes in NODES:
                gpus = int(nodes * 8)
                if gpus % (tp * pp):
                    continue
                dp = gpus // (tp * pp)
                rs.append(run(**gpt(model), gpu=gpu, gpus=gpus, tp=tp, pp=pp, seq_len=seq, sharding=sharding,
                              stack=stack, precision=prec(gpu), global_batch=dp * 16))
            weak_scaling("weak_scaling", rs)
            # From 1 to 2 nodes the DP/ZeRO-3/FSDP collectives leave NVLink (450-900 GB/s per GPU)
            # for the NICs (25-50 GB/s per GPU): a real step (ZeRO-3 on 8 B200 -> 16: -47%), not a
            # discontinuity of the model; the continuity check starts at 2 nodes.
            continuous("node_continuity", [r for r in rs if r.knobs["gpus"] > 8], "tokens_per_s_per_gpu",
                       "node count doubled")


def check_model_size() -> None:
    for gpu in ("a100-80gb", "h100-80gb", "mi300x"):
        for tp, pp in ((1, 1), (8, 1), (8, 8)):
            for family in (("gpt-125m", "gpt-1.3b", "gpt-6.7b", "gpt-13b", "gpt-39b", "gpt-175b", "gpt-530b",
                            "gpt-1t"), ("llama-8b", "llama-70b", "llama-405b")):
                rs = [run(**gpt(m), gpu=gpu, gpus=512, tp=tp, pp=pp, seq_len=4096, global_batch=1024,
                          sharding="zero1") for m in family if model_columns(m)["n_layers"] >= pp]
                monotonic("model_size", rs, "tokens_per_s", -1, "a larger model")


SEQS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)


def check_seq_len() -> None:
    for gpu in ("a100-80gb", "h100-80gb", "mi300x", "b200", "v100-32gb"):
        for model, tp, cp in (("gpt-1.3b", 1, 1), ("llama-8b", 1, 1), ("llama-70b", 8, 1), ("llama-70b", 8, 4)):
            for stack in ("megatron", "torchtitan"):
                rs = [run(**gpt(model), gpu=gpu, gpus=64, tp=tp, cp=cp, seq_len=s, micro_batch=max(131072 // s, 1),
                          global_batch=max(131072 // s, 1) * 64 // (tp * cp), stack=stack, precision=prec(gpu),
                          sharding=STACK_LAYOUTS[stack][0]) for s in SEQS]
                for r in rs:
                    if not r.refused:
                        r.perf["attention_share"] = r["raw_attention_s"] / (r["raw_attention_s"] + r["raw_gemm_s"])
                monotonic("seq_attention_share", rs, "attention_share", +1, "a longer sequence")
                monotonic("seq_tokens", rs, "tokens_per_s_per_gpu", -1, "a longer sequence (same tokens/micro batch)")
                continuous("seq_continuity", rs, "mfu", "sequence doubled")


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


def check_same_chip() -> None:
    pairs = (("a100-40gb", "a100-80gb"), ("h100-80gb", "h200-141gb"))
    for slow, fast in pairs:
        for model, tp in (("gpt-1.3b", 1), ("llama-8b", 1), ("llama-70b", 8)):
            for mb in (1, 4):
                rs = [run(**gpt(model), gpu=g, gpus=8, tp=tp, seq_len=4096, micro_batch=mb, global_batch=8 * mb // tp)
                      for g in (slow, fast)]
                monotonic("same_chip_more_hbm", rs, "tokens_per_s_per_gpu", +1, "more HBM bandwidth, same chip")


def check_uneven_pp() -> None:
    """Adding a block never makes a step faster (L = q*pp - 2 .. q*pp + 2 at a fixed pp). With a
    negligible output layer (vocab 128), uneven stages keep the lighter stages idle part of the
    time: the work per second (layers x tokens/s) never beats the even split with the same
    heaviest stage (pp * ceil(L / pp) blocks). With a real vocabulary the even split is NOT the
    reference: its last stage carries a full share of blocks plus the output layer, so 126 blocks
    on 16 stages (the last gets 7 + logits) are better balanced than 128 (8 + logits) - that is
    why Megatron takes blocks off the first/last stage - and the Alpa bubble (sum of the lighter
    stages) is smaller, legitimately."""
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
                    if vocab == 128 and _ok(u, e):
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


def check_micro_batch() -> None:
    """Without a pipeline, a bigger micro batch at the same global batch is never slower beyond the
    GEMM tile/wave quantization of the new shapes (3%)."""
    for gpu in ("a100-80gb", "h100-80gb", "mi300x", "v100-32gb"):
        for model, tp, stack, sharding in (("gpt-1.3b", 1, "megatron", "zero1"), ("llama-8b", 1, "fsdp",
                                                                                  "fsdp_full_shard"),
                                           ("llama-70b", 8, "megatron", "zero1"), ("gpt-13b", 1, "hf", "zero3")):
            rs = [run(**gpt(model), gpu=gpu, gpus=16, tp=tp, seq_len=2048, micro_batch=mb, global_batch=256,
                      stack=stack, sharding=sharding, precision=prec(gpu)) for mb in (1, 2, 4, 8, 16)]
            rs = [r for r in rs if not r.refused]
            for a, b in zip(rs, rs[1:]):
                COUNTS["micro_batch"] += 1
                if b["tokens_per_s_per_gpu"] < a["tokens_per_s_per_gpu"] * 0.97:
                    flag("micro_batch", "a bigger micro batch is slower", a, b)


def check_broad_grid() -> None:
    """GPUs x stacks x models x sequence lengths x GPU counts (8 .. 16k) on each stack's layout:
    per-plan checks on all, weak scaling and continuity along the GPU count (from 2 nodes)."""
    models = {"small": ("gpt-125m", "gpt-1.3b"), "mid": ("llama-8b", "gpt-13b"),
              "big": ("llama-70b", "gpt-175b", "llama-405b", "gpt-1t")}
    for gpu in GPUS:
        for stack, (sharding, model_parallel) in STACK_LAYOUTS.items():
            for size, names in models.items():
                for model in names:
                    cols = gpt(model)
                    tp, pp = (8, min(16, cols["n_layers"] // 8)) if size == "big" and model_parallel else (1, 1)
                    if size == "big" and not model_parallel:
                        continue  # no model parallelism: the big ones cannot be laid out
                    for seq in (2048, 8192, 32768, 131072):
                        cp = max(1, seq // 16384) if stack in ("megatron", "torchtitan", "generic") else 1
                        rs = []
                        for nodes in NODES:
                            gpus = int(nodes * 8)
                            if gpus % (tp * pp * cp):
                                continue
                            dp = gpus // (tp * pp * cp)
                            rs.append(run(**cols, gpu=gpu, gpus=gpus, tp=tp, pp=pp, cp=cp, seq_len=seq,
                                          sequence_parallel=tp > 1 and stack in ("megatron", "torchtitan"),
                                          stack=stack, sharding=sharding, precision=prec(gpu), global_batch=dp * 8))
                        weak_scaling("grid_weak_scaling", rs)
                        # from dp 1 to 2 the gradient exchange (FSDP: the parameter gathers too)
                        # appears: a real step, like the NVLink -> NIC step from 1 to 2 nodes
                        continuous("grid_node_continuity", [r for r in rs if r.knobs["gpus"] > 8
                                                            and r["gpus_dp"] > 1], "tokens_per_s_per_gpu",
                                   "node count doubled")


def check_gpu_ratio() -> None:
    """The same one-node plan on two GPUs: the speed ratio lies between the ratios of their HBM
    bandwidths and of their dense 16-bit peaks (x 0.7 .. 1.3: efficiency curves differ)."""
    cat = catalog().gpus
    for gpu in GPUS:
        for ref in ("a100-80gb", "h100-80gb"):
            if gpu == ref:
                continue
            for model, tp, seq in (("gpt-125m", 1, 2048), ("gpt-1.3b", 1, 2048), ("llama-8b", 1, 8192),
                                   ("llama-70b", 8, 4096), ("gpt-13b", 2, 32768)):
                rs = [run(**gpt(model), gpu=g, gpus=8, tp=tp, seq_len=seq, global_batch=16 // tp, micro_batch=2,
                          precision=prec(gpu), activation_checkpointing="full") for g in (ref, gpu)]
                if not _ok(*rs):
                    continue
                COUNTS["gpu_ratio"] += 1
                speed = rs[1]["tokens_per_s_per_gpu"] / rs[0]["tokens_per_s_per_gpu"]
                peak = cat[gpu].peak_tflops(prec(gpu)) / cat[ref].peak_tflops("bf16")
                hbm = cat[gpu].hbm_gbytes_per_s / cat[ref].hbm_gbytes_per_s
                if not 0.7 * min(peak, hbm) <= speed <= 1.3 * max(peak, hbm):
                    flag("gpu_ratio", f"{gpu} / {ref} speed {speed:.2f} outside peak ratio {peak:.2f}, HBM ratio "
                         f"{hbm:.2f}", *rs)


def check_cp_scaling() -> None:
    """Long sequences: trading dp for cp on the same GPUs changes per-GPU speed smoothly."""
    for gpu in ("h100-80gb", "a100-80gb", "mi300x", "b200"):
        for model, tp in (("llama-8b", 1), ("llama-70b", 8), ("gpt-13b", 2)):
            for stack, sharding in (("megatron", "zero1"), ("torchtitan", "fsdp_full_shard")):
                rs = [run(**gpt(model), gpu=gpu, gpus=tp * 64, tp=tp, cp=cp, seq_len=131072, global_batch=64,
                          stack=stack, sharding=sharding, sequence_parallel=tp > 1, precision=prec(gpu))
                      for cp in (1, 2, 4, 8, 16, 32, 64)]
                # the compute only: ring attention moves (cp-1)/cp of the K/V per layer whatever cp, and
                # FSDP gathers the model every micro batch, while the compute per micro batch halves
                # with cp: the exposed part max(raw - overlap x compute, 0) has a legitimate kink
                for r in rs:
                    if not r.refused:
                        r.perf["compute_tokens_per_s"] = 64 * 131072 / r["compute_s"]
                continuous("cp_continuity", rs, "compute_tokens_per_s", "cp doubled, dp halved")


def check_flash_vs_eager() -> None:
    """A fused (flash) attention kernel computes the causal half of the scores and never writes
    them: its attention time is never above the eager (materialised) one, on any GPU."""
    for gpu in GPUS:
        for model, seq in (("gpt-1.3b", 2048), ("llama-8b", 8192), ("gpt-13b", 32768)):
            rs = [run(**gpt(model), gpu=gpu, gpus=8, seq_len=seq, global_batch=8, precision=prec(gpu), attention=a)
                  for a in ("eager", "flash")]
            monotonic("flash_vs_eager", rs, "tokens_per_s_per_gpu", +1, "flash instead of eager attention")
            # the core alone: FlashAttention-2 on Hopper reaches ~35% of the peak on the causal half
            # (Dao 2023; the catalog's H100 curve) against cuBLAS's ~70% on the whole score GEMMs, so
            # its core time is about the eager one (it wins by not materialising the scores): 10%
            if _ok(*rs) and rs[1]["raw_attention_s"] > 1.1 * rs[0]["raw_attention_s"]:
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
          check_per_plan)


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
