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


def _smallest_share(curves: Curves) -> float:
    """The smallest share either sweep holds: a plateau above measured / that would put the call below both
    sweeps' first points, where the curve says nothing of the plateau."""
    return float(min(curves.intra.share.min(), curves.inter.share.min()))


def share_at(curves: Curves, r: Reading, plateau: float) -> float:
    """busbw share the planner gives the reading's call at `plateau` Gbps (for the note)."""
    B = plateau * 1e9 / 8
    return 2.0 * (r.ranks - 1) / r.ranks * r.size_bytes / B / call_s(curves, r, B)
