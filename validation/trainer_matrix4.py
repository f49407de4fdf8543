"""The trainer matrix (validation/trainer_matrix.py) extended to offload, bf16_pure and 4-rank layouts: dp 4 (ZeRO-3
over 4, FSDP2 HSDP = replicate 2 x shard 2), dp2 x tp2, tp2 x pp2, dp2 x pp2 and dp2 x pp2 x vpp2, next to the 2-rank
ones. The sample covers every PAIR of knob values the trainer accepts that holds one of the new values (an offload,
bf16_pure or a 4-rank layout); the 2-rank pairs without one are trainer_matrix's.

Every run is checked against a twin: the same seed and knobs with tp = pp = 1, no sharding and no offload (DDP at the
same dp, one rank when dp is 1): trainer/loop.py seeds the batches by data-parallel rank, so the math is the same.
A combination the trainer refuses before launch must be refused by the planner's rules (planner/rules.py, what the
tuner may propose) or the tuner's own filter (tuner/space.trainer_runs) too: else the tuner would waste a trial on it
(counted as UNGUARDED).

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python -m validation.trainer_matrix4 [--limit N] [--only SUBSTRING]
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
from planner.model import ModelSpec
from validation.trainer_matrix import SEQ, SHAPES, STEPS, run_combos

# name -> (ranks, plan knobs)
PARALLEL: dict[str, tuple[int, dict]] = {
    "dp2": (2, {}), "tp2": (2, dict(tp=2)), "pp2": (2, dict(pp=2)), "pp2vpp2": (2, dict(pp=2, vpp=2)),
    "dp4": (4, {}), "dp2tp2": (4, dict(tp=2)), "tp2pp2": (4, dict(tp=2, pp=2)), "dp2pp2": (4, dict(pp=2)),
    "dp2pp2vpp2": (4, dict(pp=2, vpp=2)),
}
# Shapes: the 2-rank matrix runs all of trainer_matrix's; here GPT (learned positions, LayerNorm), Llama (RoPE, RMSNorm,
# GQA), Gemma (post-norms, q/k norms, windows: its tp plans) and Mixtral (experts: dp layouts only) meet the new knobs.
FACTORS: dict[str, tuple] = {
    "shape": ("gpt", "llama", "gemma", "mixtral"), "par": tuple(PARALLEL),
    "sharding": ("none", "zero1", "zero2", "zero3", "fsdp_full_shard", "fsdp_shard_grad_op", "fsdp_hybrid"),
    "offload": ("none", "optimizer", "optimizer+params"),
    "ckpt": ("none", "full", "selective"), "precision": ("bf16", "fp32", "fp16", "bf16_pure"), "ga": (1, 2),
}
NEW = {("offload", "optimizer"), ("offload", "optimizer+params"), ("precision", "bf16_pure"),
       *(("par", p) for p, (n, _) in PARALLEL.items() if n == 4)}


def layers(combo: dict) -> int:
    """pp x vpp must divide the layers: a 4-layer copy of the shape under vpp."""
    return 4 if "vpp" in PARALLEL[combo["par"]][1] else SHAPES[combo["shape"]]["n_layers"]


def spec_for(combo: dict) -> ModelSpec:
    return ModelSpec(**dict(SHAPES[combo["shape"]], name=f"tiny-{combo['shape']}", n_layers=layers(combo)))


def train_config(combo: dict, json_out: str | None = None, **override):
    from trainer.config import TrainConfig

    nproc, par = PARALLEL[combo["par"]]
    kw = dict(nproc=nproc, steps=STEPS, warmup_steps=1, seq_len=SEQ, timeout_s=300, seed=0, sharding=combo["sharding"],
              offload=combo["offload"], activation_checkpointing=combo["ckpt"], precision=combo["precision"],
              grad_accum=combo["ga"], micro_batch=2, json_out=json_out, spec=spec_for(combo)) | par | override
    return TrainConfig(model=f"tiny-{combo['shape']}", **kw)


def refusal(combo: dict) -> str | None:
    """The trainer's own refusal (the checks launch() makes before any rank starts), as trainer_matrix.refusal."""
    from trainer.config import validate_config, validate_layout
    from trainer.dist import check_host_precision

    try:
        cfg = train_config(combo)
        validate_config(cfg)
        validate_layout(cfg, cfg.spec)
        check_host_precision(cfg)
    except (PlanError, ValueError) as e:
        return str(e).splitlines()[0]
    return None


def tuner_refusal(combo: dict) -> str | None:
    """Why the tuner would not propose this combination: the planner's rules for the bundled stack (what `plan tune`
    searches with), the tuner's own filter, or the host (the tuner proposes fp16 only on a GPU)."""
    from planner import rules
    from tuner.space import trainer_runs

    cfg = train_config(combo)
    p = cfg.plan
    knobs = {k: getattr(p, k) for k in ("sharding", "offload", "precision", "tp", "pp", "vpp", "dp", "stack",
                                        "activation_checkpointing", "grad_accum", "micro_batch",
                                        "sequence_parallel", "cp", "cp_impl", "activation_offload")}
    broken = rules.violations(knobs, spec=cfg.spec, seq_len=SEQ)
    if broken:
        return f"rule {broken[0][0].name}"
    why = trainer_runs({k: knobs[k] for k in ("sharding", "offload", "precision", "tp", "pp")},
                       moe=bool(cfg.spec.moe_experts))
    if why:
        return f"tuner: {why}"
    if p.precision == "fp16":
        return "host: the tuner proposes fp16 on a GPU only (tuner/space.default_choices)"
    return None


def all_pairs(combos: list[dict], seed: int = 0) -> list[dict]:
    """Greedy covering array (AETG, Cohen et al. 1997) over the pairs that hold a NEW value, and every shape x layout
    (the 2-rank shape x layout x sharding triples are trainer_matrix's; here a shape meets each 4-rank layout)."""
    def pairs(c):
        return {(a, b) for a, b in itertools.combinations(sorted(c.items()), 2) if a in NEW or b in NEW}

    rng = random.Random(seed)
    pool = list(combos)
    rng.shuffle(pool)
    cover = [pairs(c) for c in pool]
    left = set().union(*cover) if cover else set()
    chosen, twins = [], {None}
    while left:  # the most new pairs per launch: a combination whose twin (reference_key) is not run yet costs two
        best = max(range(len(pool)), key=lambda i: len(cover[i] & left) / (1 + (reference_key(pool[i]) not in twins)))
        chosen.append(pool[best])
        twins.add(reference_key(pool[best]))
        left -= cover[best]
    return chosen


def label(combo: dict) -> str:
    return "/".join(str(combo[k]) for k in FACTORS)


def reference_key(combo: dict) -> tuple | None:
    """The twin whose losses this run must equal: DDP (one rank at dp 1) at the same dp, precision and grad_accum,
    no tp / pp / sharding / offload (None: the run is that twin)."""
    nproc, par = PARALLEL[combo["par"]]
    dp = nproc // (par.get("tp", 1) * par.get("pp", 1))
    if not par and combo["sharding"] == "none" and combo["offload"] == "none":
        return None
    return (dp, combo["shape"], layers(combo), combo["precision"], combo["ga"])


def run_reference(key: tuple, tmp: Path):
    from trainer.launch import launch

    dp, shape, n_layers, precision, ga = key
    combo = dict(shape=shape, par="dp4" if dp == 4 else "dp2", sharding="none", offload="none", ckpt="none",
                 precision=precision, ga=ga)
    spec = ModelSpec(**dict(SHAPES[shape], name=f"tiny-{shape}", n_layers=n_layers))
    return launch(train_config(combo, str(tmp / f"ref-{'-'.join(map(str, key))}.json"), nproc=dp, spec=spec))


# |loss - twin's loss| over STEPS steps: trainer_matrix's. fp32: float rounding (reduction order stays below 2e-5; a
# tp replica stepping on an unsynced gradient showed 1.3e-4 by step 3, a bug). bf16 / fp16: 16-bit rounding of the
# activations (DeepSpeed's bf16 weights vs DDP's autocast: 1.4e-3). bf16_pure is twinned with bf16_pure DDP (bf16
# weights on both sides), so the same 16-bit bound holds (measured: at most 5.9e-4, tp2 x FSDP2).
TOLERANCE = {"fp32": 2e-5, "bf16": 5e-3, "fp16": 5e-3, "bf16_pure": 5e-3}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=0, help="run only the first N chosen combinations")
    ap.add_argument("--only", default="", help="run only combinations whose label contains this")
    ap.add_argument("--no-losses", action="store_true", help="skip the twin comparisons")
    ap.add_argument("--dry-run", action="store_true", help="print the sample, launch nothing")
    args = ap.parse_args(argv)
    from trainer.launch import launch

    t0 = time.perf_counter()
    product = [dict(zip(FACTORS, v)) for v in itertools.product(*FACTORS.values())]
    accepted, unguarded = [], {}
    for c in product:
        why = refusal(c)
        if why is None:
            accepted.append(c)
        elif tuner_refusal(c) is None:
            unguarded.setdefault(why, c)
    print(f"{len(product)} combinations, {len(accepted)} accepted by the trainer's checks, "
          f"{len(product) - len(accepted)} refused ({time.perf_counter() - t0:.0f} s)", flush=True)
    for why, c in unguarded.items():
        print(f"UNGUARDED refusal (the tuner may propose it): {label(c)}: {why}", flush=True)
    chosen = [c for c in all_pairs(accepted) if args.only in label(c)]
    chosen = chosen[: args.limit] if args.limit else chosen
    print(f"all-pairs sample: {len(chosen)} runs ({' x '.join(FACTORS)})", flush=True)
    if args.dry_run:
        print("\n".join(label(c) for c in chosen))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="trainer-matrix4-"))
    counts, refs = run_combos(chosen, launch, train_config, reference_key, run_reference, label, tmp, 62,
                              TOLERANCE, args.no_losses)
    print(f"summary: {len(chosen)} runs: {counts['ok']} ok, {counts['refused']} refused, {counts['CRASH']} crashed, "
          f"{counts['WRONG']} wrong losses; {len(product) - len(accepted)} of {len(product)} combinations refused "
          f"before launch, {len(unguarded)} unguarded refusal kinds; {len(refs)} reference runs; "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    return 1 if counts["CRASH"] or counts["WRONG"] or unguarded else 0


if __name__ == "__main__":
    sys.exit(main())
