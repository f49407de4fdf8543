"""NVLink SHARP (NVLS) all-reduce inside a node, and NCCL's choice between it and the ring.

On NVSwitch 3 nodes (HGX H100/H200) NCCL >= 2.17 can reduce in the switch: each GPU sends its buffer
once and reads the reduced result once, so the all-reduce's time is its latency plus size / algbw, and
algbw hardly depends on the group (NVIDIA/nccl#1455: 258-273 GB/s algbw for 5-8 H100s). The catalog
(catalog/links/nvls.toml) gives the busbw plateau by group size as a share of the GPU's line rate (busbw
= 2(n-1)/n x algbw, nccl-tests PERFORMANCE.md, as for the ring) and a measured sweep by message size.
NVLS is not a ring of 2(n-1) steps, so the sweep is read at the call's wire time (size / algbw): the
sweep's per-step chunk at that wire time is wire / 2(r-1) for its own r ranks (as NCCL's tree is read,
planner/busbw_curve.py). NCCL's tuner runs whichever algorithm it models faster at the call's size
(NVIDIA/nccl#457), so an all-reduce inside a node costs min(ring, NVLS). Reduce-scatter and all-gather
stay on the ring (NVLS is slower there: NVIDIA/nccl#1047, #1083), and groups across nodes keep the
ring / tree (NVLS+Tree measured no faster beyond 2 nodes: NVIDIA/nccl#1221).

    t_nvls = wire / share(wire / 2(r-1))     wire = 2(n-1)/n x S / busbw_nvls(n)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hardware.links import CollectiveLink

_TINY = 1e-30


@dataclass(frozen=True)
class Nvls:
    """One NVLS link as read here: its busbw plateau by group size (bytes/s) and its size sweep."""

    ranks: np.ndarray  # group sizes of the plateau table
    busbw_Bps: np.ndarray  # plateau busbw of each, bytes/s
    log_x: np.ndarray  # log of the sweep's per-step chunk seconds at its plateau
    log_share: np.ndarray
    key_per_wire: float  # 1 / 2(r-1): the sweep's per-step chunk for a call's wire time

    @classmethod
    def of(cls, link: CollectiveLink, line_rate_Bps: float) -> "Nvls":
        """`line_rate_Bps`: the GPU's intra-node line rate (intranode_gbps, calibration applied), bytes/s."""
        plateau = link.plateau_busbw_gbytes_per_s * 1e9
        x = np.array([p.message_bytes for p in link.busbw_efficiency]) / (link.ranks * plateau)
        return cls(ranks=np.array([p.ranks for p in link.nvls_busbw_share], dtype=np.float64),
                   busbw_Bps=np.array([p.share for p in link.nvls_busbw_share]) * line_rate_Bps,
                   log_x=np.log(x), log_share=np.log([p.fraction for p in link.busbw_efficiency]),
                   key_per_wire=1.0 / (2.0 * (link.ranks - 1)))

    def plateau_Bps(self, n) -> np.ndarray:
        """NVLS busbw plateau of groups of `n` GPUs in one node; 0 below the table's smallest group."""
        n = np.asarray(n, dtype=np.float64)
        return np.where(n >= self.ranks[0], np.interp(n, self.ranks, self.busbw_Bps), 0.0)

    def share(self, x) -> np.ndarray:
        """The sweep's busbw share at per-step chunk seconds `x`: constant time below its first point,
        its last share above its last (linear in log-log between points, as busbw_curve.py)."""
        x = np.maximum(np.asarray(x, dtype=np.float64), _TINY)
        lx = np.log(x)
        return np.exp(np.interp(lx, self.log_x, self.log_share)) * np.minimum(1.0, np.exp(lx - self.log_x[0]))


def allreduce_s(nvls: Nvls, n, per_call_bytes, in_node) -> np.ndarray:
    """Seconds of one NVLS all-reduce of `per_call_bytes` over `n` GPUs; inf where the group spans nodes
    (`in_node` false) or is smaller than the catalog's smallest NVLS group (NCCL runs the ring there)."""
    n = np.asarray(n, dtype=np.float64)
    bw = nvls.plateau_Bps(n)
    ok = np.asarray(in_node) & (bw > 0) & (n > 1)
    wire = 2.0 * (n - 1.0) / np.maximum(n, 1.0) * np.asarray(per_call_bytes, dtype=np.float64) / np.where(ok, bw, 1.0)
    t = wire / nvls.share(wire * nvls.key_per_wire)
    return np.where(ok, np.maximum(t, wire), np.inf)
