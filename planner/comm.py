"""Communication cost model: collectives on rings/trees, split intra-node vs inter-node.

Cost of one collective (Thakur et al. 2005; NCCL's busbw convention, nccl-tests PERFORMANCE.md):
    all-reduce:               2 (n-1)/n * bytes / busbw + latency
    reduce-scatter/all-gather:  (n-1)/n * bytes / busbw + latency
`busbw` is the intra-node link when the group fits in a node; when it spans nodes, each node's
NICs are shared by the gpus_per_node / m groups running at once (m = members of one group on a
node), so the group gets internode_bw * m / gpus_per_node, never more than the intra-node link.

Rank order is Megatron's: tp innermost, then dp, then pp.
All functions take numpy arrays (one entry per candidate) and return seconds or bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.settings import Settings
from planner.system import System

# NCCL reaches about this share of the link's line rate as bus bandwidth (nccl-tests on
# DGX A100/H100: ~230 of 300 GB/s NVLink; ~90% of IB line rate across nodes).
INTRANODE_LINK_EFFICIENCY = 0.80
INTERNODE_LINK_EFFICIENCY = 0.85
# Pinned cudaMemcpy over a PCIe x16 host link reaches about 80% of its line rate (TLP/DLLP framing,
# DMA read latency): Gen3 12.2 (H2D) / 12.9 (D2H) of 15.75 GB/s (CUDA bandwidthTest, P100-PCIe,
# mpicbg-scicomp/gearshifft PR #82), Gen4 25.1 of 31.5 (nvbandwidth host_to_device, A100-SXM4,
# NVIDIA/nvbandwidth issue #42), Gen5 52.8 of 63 (nvbandwidth device_to_host, H100, issue #24);
# Rajbhandari et al. SC21 (ZeRO-Infinity) sec. 5.2.1 count ~12 GB/s for one DGX-2 PCIe link.
HOST_LINK_EFFICIENCY = 0.80
# Per-step latency of a collective (NCCL ~5 us inside a node, ~20 us across IB), paid
# 2*log2(n) times (tree / double binary tree, Sanders et al. 2009).
INTRANODE_LATENCY_S = 5e-6
INTERNODE_LATENCY_S = 20e-6


@dataclass(frozen=True)
class Links:
    """Achievable bandwidths in bytes/s (calibration applied, measurements preferred)."""

    intra_Bps: float  # bus bandwidth of a collective inside a node
    inter_node_Bps: float  # bus bandwidth of one node's NICs in a collective across nodes
    gpus_per_node: int
    host_Bps: float  # host<->GPU, per GPU, one direction (achievable: x HOST_LINK_EFFICIENCY)

    @classmethod
    def of(cls, system: System, settings: Settings) -> "Links":
        k = settings.calibration.network
        if system.measured_intranode_busbw_gbps:
            intra = system.measured_intranode_busbw_gbps
        else:
            intra = system.intranode_gbps * (system.gpu.intranode_collective_efficiency or INTRANODE_LINK_EFFICIENCY)
        if system.measured_internode_busbw_gbps:
            inter = system.measured_internode_busbw_gbps
        else:
            inter = system.internode_gbps * internode_efficiency(system)
        return cls(
            intra_Bps=intra * k * 1e9 / 8,
            inter_node_Bps=inter * k * 1e9 / 8,
            gpus_per_node=system.gpus_per_node,
            host_Bps=system.host_to_gpu_gbps * HOST_LINK_EFFICIENCY * 1e9 / 8,
        )


def internode_efficiency(system: System) -> float:
    """Share of the inter-node line rate that collectives reach: the cluster's own figure, else
    the InfiniBand one."""
    return system.internode_efficiency or INTERNODE_LINK_EFFICIENCY


def members_per_node(group, stride, gpus_per_node: int) -> np.ndarray:
    """How many GPUs of one group (consecutive members `stride` ranks apart) share a node."""
    per_node = np.maximum(1, gpus_per_node // np.maximum(stride, 1))
    return np.minimum(group, per_node)


def group_busbw_Bps(links: Links, group, m) -> np.ndarray:
    """Bus bandwidth of a group of `group` GPUs with `m` of them on each node."""
    spans = group > m
    inter = np.minimum(links.intra_Bps, links.inter_node_Bps * m / links.gpus_per_node)
    return links.intra_Bps + spans * (inter - links.intra_Bps)


def latency_s(group, m) -> np.ndarray:
    steps = 2.0 * np.ceil(np.log2(np.maximum(group, 1)))
    return steps * (INTRANODE_LATENCY_S + (group > m) * (INTERNODE_LATENCY_S - INTRANODE_LATENCY_S))


@dataclass(frozen=True)
class Group:
    """Precomputed terms of one kind of group (e.g. every candidate's DP group), so the many
    collectives of a step cost a few array operations each."""

    f: np.ndarray  # (n-1)/n, 0 for a group of one
    inv_bw: np.ndarray  # 1 / busbw, s per byte
    lat: np.ndarray  # latency of one call (0 for a group of one)
    spans: np.ndarray  # the group crosses nodes
    node_scale: np.ndarray  # gpus_per_node / m: groups sharing a node's NICs

    @classmethod
    def of(cls, links: Links, group, m) -> "Group":
        n = np.asarray(group, dtype=np.float64)
        return cls(f=(n - 1) / n, inv_bw=1.0 / group_busbw_Bps(links, group, m),
                   lat=latency_s(group, m), spans=np.asarray(group > m),
                   node_scale=links.gpus_per_node / np.asarray(m, dtype=np.float64))

    def allreduce_s(self, nbytes, calls=1):
        """`calls` all-reduces moving `nbytes` in total (0 for a group of one)."""
        return 2.0 * self.f * nbytes * self.inv_bw + calls * self.lat

    def allgather_s(self, nbytes, calls=1):
        """All-gather or reduce-scatter of `nbytes` (the unsharded size)."""
        return self.f * nbytes * self.inv_bw + calls * self.lat

    def node_bytes(self, nbytes, factor: float):
        """Bytes one node sends across the network for a collective (0 inside a node);
        factor: 2 for all-reduce, 1 for all-gather / reduce-scatter."""
        return self.spans * (factor * self.f * self.node_scale) * nbytes


def p2p_s(links: Links, nbytes, inter_node) -> np.ndarray:
    """Point-to-point send of `nbytes` (pipeline activations): a GPU's share of the NICs."""
    inter_bw = np.minimum(links.intra_Bps, links.inter_node_Bps / links.gpus_per_node)
    bw = np.where(inter_node, inter_bw, links.intra_Bps)
    lat = np.where(inter_node, INTERNODE_LATENCY_S, INTRANODE_LATENCY_S)
    return nbytes / bw + lat
