"""Scaling and continuity checks of the sanity sweep (validation/sanity_sweep.py): gradient
accumulation, network speed, weak scaling over 1 GPU .. 2048 nodes, model size, sequence length,
micro batch, GPU generations, context parallelism, and the broad grid of GPUs x stacks x models x
sequence lengths x GPU counts."""

from __future__ import annotations

from validation.sanity_plans import catalog, model_columns
from validation.sanity_record import (COUNTS, GPUS, STACK_LAYOUTS, _ok, continuous, flag, gpt, monotonic,
                                      node_continuous, prec, run, weak_scaling)

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
            # discontinuity of the model; the continuity check starts at 2 nodes. The (n-1)/n of the
            # DP collectives grows 1.5x from dp 2 to 4 (0 -> 1/2 from dp 1 to 2): a step whose DP
            # traffic outgrows its compute drops up to 33% there (B200 torchtitan 70B tp8 pp8: -24%);
            # the check starts at dp 4, where (n-1)/n grows at most 1.14x per doubling.
            node_continuous("node_continuity", [r for r in rs if r.knobs["gpus"] > 8 and dp_of(r, tp, pp) >= 4],
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
                        # appears, and a ring's (n-1)/n share goes 1/2 -> 3/4 from dp 2 to 4 (1T FSDP
                        # on B200: -25%, all of it in the gathers): real steps, like the NVLink -> NIC
                        # step from 1 to 2 nodes; the check starts at dp 4
                        node_continuous("grid_node_continuity", [r for r in rs if r.knobs["gpus"] > 8
                                                                 and r["gpus_dp"] > 2], "node count doubled")


def dp_of(r, tp: int, pp: int) -> int:
    return r.knobs["gpus"] // (tp * pp)


def _kernel_share(gpu) -> float:
    """The share of its 16-bit peak a GPU's measured kernels reach, the lower of its GEMM curve's top
    and its fused attention at 16k (the catalog's micro-benchmark figures: MI300X's CK FlashAttention
    reaches half H100's share, its GEMMs 0.64 of it)."""
    gemm = max((p.fraction for p in gpu.matmul_efficiency), default=0.7)
    attn = {p.seq_len: p.fraction for p in gpu.attention_efficiency}.get(16384, 0.75 * gemm)
    return min(gemm, 2.0 * attn)  # the fused kernel's share counts the causal half


def check_gpu_ratio() -> None:
    """The same one-node plan on two GPUs: the speed ratio lies between the ratios of their HBM
    bandwidths and of their dense 16-bit peaks (x 0.7 .. 1.3: efficiency curves differ), the peak
    ratio lowered by the ratio of the shares their measured kernels reach where that is below 1."""
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
                kernels = min(1.0, _kernel_share(cat[gpu]) / _kernel_share(cat[ref]))
                if not 0.7 * min(peak * kernels, hbm) <= speed <= 1.3 * max(peak, hbm):
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


def check_same_chip() -> None:
    pairs = (("a100-40gb", "a100-80gb"), ("h100-80gb", "h200-141gb"))
    for slow, fast in pairs:
        for model, tp in (("gpt-1.3b", 1), ("llama-8b", 1), ("llama-70b", 8)):
            for mb in (1, 4):
                rs = [run(**gpt(model), gpu=g, gpus=8, tp=tp, seq_len=4096, micro_batch=mb, global_batch=8 * mb // tp)
                      for g in (slow, fast)]
                monotonic("same_chip_more_hbm", rs, "tokens_per_s_per_gpu", +1, "more HBM bandwidth, same chip")
