"""Ground truth for benchmarks/tuner_efficiency.py: every configuration of a 36-point space
run with the real trainer, several times (each run kept: the noise is part of the truth)."""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tuner.runner import TrialOutcome, fresh_workdir, rank_env, run_command, trainer_command  # noqa: E402
from tuner.space import build_space, complete, config_key  # noqa: E402

MODEL, NPROC, SEQ_LEN, STEPS, WARMUP = "tiny", 2, 64, 4, 1
CHOICES = {
    "sharding": ("none", "zero1", "zero2", "zero3", "fsdp_full_shard", "fsdp_shard_grad_op"),
    "offload": ("none",),
    "activation_checkpointing": ("none", "full"),
    "precision": ("fp32",),
    "micro_batch": (4, 32, 256),
    "grad_accum": (1,),
}


def space_configs() -> list[dict]:
    space = build_space("any", on_gpu=False, overrides=CHOICES)
    return [complete(p, global_batch=None, dp=NPROC) for p in space.configs()]


def run_one(knobs: dict, timeout_s: float = 600.0) -> TrialOutcome:
    wd = fresh_workdir(Path(tempfile.gettempdir()) / "plan-tune-truth", 0)
    out = wd / "result.json"
    cmd = trainer_command(knobs, model=MODEL, nproc=NPROC, steps=STEPS, json_out=out,
                          extra_args=["--seq-len", str(SEQ_LEN), "--warmup-steps", str(WARMUP)])
    return run_command(cmd, json_out=out, timeout_s=timeout_s, memory_cap_bytes=None,
                       env=rank_env(NPROC), log_path=wd / "trainer.log")


def ground_truth(path: Path, passes: int = 0) -> dict[str, dict]:
    """key -> {"knobs", "runs": [...]}; runs the trainer until each has `passes` runs."""
    truth = json.loads(path.read_text()) if path.exists() else {}
    configs = space_configs()
    for p in range(passes):
        todo = [k for k in configs if len(truth.get(config_key(k), {}).get("runs", [])) <= p]
        for i, knobs in enumerate(todo):
            t0 = time.monotonic()
            o = run_one(knobs)
            key = config_key(knobs)
            runs = truth.get(key, {}).get("runs", []) + [{"knobs": knobs, **o.model_dump(exclude={"log_tail"})}]
            truth[key] = {"knobs": knobs, **{k: v for k, v in runs[-1].items() if k != "knobs"}, "runs": runs}
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(truth, indent=1))
            print(f"[truth pass {p + 1}, {i + 1}/{len(todo)}] {key}: {o.status} "
                  f"{o.tokens_per_s or 0:,.0f} tok/s ({time.monotonic() - t0:.0f} s)", flush=True)
    return {config_key(k): truth[config_key(k)] for k in configs}


def _ok_runs(rec: dict) -> list[float]:
    return [r["tokens_per_s"] for r in rec["runs"] if r["status"] == "ok" and r.get("tokens_per_s")]


def medians(truth: dict) -> dict[str, float]:
    """A configuration's true speed: the median of its runs (not the luckiest one)."""
    return {k: statistics.median(_ok_runs(rec)) if _ok_runs(rec) else 0.0 for k, rec in truth.items()}


def noise_summary(truth: dict) -> dict:
    ratios = [max(r) / min(r) for r in map(_ok_runs, truth.values()) if len(r) > 1]
    halves = [(max(r) - min(r)) / (2 * statistics.median(r)) for r in map(_ok_runs, truth.values()) if len(r) > 1]
    counts = [len(rec["runs"]) for rec in truth.values()]
    return {"runs_min": min(counts), "runs_max": max(counts), "max_over_min_median": statistics.median(ratios),
            "max_over_min_max": max(ratios), "half_range_median": statistics.median(halves)}
