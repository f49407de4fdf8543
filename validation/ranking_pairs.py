"""Pairs a group orders wrongly, against how far the group's own measurements move with nothing changed.

A group (validation/ranking.py) may hold the same configuration measured more than once: on other
days or in other tables of one origin (BLOOM's prequel tables of 02-21, 02-23 and 02-25; seed 002's
52B Megatron run on four days, 125-225 s for one configuration). The largest gap between two
measurements of one configuration is the group's *replicate spread*: two different configurations
whose measurements differ by less than that cannot be ordered from the data, by any model. A pair
is *resolvable* when its measured gap exceeds the spread; the concordance over resolvable pairs
says how well the planner orders what the data can order. Without repeats in a group the spread
is 0 and every pair counts.

Same configuration: same model, system and execution plan (every stated configuration column),
whatever the table, day or notes (planner/runs.py parses them into these three objects).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from planner.runs import Run


def _configuration(r: Run) -> tuple:
    return (r.spec.model_dump_json(), r.system.model_dump_json(), r.plan.model_dump_json())


def replicate_spread(runs: list[Run], measured: np.ndarray) -> float:
    """Largest max/min - 1 over the configurations measured more than once in `runs` (0 if none)."""
    by: dict[tuple, list[float]] = defaultdict(list)
    for r, m in zip(runs, measured):
        by[_configuration(r)].append(float(m))
    gaps = [max(v) / min(v) - 1.0 for v in by.values() if len(v) > 1]
    return max(gaps, default=0.0)


@dataclass(frozen=True)
class Pair:
    faster: str  # measured faster
    slower: str
    measured_gap: float  # measured faster / slower - 1 (> 0)
    predicted_gap: float  # predicted faster / slower - 1 (<= 0 when the pair is ordered wrongly)
    resolvable: bool  # measured gap above the group's replicate spread


def pairs(runs: list[Run], measured: np.ndarray, predicted: np.ndarray, spread: float) -> list[Pair]:
    """Every pair of different configurations, the measured-faster run first."""
    out = []
    for i in range(len(runs)):
        for j in range(len(runs)):
            if measured[i] <= measured[j] or _configuration(runs[i]) == _configuration(runs[j]):
                continue
            out.append(Pair(runs[i].id, runs[j].id, float(measured[i] / measured[j] - 1.0),
                            float(predicted[i] / predicted[j] - 1.0), bool(measured[i] / measured[j] - 1.0 > spread)))
    return out


def concordance(ps: list[Pair]) -> tuple[int, int]:
    """(resolvable pairs, of them ordered right by the prediction)."""
    res = [p for p in ps if p.resolvable]
    return len(res), sum(p.predicted_gap > 0 for p in res)


def describe(runs: list[Run], measured: np.ndarray, predicted: np.ndarray, worst: int = 5) -> list[str]:
    """Lines: the spread, the resolvable concordance, and the worst resolvable pairs ordered wrongly."""
    spread = replicate_spread(runs, measured)
    ps = pairs(runs, measured, predicted, spread)
    n, right = concordance(ps)
    lines = [f"    replicate spread {100 * spread:.1f}%: {len(ps)} pairs of different configurations, {n} resolvable "
             f"(measured gap above it), {right} of them ordered right"
             + (f" ({100 * right / n:.0f}%)" if n else "")]
    wrong = sorted((p for p in ps if p.resolvable and p.predicted_gap <= 0), key=lambda p: -p.measured_gap)
    for p in wrong[:worst]:
        lines.append(f"      wrong: {p.faster} measured {100 * p.measured_gap:+.1f}% faster than {p.slower}, "
                     f"predicted {100 * p.predicted_gap:+.1f}%")
    return lines
