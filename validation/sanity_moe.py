"""Sanity checks of the 2025 mixture-of-experts presets (validation/sanity_sweep.py): Llama 4 Scout and
Maverick (chunked local attention of 8192 on 36 of 48 layers, planner/hf_llama4.py) and gpt-oss 20b / 120b
(a 128-token sliding window on every other layer, planner/hf_moe.py), on H100, H200 and MI300X.

- seq_len: a longer sequence at the same tokens per micro batch never more tokens/s per GPU and never a
  smaller attention share (the full-attention layers still grow; the windowed ones stay flat);
- window / chunk: a larger window or chunk (up to full causal attention, window 0) never faster, and a
  chunk at least the sequence runs exactly as full attention (every query's keys are its causal prefix);
- GPUs: more data-parallel GPUs at the same work per GPU never fewer tokens/s in all, and never faster
  per GPU but for the sharded optimizer step (validation/sanity_record.weak_scaling);
- expert parallelism: a larger ep never more model-state bytes per GPU (the routed experts' weights,
  gradients and optimizer states are split over ep; planner/moe_memory.py).
"""

from __future__ import annotations

from validation.sanity_record import COUNTS, _ok, flag, monotonic, run, weak_scaling

# preset -> (tp, pp, ep) that runs it on 8-GPU nodes
MOE_MODELS = {"llama4-scout": (2, 1, 8), "llama4-maverick": (8, 4, 8), "gpt-oss-20b": (1, 1, 8),
              "gpt-oss-120b": (1, 1, 8)}
MOE_GPUS = ("h100-80gb", "h200-141gb", "mi300x")
MOE_SEQS = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)


def _plan(model: str, gpu: str, **knobs) -> dict:
    tp, pp, ep = MOE_MODELS[model]
    return {"model": model, "gpu": gpu, "tp": tp, "pp": pp, "ep": ep, "etp": 1, "sequence_parallel": tp > 1, **knobs}


def check_moe_seq_len() -> None:
    for gpu in MOE_GPUS:
        for model in MOE_MODELS:
            tp, pp, ep = MOE_MODELS[model]
            gpus = max(tp * pp * ep, 8)
            dp = gpus // (tp * pp)
            rs = [run(**_plan(model, gpu, gpus=gpus, seq_len=s, micro_batch=max(65536 // s, 1),
                              global_batch=max(65536 // s, 1) * dp * 4)) for s in MOE_SEQS]
            for r in rs:
                if not r.refused:
                    r.perf["attention_share"] = r["raw_attention_s"] / (r["raw_attention_s"] + r["raw_gemm_s"])
            monotonic("moe_seq_attention_share", rs, "attention_share", +1, "a longer sequence")
            monotonic("moe_seq_tokens", rs, "tokens_per_s_per_gpu", -1, "a longer sequence (same tokens/micro batch)")


def check_moe_window() -> None:
    """A larger window / chunk (0: full attention last) never faster; a chunk >= seq_len is full attention."""
    for gpu in MOE_GPUS:
        for model in MOE_MODELS:
            tp, pp, ep = MOE_MODELS[model]
            gpus = max(tp * pp * ep, 8)
            seq = 32768
            base = dict(gpus=gpus, seq_len=seq, micro_batch=1, global_batch=gpus // (tp * pp) * 4)
            rs = [run(**_plan(model, gpu, attn_window=w, **base)) for w in (128, 1024, 4096, 8192, 16384, 32768, 0)]
            monotonic("moe_window", rs, "tokens_per_s_per_gpu", -1, "a larger window / chunk")
            same, full = rs[-2], rs[-1]
            if _ok(same, full):
                COUNTS["moe_window_full"] += 1
                if abs(same["step_time_s"] / full["step_time_s"] - 1) > 1e-6:
                    flag("moe_window_full", f"a window of seq_len {seq} differs from full attention", same, full)


def check_moe_gpus() -> None:
    for gpu in MOE_GPUS:
        for model in MOE_MODELS:
            tp, pp, ep = MOE_MODELS[model]
            rs = []
            for nodes in (1, 2, 4, 8, 16, 32, 64):
                gpus = nodes * 8
                if gpus % (tp * pp * ep) or gpus > 512:
                    continue
                dp = gpus // (tp * pp)
                rs.append(run(**_plan(model, gpu, gpus=gpus, seq_len=8192, micro_batch=1, global_batch=dp * 8)))
            monotonic("moe_gpus_tokens", rs, "tokens_per_s", +1, "more GPUs (dp), same work per GPU")
            weak_scaling("moe_weak_scaling", rs)


def check_moe_ep() -> None:
    for gpu in MOE_GPUS:
        for model in MOE_MODELS:
            tp, pp, _ = MOE_MODELS[model]
            gpus = 64 * tp * pp // (2 if pp > 1 else 1)
            rs = [run(**_plan(model, gpu, ep=ep, gpus=gpus, seq_len=4096, micro_batch=1,
                              global_batch=gpus // (tp * pp) * 4)) for ep in (1, 2, 4, 8, 16, 32)]
            for r in rs:
                if not r.refused:
                    r.mem["model_states"] = r["weights_bytes"] + r["grads_bytes"] + r["optimizer_bytes"]
            monotonic("moe_ep_memory", rs, "model_states", -1, "a larger expert-parallel degree")


MOE_CHECKS = (check_moe_seq_len, check_moe_window, check_moe_gpus, check_moe_ep)
