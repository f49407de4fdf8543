"""Every knob combination the tuner may propose actually runs: the bundled trainer over model shapes x
parallelism x sharding x checkpointing x precision x grad_accum, sampled so that every PAIR of knob values
the trainer accepts is run at least once (greedy all-pairs covering, not the full product).

A combination the trainer's own checks refuse (validate_config / validate_layout, the planner's rules) is
counted as refused without launching; one that launches must finish `ok` (anything else is a bug: a crash
after launch is a `plan tune` trial lost). Runs with dp 1 (tp2, pp2) are checked against a one-rank run of the
same seed and knobs, and sharded dp2 runs (zero*, fsdp_*) against DDP (sharding none) at dp2: same data on
each data-parallel rank, same math (trainer/loop.py seeds the batches by data-parallel rank).

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python -m validation.trainer_matrix [--limit N] [--only SUBSTRING]
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import tempfile
import time
from pathlib import Path

from planner.errors import PlanError
from planner.model import LLAMA_BLOCK, ModelSpec

SEQ = 32
STEPS = 3
_BASE = dict(n_layers=2, hidden=64, n_heads=4, vocab=256, max_positions=64)
# Tiny stand-ins for the families the tuner meets (the blocks trainer/model.py builds for each).
SHAPES: dict[str, dict] = {
    "gpt": dict(_BASE),  # learned positions, LayerNorm, gelu, tied embeddings, biases
    "llama": _BASE | LLAMA_BLOCK | dict(n_kv_heads=2, ffn_hidden=128),  # RoPE, RMSNorm, SwiGLU, GQA
    # Gemma 2/3: 4 norms per block, tied embeddings, a head dim apart from hidden / heads, q/k norms, a
    # sliding window on every other layer
    "gemma": _BASE | LLAMA_BLOCK | dict(n_kv_heads=2, ffn_hidden=128, tied_embeddings=True, norms_per_layer=4,
                                        attn_head_dim=32, qk_norm="per_head", attn_window=8, attn_local_layers=1),
    "qwen": _BASE | LLAMA_BLOCK | dict(n_kv_heads=2, ffn_hidden=128, qkv_bias=True),  # q/k/v biases only
    # Mixtral-like: 4 routed experts, top 2, with a window (Mistral's sliding_window)
    # GPT-NeoX: attention and MLP in parallel on two norms (trainer/backends/tp_parallel_block.py under tp)
    "neox": _BASE | dict(position="rope", parallel_block=True, tied_embeddings=False),
    "mixtral": _BASE | LLAMA_BLOCK | dict(n_kv_heads=2, ffn_hidden=128, moe_experts=4, moe_top_k=2,
                                          moe_ffn_hidden=32, attn_window=8),
}
# 2 ranks. vpp 2 x pp 2 needs 4 layers (pp x vpp divides them): that option runs a 4-layer copy of the shape.
PARALLEL: dict[str, dict] = {
    "dp2": dict(), "tp2": dict(tp=2), "pp2": dict(pp=2), "pp2vpp2": dict(pp=2, vpp=2),
}
FACTORS: dict[str, tuple] = {
    "shape": tuple(SHAPES), "par": tuple(PARALLEL),
    "sharding": ("none", "zero1", "zero2", "zero3", "fsdp_full_shard", "fsdp_shard_grad_op", "fsdp_hybrid"),
    "ckpt": ("none", "full", "selective"), "precision": ("bf16", "fp32", "fp16"), "ga": (1, 2),
}


def spec_for(combo: dict) -> ModelSpec:
    shape = dict(SHAPES[combo["shape"]], name=f"tiny-{combo['shape']}")
    if combo["par"] == "pp2vpp2":
        shape["n_layers"] = 4
    return ModelSpec(**shape)


def train_config(combo: dict, json_out: str | None = None, **override):
    from trainer.config import TrainConfig

    kw = dict(nproc=2, steps=STEPS, warmup_steps=1, seq_len=SEQ, timeout_s=240, seed=0,
              sharding=combo["sharding"], activation_checkpointing=combo["ckpt"], precision=combo["precision"],
              grad_accum=combo["ga"], micro_batch=2, json_out=json_out) | PARALLEL[combo["par"]] | override
    return TrainConfig(model=f"tiny-{combo['shape']}", spec=spec_for(combo), **kw)


def refusal(combo: dict) -> str | None:
    """The trainer's own refusal of this combination (the checks launch() makes before any rank starts)."""
    from trainer.config import validate_config, validate_layout
    from trainer.dist import check_host_precision

    try:
        cfg = train_config(combo)
        validate_config(cfg)
        validate_layout(cfg, cfg.spec)
        check_host_precision(cfg)  # this host's devices (DeepSpeed fp16 on a CPU without oneDNN fp16)
    except (PlanError, ValueError) as e:
        return str(e).splitlines()[0]
    return None


def all_pairs(combos: list[dict], seed: int = 0) -> list[dict]:
    """A greedy covering array: combinations until every pair of (knob, value)s that some accepted combination
    holds (and every shape x sharding under tp / pp) is in one chosen run (Cohen et al. 1997, AETG: pick the
    candidate covering the most uncovered pairs)."""
    def pairs(c):
        items = sorted(c.items())
        # and every shape x sharding triple under tp / pp, where the model's layers meet the DTensor plans: the
        # tp-with-RoPE crash (eb1db4d) and the tp post-norm drift were such triples
        triple = {(c["shape"], c["par"], c["sharding"])} if c["par"] in ("tp2", "pp2") else set()
        return {(a, b) for a, b in itertools.combinations(items, 2)} | triple

    rng = random.Random(seed)
    pool = list(combos)
    rng.shuffle(pool)
    cover = [pairs(c) for c in pool]
    left = set().union(*cover) if cover else set()
    chosen = []
    while left:
        best = max(range(len(pool)), key=lambda i: len(cover[i] & left))
        chosen.append(pool[best])
        left -= cover[best]
    return chosen


def label(combo: dict) -> str:
    return " ".join(f"{combo[k]}" for k in FACTORS).replace(" ", "/")


def reference_key(combo: dict) -> tuple | None:
    """The run whose losses this one must equal: one rank (dp 1 runs), DDP at dp 2 (sharded runs), else None."""
    if combo["par"] != "dp2":
        return ("one", combo["shape"], combo["par"] == "pp2vpp2", combo["precision"], combo["ga"])
    if combo["sharding"] != "none":
        return ("ddp", combo["shape"], False, combo["precision"], combo["ga"])
    return None


def run_reference(key: tuple, tmp: Path):
    from trainer.launch import launch

    kind, shape, four, precision, ga = key
    combo = dict(shape=shape, par="pp2vpp2" if four else "dp2", sharding="none", ckpt="none",
                 precision=precision, ga=ga)
    over = dict(tp=1, pp=1, vpp=1) | (dict(nproc=1) if kind == "one" else {})
    return launch(train_config(combo, str(tmp / f"ref-{'-'.join(map(str, key))}.json"), **over))


# losses of a run and of its reference over STEPS steps: float rounding in fp32 (a tp replica drifting on an unsynced
# gradient showed 1.3e-4 by step 3), 16-bit rounding otherwise (DeepSpeed's bf16 weights vs DDP's autocast: 1.4e-3)
TOLERANCE = {"fp32": 2e-5, "bf16": 5e-3, "fp16": 5e-3}


def run_combos(chosen, launch, train_config, reference_key, run_reference, label, tmp, width, tolerance,
               no_losses) -> tuple[dict[str, int], dict]:
    """Launch each chosen combination, print one line a run, and check its losses against its twin's (run once per
    twin key by `run_reference`, within `tolerance[precision]`): the counts of ok / refused / CRASH / WRONG and the
    twins' losses (shared by validation/trainer_matrix4.py)."""
    refs: dict[tuple, list[float] | str] = {}
    counts = {"ok": 0, "refused": 0, "CRASH": 0, "WRONG": 0}
    for i, combo in enumerate(chosen):
        t = time.perf_counter()
        r = launch(train_config(combo, str(tmp / f"run{i}.json")))
        line = f"{i + 1:3d} {label(combo):{width}s} "
        if r.status == "bad_config" and not r.exit_codes:  # launch() refused it before any rank started
            counts["refused"] += 1
            print(line + f"refused: {r.error}", flush=True)
            continue
        if r.status != "ok":
            counts["CRASH"] += 1
            print(line + f"CRASH {r.status}: {(r.error or '').splitlines()[0][:240] if r.error else ''}", flush=True)
            continue
        verdict, key = "ok", reference_key(combo)
        if key and not no_losses:
            if key not in refs:
                ref = run_reference(key, tmp)
                refs[key] = ref.losses if ref.status == "ok" else f"reference {ref.status}: {ref.error}"
            ref, twin = refs[key], key[0] if isinstance(key[0], str) else "twin"
            if isinstance(ref, str):
                verdict = f"no reference ({ref[:120]})"
            else:
                diff = max(abs(a - b) for a, b in zip(r.losses, ref))
                if diff > tolerance[combo["precision"]]:
                    verdict = f"WRONG losses {[round(x, 4) for x in r.losses]} vs {twin} {[round(x, 4) for x in ref]}"
                    counts["WRONG"] += 1
                else:
                    verdict = f"ok (losses = {twin} within {diff:.1e})"
        counts["ok"] += verdict.startswith("ok")
        print(line + f"{verdict} [{time.perf_counter() - t:.0f} s]", flush=True)
    return counts, refs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=0, help="run only the first N chosen combinations")
    ap.add_argument("--only", default="", help="run only combinations whose label contains this")
    ap.add_argument("--no-losses", action="store_true", help="skip the loss comparisons")
    args = ap.parse_args(argv)
    from trainer.launch import launch

    product = [dict(zip(FACTORS, v)) for v in itertools.product(*FACTORS.values())]
    accepted = [c for c in product if refusal(c) is None]
    print(f"{len(product)} combinations, {len(accepted)} accepted by the trainer's checks, "
          f"{len(product) - len(accepted)} refused", flush=True)
    chosen = [c for c in all_pairs(accepted) if args.only in label(c)]
    chosen = chosen[: args.limit] if args.limit else chosen
    print(f"all-pairs sample: {len(chosen)} runs ({' x '.join(FACTORS)})", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="trainer-matrix-"))
    t0 = time.perf_counter()
    counts, refs = run_combos(chosen, launch, train_config, reference_key, run_reference, label, tmp, 52,
                              TOLERANCE, args.no_losses)
    print(f"summary: {len(chosen)} runs: {counts['ok']} ok, {counts['refused']} refused, {counts['CRASH']} crashed, "
          f"{counts['WRONG']} wrong "
          f"losses; {len(product) - len(accepted)} of {len(product)} combinations refused before launch; "
          f"{len(refs)} reference runs; {time.perf_counter() - t0:.0f} s", flush=True)
    return 1 if counts["CRASH"] or counts["WRONG"] else 0


if __name__ == "__main__":
    sys.exit(main())
