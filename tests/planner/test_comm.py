"""Collective costs (planner/comm.py, planner/busbw_curve.py): the measured sweeps read at the call's
message size, group size and node count."""

import numpy as np
import pytest

from hardware.catalog import load_catalog
from planner import comm
from planner.settings import Calibration, Settings
from planner.system import System

LINKS = load_catalog().links
NVLINK, IB = LINKS["nvlink"], LINKS["infiniband"]


def _system(**kw) -> System:
    gpu = load_catalog().gpus["a100-80gb"]
    base = dict(gpu=gpu, gpus=32, gpus_per_node=8, host_ram_gib=1024, host_to_gpu_gbps=252,
                intranode_gbps=2400, internode_gbps=800)
    return System(**{**base, **kw})


def _share(group: comm.Group, n: int, nbytes, op="allreduce") -> np.ndarray:
    """Bus bandwidth reached / the group's plateau."""
    factor = 2.0 if op == "allreduce" else 1.0
    wire = factor * (n - 1) / n * np.asarray(nbytes, dtype=np.float64) * group.inv_bw
    return wire / getattr(group, f"{op}_s")(nbytes)


def test_the_sweep_is_read_back_at_its_own_sizes():
    """On the sweep's own group and plateau, a call of a measured size reaches the measured share;
    between two sizes the share is a power of the size (linear in log-log)."""
    gbps = NVLINK.plateau_busbw_gbytes_per_s * 8 / comm.INTRANODE_LINK_EFFICIENCY
    links = comm.Links.of(_system(intranode_gbps=gbps), Settings())
    node = comm.Group.of(links, 8, 8)
    for p in NVLINK.busbw_efficiency:
        assert float(_share(node, 8, p.message_bytes)) == pytest.approx(p.fraction, rel=1e-9)
    a, b = NVLINK.busbw_efficiency[9], NVLINK.busbw_efficiency[10]  # 16 and 32 MiB
    mid = float(_share(node, 8, np.sqrt(a.message_bytes * b.message_bytes)))
    assert mid == pytest.approx(np.sqrt(a.fraction * b.fraction), rel=1e-9)
    # the inter-node sweep on its own group: 4 nodes of 8 GPUs at its plateau (ring and tree anchored)
    per_node = IB.plateau_busbw_gbytes_per_s * 8 / comm.INTERNODE_LINK_EFFICIENCY
    links = comm.Links.of(_system(gpus=32, internode_gbps=per_node, intranode_gbps=20_000), Settings())
    nodes4 = comm.Group.of(links, 32, 8)
    for p in IB.busbw_efficiency:
        assert float(_share(nodes4, 32, p.message_bytes)) == pytest.approx(p.fraction, rel=1e-6)


def test_a_slower_link_reaches_the_same_share_at_a_proportionally_smaller_message():
    """The sweep is read at the ring's per-step chunk time, size / (ranks x plateau)."""
    fast = comm.Group.of(comm.Links.of(_system(intranode_gbps=4800), Settings()), 8, 8)
    slow = comm.Group.of(comm.Links.of(_system(intranode_gbps=1200), Settings()), 8, 8)
    sizes = np.logspace(5, 9, 9)
    assert _share(slow, 8, sizes / 4) == pytest.approx(_share(fast, 8, sizes), rel=1e-9)
    # and a pair of GPUs moves each step's chunk 4x bigger than 8 do: it reaches at S what 8 reach at 4S
    pair = comm.Group.of(comm.Links.of(_system(intranode_gbps=4800), Settings()), 2, 2)
    assert _share(pair, 2, sizes / 4) == pytest.approx(_share(fast, 8, sizes), rel=1e-9)


def test_more_nodes_are_never_faster_for_the_same_bytes():
    links = comm.Links.of(_system(gpus=16384), Settings())
    sizes = np.logspace(3, 10.5, 40)
    for per_node in (8, 4, 1):
        groups = [comm.Group.of(links, n, per_node) for n in (per_node * 2 ** k for k in range(0, 12))]
        for op in ("allreduce_s", "allgather_s"):
            times = np.array([getattr(g, op)(sizes) for g in groups])
            assert np.all(np.diff(times, axis=0) >= -1e-15), (per_node, op)


def test_a_small_message_costs_more_per_byte_than_a_big_one_and_never_more_time():
    links = comm.Links.of(_system(gpus=4096), Settings())
    sizes = np.logspace(3, 10.5, 300)
    for n, m in ((2, 2), (8, 8), (16, 8), (32, 8), (512, 8), (64, 1), (4096, 8)):
        g = comm.Group.of(links, n, m)
        for op in ("allreduce_s", "allgather_s"):
            t = getattr(g, op)(sizes)
            assert np.all(np.diff(t / sizes) <= 1e-18), (n, m, op)
            assert np.all(np.diff(t) >= -1e-15 * t[1:]), (n, m, op)
        # and never beats the plateau
        assert np.all(_share(g, n, sizes) <= 1.0 + 1e-12)


def test_nccl_tree_keeps_all_reduce_latency_logarithmic_at_scale():
    """All-reduce across many nodes takes NCCL's tree (2 log2(nodes) network steps) where the ring's
    2(n-1) steps cost more; all-gather has no tree (tuning.cc), so its cost keeps growing with the ring."""
    links = comm.Links.of(_system(gpus=32768), Settings())
    size = 4 * 2**20
    ar = [float(comm.Group.of(links, n, 8).allreduce_s(size)) for n in (64, 4096)]
    ag = [float(comm.Group.of(links, n, 8).allgather_s(size)) for n in (64, 4096)]
    assert ar[1] / ar[0] < 1.5
    assert ag[1] / ag[0] > 10


def test_calls_split_the_bytes_and_single_gpus_cost_nothing():
    links = comm.Links.of(_system(), Settings())
    g = comm.Group.of(links, 16, 8)
    assert float(g.allreduce_s(1e9, 40)) == pytest.approx(40 * float(g.allreduce_s(1e9 / 40)))
    assert float(g.allgather_s(1e9, 40)) == pytest.approx(40 * float(g.allgather_s(1e9 / 40)))
    assert float(g.allreduce_s(1e9, 0)) == pytest.approx(float(g.allreduce_s(1e9, 1)))  # at least one call
    assert comm.Group.of(links, 1, 1).allreduce_s(1e9, 5) == 0
    assert comm.Group.of(links, 1, 1).allgather_s(1e9, 5) == 0
    # the search's shape: one Group per kind, the terms as arrays over candidates
    many = comm.Group.of(links, np.array([1, 8, 16]), np.array([1, 8, 8]))
    assert many.allreduce_s(1e9) == pytest.approx(
        [0, float(comm.Group.of(links, 8, 8).allreduce_s(1e9)), float(g.allreduce_s(1e9))])


def test_groups_across_nodes_share_the_nics():
    links = comm.Links.of(_system(), Settings())
    # a 32-GPU group with 8 members per node gets the node's whole NIC bandwidth
    assert comm.group_busbw_Bps(links, 32, 8) == pytest.approx(800e9 / 8 * comm.INTERNODE_LINK_EFFICIENCY)
    # 8 concurrent groups of 4 (tp=8: one member per node) each get 1/8 of it
    assert comm.group_busbw_Bps(links, 4, 1) == pytest.approx(links.inter_node_Bps / 8)
    assert comm.group_busbw_Bps(links, 8, 8) == links.intra_Bps
    assert list(comm.members_per_node(np.array([4, 32, 2]), np.array([8, 1, 2]), 8)) == [1, 8, 2]


def test_one_gpu_per_node_rings_cross_the_network_at_every_step():
    """A ring whose every step crosses the network (NCCL tuning.cc: 14 us per network step against
    3.4 us on NVLink) reaches less of its plateau at the same per-step chunk than the sweep's
    8-GPU nodes, one network step in eight."""
    links = comm.Links.of(_system(gpus=512), Settings())
    wide, narrow = comm.Group.of(links, 64, 8), comm.Group.of(links, 64, 1)
    sizes = np.logspace(5, 8, 7)
    # the same per-step chunk time: the narrow group's plateau is 1/8, so 1/8 of the bytes
    assert np.all(_share(narrow, 64, sizes / 8, "allgather") < _share(wide, 64, sizes, "allgather"))


def test_measured_busbw_replaces_catalog_and_calibration_scales():
    sys_m = _system(measured_internode_busbw_gbps=100.0, measured_intranode_busbw_gbps=1000.0)
    links = comm.Links.of(sys_m, Settings())
    assert links.inter_node_Bps == pytest.approx(100e9 / 8)
    assert links.intra_Bps == pytest.approx(1000e9 / 8)
    half = comm.Links.of(sys_m, Settings(calibration=Calibration(network=0.5)))
    assert half.inter_node_Bps == pytest.approx(links.inter_node_Bps / 2)
    # the measurement is the plateau: a 1 GiB all-reduce inside the node reaches ~97% of it
    assert float(_share(comm.Group.of(links, 8, 8), 8, 2.0**30)) > 0.95


def test_node_bytes_zero_inside_a_node():
    links = comm.Links.of(_system(), Settings())
    assert comm.Group.of(links, 8, 8).node_bytes(1e9, 2.0) == 0
    assert comm.Group.of(links, 16, 8).node_bytes(1e9, 2.0) == pytest.approx(2 * 15 / 16 * 1e9)
    # 4 members per node (every other rank): the node's two groups share its NICs
    assert comm.Group.of(links, 16, 4).node_bytes(1e9, 1.0) == pytest.approx(15 / 16 * 1e9 * 2)


def test_twice_the_ranks_at_most_twice_the_time_across_nodes():
    """From two nodes on, doubling the ranks n of a collective of the same bytes grows its time at most
    as a ring's steps grow, (2n - 1) / (n - 1) (its latency is linear in the steps, NCCL tuning.cc; its
    bytes per rank do not grow); the sanity sweep's continuity along the node count leans on this
    (validation/sanity_record.py)."""
    links = comm.Links.of(_system(gpus=32768), Settings())
    sizes = np.logspace(3, 10.5, 40)
    for per_node in (8, 4, 1):
        ranks = [per_node * 2 ** k for k in range(1, 13)]
        for op in ("allreduce_s", "allgather_s"):
            times = np.array([getattr(comm.Group.of(links, n, per_node), op)(sizes) for n in ranks])
            steps = np.array([(2.0 * n - 1) / (n - 1) for n in ranks[:-1]])[:, None]
            assert np.all(times[1:] <= steps * times[:-1] * (1 + 1e-9)), (per_node, op)
