"""Pipeline bubble: measured by the bundled trainer vs the planner's (p-1)/(m*v).

Each rank times its stage compute (forward and backward chunks) inside the schedule's step; the
measured bubble ratio is (schedule time - compute) / compute, median over the timed steps and
averaged over the ranks, which is what planner/throughput.py adds as (p-1)/(m*v) x busy time.
On CPU ranks the gloo send/recv and any unevenness of the stages (the last one also runs the
output layer and the loss) count as bubble too.

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/pipeline_bubble.py [--model tiny4] [--nproc 2]
(on an otherwise idle machine: other processes on the cores distort the timings).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

CASES = [  # (schedule, micro batches, virtual stages per rank)
    ("gpipe", 1, 1), ("gpipe", 4, 1), ("1f1b", 2, 1), ("1f1b", 4, 1), ("1f1b", 8, 1),
    ("interleaved_1f1b", 4, 2), ("interleaved_1f1b", 8, 2),
]


def main() -> None:
    from trainer.config import TrainConfig
    from trainer.launch import launch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny4")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    args = ap.parse_args()
    pp = args.nproc
    print(f"{'schedule':18s} {'m':>3s} {'v':>3s} {'planner':>8s} {'measured':>9s}  per rank")
    with tempfile.TemporaryDirectory() as tmp:
        for schedule, m, v in CASES:
            cfg = TrainConfig(model=args.model, nproc=args.nproc, pp=pp, vpp=v, pp_schedule=schedule,
                              grad_accum=m, micro_batch=2, seq_len=args.seq_len, steps=args.steps,
                              warmup_steps=2, measure_memory=True, json_out=str(Path(tmp) / "r.json"))
            r = launch(cfg)
            if r.status != "ok":
                print(f"{schedule:18s} {m:3d} {v:3d}  {r.status}: {r.error}")
                continue
            planner = (pp - 1) / (m * v)
            ranks = " ".join(f"{x.bubble_ratio:.2f}" for x in r.parallel.ranks)
            print(f"{schedule:18s} {m:3d} {v:3d} {planner:8.3f} {r.parallel.bubble_ratio:9.3f}  {ranks}")


if __name__ == "__main__":
    main()
