"""Seconds of one NCCL collective call by message size, group size and node count.

A measured all-reduce sweep (catalog/links/*.toml) gives busbw as a share of its plateau by message
size. NCCL's ring moves a call of S bytes over n ranks in 2(n-1) (all-reduce) or n-1 (all-gather,
reduce-scatter) pipelined steps of S/n bytes each, and its time is those steps' latency plus the
wire time (NCCL src/graph/tuning.cc: latency = base + steps x per-step latency; time = latency +
size / bandwidth). So the share a ring reaches depends on the per-step chunk's wire time
x = S / (n x B) against the per-step latency, and the sweep, read at x, serves any group size and
any link speed B: share(x) = sweep share at the size whose chunk takes x on the sweep's own group.
A group whose ring crosses more network steps per step than the sweep's (fewer GPUs per node) is
read at x x (the sweep's mean step latency / the group's), the steps weighted by NCCL's per-step
latencies of its NVLink and network hops.

Across nodes NCCL also has a tree for all-reduce, whose latency grows as 2((GPUs per node - 1) x
intra + log2(nodes) x inter) (tuning.cc), and it runs whichever is faster at the size
(NVIDIA/nccl#457, #790). The sweep is what NCCL reached on its own group with either, so the tree
is anchored to it: the sweep read at the same wire time (a tree does not split the message over the
ranks), plus the tree latency the group has beyond the sweep's. All-gather and reduce-scatter run
the ring only.

    t_ring = wire / share(x_eff)                       wire = bus factor x S / B (nccl-tests busbw)
    t_tree = wire / share(wire / 2(r-1)) + tree latency(nodes, per node) - tree latency(sweep's)
    t      = max(min(t_ring, t_tree), wire)           (the tree: all-reduce across nodes only)

Below the sweep's smallest size a call is latency-bound (its time stays that of the smallest
size); above its largest the share stays at the last point's. Everything is vectorised over
candidates. Between two measured points the share follows a power of the size (linear in log-log):
where the share grows as the size (latency-bound) the time stays flat, and a call's time never falls
as its message grows (the catalog refuses a sweep whose share more than doubles when the size
doubles). The sweeps are read off uniform grids in log x (resampled: exact where the points are
evenly spaced, as powers-of-two sweeps are), one array lookup per candidate instead of a search.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hardware.links import CollectiveLink

_TINY = 1e-30
_CELLS_PER_GAP = 8  # grid cells per smallest gap between two measured points


@dataclass(frozen=True)
class Sweep:
    """One link's sweep as read here: log of the per-step chunk seconds at its plateau, and shares."""

    log_x: np.ndarray
    share: np.ndarray
    step_s: float  # NCCL's ring per-step latency on this link

    @classmethod
    def of(cls, link: CollectiveLink) -> "Sweep":
        plateau = link.plateau_busbw_gbytes_per_s * 1e9
        x = np.array([p.message_bytes for p in link.busbw_efficiency]) / (link.ranks * plateau)
        return cls(log_x=np.log(x), share=np.array([p.fraction for p in link.busbw_efficiency]),
                   step_s=link.ring_step_latency_us * 1e-6)


@dataclass(frozen=True)
class Grid:
    """Both sweeps on one uniform grid of step h in log x: log share and its forward differences."""

    y: np.ndarray
    dy: np.ndarray
    inv_h: float
    lo: tuple[float, float]  # log x of each sweep's first point / h (intra, inter)
    cells: tuple[int, int]
    base: tuple[int, int]  # index of each sweep's first node in y
    x0: tuple[float, float]  # each sweep's smallest per-step chunk, seconds

    @classmethod
    def of(cls, intra: Sweep, inter: Sweep) -> "Grid":
        gaps = np.concatenate([np.diff(intra.log_x), np.diff(inter.log_x)])
        h = float(gaps.min()) / _CELLS_PER_GAP
        ys, lo, cells = [], [], []
        for sw in (intra, inter):
            n = int(np.ceil((sw.log_x[-1] - sw.log_x[0]) / h - 1e-9))
            y = np.interp(sw.log_x[0] + h * np.arange(n + 1), sw.log_x, np.log(sw.share))
            ys.append(y)
            lo.append(sw.log_x[0] / h)
            cells.append(n)
        y = np.concatenate(ys)
        dy = np.concatenate([np.append(np.diff(v), 0.0) for v in ys])
        return cls(y=y, dy=dy, inv_h=1.0 / h, lo=(lo[0], lo[1]), cells=(cells[0], cells[1]),
                   base=(0, cells[0] + 1), x0=(float(np.exp(intra.log_x[0])), float(np.exp(inter.log_x[0]))))

    def share(self, x, lo, cells, last, base, x0) -> np.ndarray:
        """The sweep's busbw share at per-step chunk seconds `x` (per-candidate sweep terms: its first
        node / h, cells, last cell, first index, first point's x), constant time below its first point,
        its last share above its last; never 0."""
        x = np.maximum(x, _TINY)
        u = np.minimum(np.maximum(np.log(x) * self.inv_h - lo, 0.0), cells)
        i = np.minimum(u.astype(np.intp), last)
        k = base + i
        return np.exp(self.y[k] + (u - i) * self.dy[k]) * np.minimum(1.0, x / x0)

    def terms(self, which: int) -> tuple:
        """(lo, cells, last, base, x0) of sweep `which` (0: intra-node, 1: inter-node)."""
        return self.lo[which], self.cells[which], self.cells[which] - 1, self.base[which], self.x0[which]


@dataclass(frozen=True)
class Curves:
    """The intra-node and inter-node sweeps of a system, and NCCL's tree."""

    grid: Grid
    intra: Sweep
    inter: Sweep
    inter_ref_step_s: float  # mean ring-step latency of the inter-node sweep's own group
    tree_key_per_wire: float  # 1 / 2(r-1): the sweep's per-step chunk for an all-reduce's wire time
    tree_ref_s: float  # NCCL's tree latency on the sweep's own group
    tree_intra_s: float
    tree_inter_s: float

    @classmethod
    def of(cls, intra_link: CollectiveLink, inter_link: CollectiveLink) -> "Curves":
        intra, inter = Sweep.of(intra_link), Sweep.of(inter_link)
        per_node = inter_link.ranks / inter_link.nodes
        t_intra, t_inter = inter_link.tree_intranode_step_us * 1e-6, inter_link.tree_internode_step_us * 1e-6
        return cls(grid=Grid.of(intra, inter), intra=intra, inter=inter,
                   inter_ref_step_s=float(mean_step_s(intra.step_s, inter.step_s, per_node)),
                   tree_key_per_wire=1.0 / (2.0 * (inter_link.ranks - 1)),
                   tree_ref_s=float(tree_latency_s(t_intra, t_inter, inter_link.nodes, per_node)),
                   tree_intra_s=t_intra, tree_inter_s=t_inter)


def mean_step_s(intra_s: float, inter_s: float, per_node) -> np.ndarray:
    """Mean latency of a ring step when one step in `per_node` crosses the network (a ring over
    nodes of `per_node` GPUs each: NCCL's nInterSteps / nsteps ~ nodes / ranks)."""
    return intra_s + (inter_s - intra_s) / np.asarray(per_node, dtype=np.float64)


def tree_latency_s(intra_s: float, inter_s: float, nodes, per_node) -> np.ndarray:
    """NCCL's tree all-reduce latency beyond its base: 2((per_node - 1) x intra + log2(nodes) x inter)
    (tuning.cc; log2i there, continuous here so that time stays continuous in the node count)."""
    return 2.0 * ((np.asarray(per_node, dtype=np.float64) - 1.0) * intra_s + np.log2(nodes) * inter_s)


@dataclass(frozen=True)
class Reader:
    """Per-candidate terms of one kind of group (e.g. every candidate's DP group)."""

    chunk_per_byte: np.ndarray  # x_eff per byte of the call: weight / (n x B)
    sweep: tuple  # Grid.terms of the sweep each candidate reads (intra- or inter-node)
    tree_s: np.ndarray | float  # NCCL tree latency beyond the sweep's (inf where the group stays in a node)
    spans_any: bool

    @classmethod
    def of(cls, curves: Curves, group, m, busbw_Bps) -> "Reader":
        n = np.asarray(group, dtype=np.float64)
        m = np.asarray(m, dtype=np.float64)
        spans = n > m
        g = curves.grid
        if not np.any(spans):
            return cls(chunk_per_byte=1.0 / (np.maximum(n, 1.0) * busbw_Bps), sweep=g.terms(0), tree_s=np.inf,
                       spans_any=False)
        weight = np.where(spans, curves.inter_ref_step_s / mean_step_s(curves.intra.step_s, curves.inter.step_s, m),
                          1.0)
        nodes = np.maximum(n / np.maximum(m, 1.0), 1.0)
        tree = tree_latency_s(curves.tree_intra_s, curves.tree_inter_s, nodes, m) - curves.tree_ref_s
        sweep = tuple(np.where(spans, b, a) for a, b in zip(g.terms(0), g.terms(1)))
        return cls(chunk_per_byte=weight / (np.maximum(n, 1.0) * busbw_Bps), sweep=sweep,
                   tree_s=np.where(spans, tree, np.inf), spans_any=True)

    def call_s(self, curves: Curves, wire_s, nbytes, tree: bool) -> np.ndarray:
        """Seconds of one call moving `nbytes` (its nccl-tests size) whose wire time at the plateau
        is `wire_s`: the ring, or NCCL's tree where `tree` and faster; never below the wire time."""
        g = curves.grid
        t = wire_s / g.share(np.asarray(nbytes, dtype=np.float64) * self.chunk_per_byte, *self.sweep)
        if tree and self.spans_any:
            x_tree = wire_s * curves.tree_key_per_wire
            t = np.minimum(t, wire_s / g.share(x_tree, *g.terms(1)) + self.tree_s)
        return np.maximum(t, wire_s)
