"""Planner speed: configurations evaluated per second, and the wall time of the CLI end to end.

Targets (issue: planner core): `plan estimate --model 70b --gpus 1024` < 1 s wall including
interpreter start-up; >= 100k configurations/s through the search. Configurations are those evaluated:
since r38 the combinations no stack runs are not enumerated (planner/search_prune.py), so fewer are
evaluated for the same answer; compare search seconds across versions, not configurations/s.

    python benchmarks/planner_speed.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def search_rate(model: str, gpus: int, repeat: int, gpu: str | None = None) -> tuple[int, float]:
    from planner import api
    from planner.scenario import Scenario

    scenario = Scenario(model=model, gpus=gpus, gpu=gpu)
    api.estimate(scenario, top=10)  # warm the catalog and preset caches
    times, n = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        report = api.estimate(scenario, top=10)
        times.append(time.perf_counter() - t0)
        n = report.evaluated
    return n, statistics.median(times)


def cli_wall(args: list[str], repeat: int) -> float:
    cmd = [sys.executable, "-m", "plan_cli.main", "estimate", *args]
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    print(f"{'scenario':<28} {'configs':>9} {'search s':>9} {'configs/s':>11}")
    for model, gpus, gpu in (("7b", 48, None), ("70b", 1024, None), ("llama2-70b", 512, None), ("gpt2-52b", 64, None),
                             ("mixtral-8x7b", 64, "h100-80gb"), ("deepseek-v3", 256, "h100-80gb")):
        n, t = search_rate(model, gpus, a.repeat, gpu)
        print(f"{model + ' on ' + str(gpus):<28} {n:>9,} {t:>9.3f} {n / t:>11,.0f}")
    wall = cli_wall(["--model", "70b", "--gpus", "1024"], a.repeat)
    print(f"\nplan estimate --model 70b --gpus 1024: {wall:.3f} s wall (median of {a.repeat}, "
          f"interpreter start-up included); target < 1 s")
    wall = cli_wall(["--model", "7b", "--gpus", "48"], a.repeat)
    print(f"plan estimate --model 7b --gpus 48:    {wall:.3f} s wall")
    wall = cli_wall(["--model", "mixtral-8x7b", "--gpus", "64", "--gpu", "h100-80gb"], a.repeat)
    print(f"plan estimate --model mixtral-8x7b --gpus 64 --gpu h100-80gb: {wall:.3f} s wall")


if __name__ == "__main__":
    main()
