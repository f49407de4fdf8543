"""Predicted (planner.throughput) vs measured (bundled trainer) step time on this machine.

1. `plan probe` measures this CPU (one rank's share of the cores) into a catalog folder,
2. the trainer runs a handful of 2-rank configurations of a small GPT,
3. the planner predicts each with `--gpu local --cluster local`; the error is printed.
Goal: within 20%. Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/trainer_vs_planner.py
(on an otherwise idle machine: other processes on the cores distort both sides).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

CONFIGS = [
    dict(sharding="none"),
    dict(sharding="zero1"),
    dict(sharding="zero2"),
    dict(sharding="zero3"),
    dict(sharding="fsdp_full_shard"),
    dict(sharding="fsdp_full_shard", activation_checkpointing="full"),
    dict(sharding="none", precision="bf16"),
]


def probe_catalog(nproc: int, out: Path) -> Path:
    from trainer.collectives import run_bench
    from trainer.probe import probe_device, write_catalog

    report = probe_device(nproc, None, 256 * 2**20)
    bench = run_bench(["all_reduce"], [64 * 2**20], nproc, progress=False)
    report.allreduce_busbw_gbps = bench.busbw_gbps["intranode"] if bench else None
    write_catalog(report, out)
    return out


def predict_s(spec, knobs: dict, nproc: int, micro: int, seq: int, catalog_dir: Path) -> float:
    from hardware.catalog import load_catalog
    from planner.layout import Layout
    from planner.resolve import resolve_system
    from planner.scenario import ExecutionPlan, Scenario
    from planner.settings import Settings
    from planner.throughput import performance

    system = resolve_system(Scenario(gpu="local", cluster="local", gpus=nproc), load_catalog([catalog_dir]))
    plan = ExecutionPlan(dp=nproc, micro_batch=micro, seq_len=seq, precision=knobs.get("precision", "fp32"),
                         **{k: v for k, v in knobs.items() if k != "precision"})
    perf = performance(spec, Layout.from_plan(plan), system, Settings())
    return float(perf["step_time_s"].reshape(-1)[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--catalog", type=Path, default=None, help="reuse a `plan probe` catalog folder")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=128)
    args = ap.parse_args()

    from planner.model import ModelSpec
    from trainer.config import TrainConfig
    from trainer.launch import launch

    spec = ModelSpec(name="bench-small", n_layers=4, hidden=256, n_heads=8, vocab=1000, vocab_multiple=128,
                     max_positions=512)
    work = Path(tempfile.mkdtemp(prefix="plan-bench-"))
    catalog_dir = args.catalog or probe_catalog(args.nproc, work / "catalog")
    print(f"model {spec.describe()}; catalog {catalog_dir}")
    print(f"{'configuration':55s} {'measured ms':>12s} {'predicted ms':>13s} {'error':>8s}")
    errors = []
    for knobs in CONFIGS:
        cfg = TrainConfig(spec=spec, model=spec.name, nproc=args.nproc, steps=args.steps, warmup_steps=3,
                          micro_batch=args.micro_batch, seq_len=args.seq_len, json_out=str(work / "r.json"),
                          measure_memory=False, timeout_s=600, **knobs)
        r = launch(cfg)
        name = ", ".join(f"{k}={v}" for k, v in knobs.items())
        if r.status != "ok":
            print(f"{name:55s} {r.status}: {r.error}")
            continue
        pred = predict_s(spec, knobs, args.nproc, args.micro_batch, args.seq_len, catalog_dir)
        err = pred / r.step_time_s_median - 1
        errors.append(abs(err))
        print(f"{name:55s} {r.step_time_s_median * 1e3:12.1f} {pred * 1e3:13.1f} {err:+8.1%}")
    if errors:
        print(f"mean |error| {sum(errors) / len(errors):.1%}, max {max(errors):.1%} (goal: within 20%)")


if __name__ == "__main__":
    main()
