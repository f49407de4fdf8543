"""The plateau a measured all-reduce busbw stands for, read on the planner's own busbw curve.

`plan allreduce-bench` (and `plan tune`'s first step) measures busbw at a few message sizes; the comm
model (planner/comm.py) takes System.measured_*_busbw_gbps as the plateau of a curve that still
discounts every call by its size (planner/busbw_curve.py). A busbw measured at 64 MiB is itself on the
slope of that curve (nccl-tests, 8 x H200 NVLink: 369.8 GB/s at 64 MiB of a 480.7 GB/s plateau,
catalog/links/nvlink.toml), so taking it as the plateau counted the slope twice. Here the plateau is the
one at which the planner's own time for the measured call (its size, ranks, ranks per node) equals the
measured time: busbw_measured = bus factor x size / t_planner(size; plateau). t_planner never grows with
the plateau (share(x) grows at most as x, the catalog's rule), so a bisection in log(plateau) finds it.
Where the measured size already sits on the curve's top (gloo on CPU at 25 Gbps: 4-64 MiB on 2 ranks
read past the sweep's last point), the plateau is the measurement itself.

A bench measures several sizes; each gives its own plateau, and the one plateau kept is their median
weighted by how much each size's time depends on the plateau (-d log t / d log plateau on the curve: 1 at
its top, falling towards 0 where the curve makes a call latency-bound, and 0 below the sweep's first
point, whose time the curve holds flat at any plateau). To first order that is the plateau with the least
sum of absolute log-time errors over the sizes: least squares would let one small size slowed by the
bench's per-call launch cost (a Python loop of dist.all_reduce) pull the plateau by its error x its weight;
the median moves at most to the next size's plateau. A size faster than the curve allows at any plateau
says nothing and is left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.busbw_curve import Curves, Reader

_ITERATIONS = 60  # bisection steps in log(plateau): far below 1e-6 relative


@dataclass(frozen=True)
class Reading:
    """One measured all-reduce: its busbw and where on the curve it was taken."""

    busbw_gbps: float
    size_bytes: float  # nccl-tests size of the call
    ranks: int
    per_node: int  # ranks of the measured group on each node (= ranks inside one node)
    # (size_bytes, busbw_gbps) of every size the bench measured on this group, this one included; () where the
    # file gives this size alone
    points: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class Fit:
    """The plateau kept from every measured size of a reading, and how the sizes agree on it."""

    plateau_gbps: float
    used: tuple[tuple[float, float], ...]  # (size_bytes, that size's own plateau in Gbps) of the sizes used
    spread_pct: float  # largest gap between a used size's own plateau and the kept one, % of the kept one


def call_s(curves: Curves, r: Reading, plateau_Bps: float) -> float:
    """The planner's seconds for the measured all-reduce with `plateau_Bps` as its plateau (planner/comm.py
    Group.allreduce_s without NVLS: a measured busbw is NCCL's own choice, NVLS included)."""
    n = np.array([float(r.ranks)])
    reader = Reader.of(curves, n, np.array([float(r.per_node)]), plateau_Bps)
    wire = 2.0 * (n - 1.0) / n * r.size_bytes / plateau_Bps  # nccl-tests all-reduce bus factor
    return float(reader.call_s(curves, wire, np.array([r.size_bytes]), tree=True)[0])


def plateau_gbps(curves: Curves, r: Reading) -> float | None:
    """The plateau (Gbps) at which the planner's time for the reading's call is the measured one; None where
    no plateau up to `limit` reaches it (a call faster than the curve's latency floor allows)."""
    measured_Bps = r.busbw_gbps * 1e9 / 8
    target = 2.0 * (r.ranks - 1) / r.ranks * r.size_bytes / measured_Bps
    lo, hi = np.log(measured_Bps), np.log(measured_Bps / _smallest_share(curves))
    if call_s(curves, r, float(np.exp(lo))) <= target * (1 + 1e-12):
        return r.busbw_gbps  # at the top of the curve already
    if call_s(curves, r, float(np.exp(hi))) > target:
        return None
    for _ in range(_ITERATIONS):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if call_s(curves, r, float(np.exp(mid))) <= target else (mid, hi)
    return float(np.exp(hi)) * 8 / 1e9


def fitted_plateau(curves: Curves, r: Reading) -> Fit | None:
    """The plateau (Gbps) every measured size of `r` gives together (module doc: their own plateaus' median
    weighted by each size's sensitivity to the plateau); None where no size gives one."""
    points = r.points or ((r.size_bytes, r.busbw_gbps),)
    own = []  # (plateau, weight, size)
    for size, busbw in sorted(points):
        one = Reading(busbw_gbps=busbw, size_bytes=size, ranks=r.ranks, per_node=r.per_node)
        p = plateau_gbps(curves, one)
        if p is not None:
            own.append((p, sensitivity(curves, one, p), size))
    if not own:
        return None
    kept = _weighted_median([p for p, _, _ in own], [w for _, w, _ in own])
    return Fit(plateau_gbps=kept, used=tuple((s, p) for p, _, s in own),
               spread_pct=100.0 * max(abs(p / kept - 1.0) for p, _, _ in own))


def sensitivity(curves: Curves, r: Reading, plateau: float) -> float:
    """-d log t / d log plateau of the reading's call at `plateau` Gbps (central difference in log plateau)."""
    B, h = plateau * 1e9 / 8, 1e-4
    return float(np.log(call_s(curves, r, B * np.exp(-h)) / call_s(curves, r, B * np.exp(h))) / (2 * h))


def _weighted_median(values: list[float], weights: list[float]) -> float:
    """The value below and above which at most half the weight lies (the geometric mean of the two middle
    values where the weight splits evenly between them; equal weights where every weight is 0)."""
    order = np.argsort(values)
    v = np.asarray(values, dtype=np.float64)[order]
    w = np.maximum(np.asarray(weights, dtype=np.float64)[order], 0.0)
    if w.sum() <= 0:
        w = np.ones_like(w)
    cum, half = np.cumsum(w), 0.5 * w.sum()
    k = int(np.searchsorted(cum, half * (1 - 1e-12)))
    if k + 1 < v.size and abs(cum[k] - half) <= 1e-12 * half:
        return float(np.sqrt(v[k] * v[k + 1]))
    return float(v[k])


def _smallest_share(curves: Curves) -> float:
    """The smallest share either sweep holds: a plateau above measured / that would put the call below both
    sweeps' first points, where the curve says nothing of the plateau."""
    return float(min(curves.intra.share.min(), curves.inter.share.min()))


def share_at(curves: Curves, r: Reading, plateau: float) -> float:
    """busbw share the planner gives the reading's call at `plateau` Gbps (for the note)."""
    B = plateau * 1e9 / 8
    return 2.0 * (r.ranks - 1) / r.ranks * r.size_bytes / B / call_s(curves, r, B)
