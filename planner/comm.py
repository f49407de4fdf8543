"""Communication cost model: collectives on rings/trees, split intra-node vs inter-node.

Cost of one collective (Thakur et al. 2005; NCCL's busbw convention, nccl-tests PERFORMANCE.md):
    all-reduce:               2 (n-1)/n * bytes / busbw
    reduce-scatter/all-gather:  (n-1)/n * bytes / busbw
where busbw is the link's plateau times the share NCCL reaches at the call's message size, group
size and node count (planner/busbw_curve.py: a measured sweep read at the ring's per-step chunk,
NCCL's tree across nodes for all-reduce; NVLink SHARP inside a node where the GPU's NVSwitches have it,
planner/nvls.py). A collective of `calls` calls moving `bytes` in total
costs calls x the time of one call of bytes / calls. The plateau is the intra-node link when the
group fits in a node; when it spans nodes, each node's NICs are shared by the gpus_per_node / m
groups running at once (m = members of one group on a node), so the group gets
internode_bw * m / gpus_per_node, never more than the intra-node link. A measured busbw (`plan
allreduce-bench --json`) gives that plateau as read on the same sweep at the size, ranks and nodes it
was measured at (planner/measured_plateau.py), and the sweep's shape still applies below it; it is
what NCCL reached with its own choice of algorithm, so NVLS is then not added on top of it.

Rank order is Megatron's: tp innermost, then dp, then pp.
All functions take numpy arrays (one entry per candidate) and return seconds or bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hardware.catalog import load_catalog
from hardware.links import CollectiveLink
from hardware.models import Cluster
from planner import nvls as nvls_model
from planner.busbw_curve import Curves, Reader
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
# Latency of one point-to-point step (pipeline sends, context-parallel rings, all-to-all): NCCL
# ~5 us inside a node, ~20 us across IB. Collectives use the measured sweeps (busbw_curve.py).
INTRANODE_LATENCY_S = 5e-6
DEFAULT_INTERNODE_LINK = Cluster.model_fields["internode_link"].default
INTERNODE_LATENCY_S = 20e-6


@dataclass(frozen=True)
class Links:
    """Achievable bandwidths in bytes/s (calibration applied, measurements preferred)."""

    intra_Bps: float  # bus bandwidth of a collective inside a node
    inter_node_Bps: float  # bus bandwidth of one node's NICs in a collective across nodes
    gpus_per_node: int
    host_Bps: float  # host<->GPU, per GPU, one direction (achievable: x HOST_LINK_EFFICIENCY)
    # busbw share by message size, inside a node and across nodes (default: the built-in sweeps)
    curves: Curves = field(default_factory=lambda: default_curves())
    # NVLink SHARP all-reduce inside a node (planner/nvls.py); None: the ring only
    nvls: nvls_model.Nvls | None = None

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
            curves=system_curves(system),
            nvls=_nvls(system, k),
        )


def system_curves(system: System) -> Curves:
    """The system's sweeps (catalog/links), or the catalog's for its GPU's link and the default network."""
    intra, inter = system.intranode_link, system.internode_link
    if intra is None or inter is None:
        links = load_catalog().links
        intra = intra or links[system.gpu.intranode_link]
        inter = inter or links[DEFAULT_INTERNODE_LINK]
    return _curves_of(intra, inter)


_CURVES: dict[tuple[int, int], tuple[CollectiveLink, CollectiveLink, Curves]] = {}


def _curves_of(intra: CollectiveLink, inter: CollectiveLink) -> Curves:
    """`Curves.of`, once per pair of link entries (frozen catalog data, kept here so that their ids stay
    theirs): a profile fit plans each run thousands of times, one system at a time."""
    key = (id(intra), id(inter))
    entry = _CURVES.get(key)
    if entry is None:  # (the service plans in several threads: a cleared cache is only a miss)
        entry = (intra, inter, Curves.of(intra, inter))
        if len(_CURVES) >= 64:
            _CURVES.clear()
        _CURVES[key] = entry
    return entry[2]


def _nvls(system: System, k: float) -> nvls_model.Nvls | None:
    """The GPU's NVLS link at its line rate; None without one, or where a measured intra-node busbw
    (NCCL's own choice on the node, NVLS included) sets the plateau."""
    if system.gpu.nvls_link is None or system.measured_intranode_busbw_gbps:
        return None
    link = system.nvls_link or load_catalog().links[system.gpu.nvls_link]  # resolved with the system, else read here
    return nvls_model.Nvls.of(link, system.intranode_gbps * k * 1e9 / 8)


def default_curves() -> Curves:
    """The catalog's NVLink and InfiniBand sweeps."""
    links = load_catalog().links
    return _curves_of(links["nvlink"], links[DEFAULT_INTERNODE_LINK])


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


@dataclass(frozen=True)
class Group:
    """Precomputed terms of one kind of group (e.g. every candidate's DP group), so the many
    collectives of a step cost a few array operations each."""

    f: np.ndarray  # (n-1)/n, 0 for a group of one
    inv_bw: np.ndarray  # 1 / plateau busbw, s per byte
    spans: np.ndarray  # the group crosses nodes
    node_scale: np.ndarray  # gpus_per_node / m: groups sharing a node's NICs
    reader: Reader  # busbw share by message size for this group's size, nodes and link
    curves: Curves
    n: np.ndarray | None = None  # group size (for NVLS)
    nvls: nvls_model.Nvls | None = None

    @classmethod
    def of(cls, links: Links, group, m) -> "Group":
        n = np.asarray(group, dtype=np.float64)
        bw = group_busbw_Bps(links, group, m)
        return cls(f=(n - 1) / n, inv_bw=1.0 / bw, spans=np.asarray(group > m),
                   node_scale=links.gpus_per_node / np.asarray(m, dtype=np.float64),
                   reader=Reader.of(links.curves, n, m, bw), curves=links.curves, n=n, nvls=links.nvls)

    def allreduce_s(self, nbytes, calls=1):
        """`calls` all-reduces moving `nbytes` in total (0 for a group of one): ring, NCCL's tree, or NVLS
        inside a node, whichever is faster at the call's size (NCCL's tuner, NVIDIA/nccl#457)."""
        calls, per_call = _split(nbytes, calls)
        wire = 2.0 * self.f * per_call * self.inv_bw
        t = self.reader.call_s(self.curves, wire, per_call, tree=True)
        if self.nvls is not None:
            t = np.minimum(t, nvls_model.allreduce_s(self.nvls, self.n, per_call, ~self.spans))
        return calls * t

    def allgather_s(self, nbytes, calls=1):
        """All-gathers or reduce-scatters of `nbytes` in total (the unsharded size), ring only."""
        calls, per_call = _split(nbytes, calls)
        wire = self.f * per_call * self.inv_bw
        return calls * self.reader.call_s(self.curves, wire, per_call, tree=False)

    def tp_exchange_s(self, nbytes, calls, sequence_parallel):
        """Tensor-parallel exchanges: all-reduces, or with sequence parallelism as many reduce-scatter +
        all-gather pairs (Korthikanti et al. 2022), ring only (NVLS is slower there, NVIDIA/nccl#1083)."""
        return np.where(sequence_parallel, self.allgather_s(2.0 * np.asarray(nbytes), 2.0 * np.asarray(calls)),
                        self.allreduce_s(nbytes, calls))

    def node_bytes(self, nbytes, factor: float):
        """Bytes one node sends across the network for a collective (0 inside a node);
        factor: 2 for all-reduce, 1 for all-gather / reduce-scatter."""
        return self.spans * (factor * self.f * self.node_scale) * nbytes


def _split(nbytes, calls) -> tuple[np.ndarray, np.ndarray]:
    """(calls, bytes per call): at least one call."""
    calls = np.maximum(np.asarray(calls, dtype=np.float64), 1.0)
    return calls, np.asarray(nbytes, dtype=np.float64) / calls


def p2p_s(links: Links, nbytes, inter_node) -> np.ndarray:
    """Point-to-point send of `nbytes` (pipeline activations): a GPU's share of the NICs."""
    inter_bw = np.minimum(links.intra_Bps, links.inter_node_Bps / links.gpus_per_node)
    bw = np.where(inter_node, inter_bw, links.intra_Bps)
    lat = np.where(inter_node, INTERNODE_LATENCY_S, INTRANODE_LATENCY_S)
    return nbytes / bw + lat
