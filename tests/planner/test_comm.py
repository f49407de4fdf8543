import numpy as np
import pytest

from hardware.catalog import load_catalog
from planner import comm
from planner.settings import Calibration, Settings
from planner.system import System


def _system(**kw) -> System:
    gpu = load_catalog().gpus["a100-80gb"]
    base = dict(gpu=gpu, gpus=32, gpus_per_node=8, host_ram_gib=1024, host_to_gpu_gbps=252,
                intranode_gbps=2400, internode_gbps=800)
    return System(**{**base, **kw})


def test_ring_factors_and_single_gpu():
    links = comm.Links.of(_system(), Settings())
    nbytes = 1e9
    node = comm.Group.of(links, 8, 8)
    ar = node.allreduce_s(nbytes, 0)
    assert ar == pytest.approx(2 * 7 / 8 * nbytes / links.intra_Bps)
    assert node.allgather_s(nbytes, 0) == pytest.approx(ar / 2)
    assert comm.Group.of(links, 1, 1).allreduce_s(nbytes, 5) == 0
    assert comm.Group.of(links, 1, 1).allgather_s(nbytes, 5) == 0
    # the search's shape: one Group per kind, the terms as arrays over candidates
    many = comm.Group.of(links, np.array([1, 8, 16]), np.array([1, 8, 8]))
    assert many.allreduce_s(nbytes)[:2] == pytest.approx([0, ar + 2 * 3 * comm.INTRANODE_LATENCY_S])


def test_latency_term_grows_with_calls():
    links = comm.Links.of(_system(), Settings())
    group = comm.Group.of(links, 16, 8)
    one = group.allreduce_s(1e3, 1)
    many = group.allreduce_s(1e3, 100)
    assert many - one == pytest.approx(99 * 2 * 4 * comm.INTERNODE_LATENCY_S)


def test_groups_across_nodes_share_the_nics():
    links = comm.Links.of(_system(), Settings())
    # a 32-GPU group with 8 members per node gets the node's whole NIC bandwidth
    assert comm.group_busbw_Bps(links, 32, 8) == pytest.approx(800e9 / 8 * comm.INTERNODE_LINK_EFFICIENCY)
    # 8 concurrent groups of 4 (tp=8: one member per node) each get 1/8 of it
    assert comm.group_busbw_Bps(links, 4, 1) == pytest.approx(links.inter_node_Bps / 8)
    assert comm.group_busbw_Bps(links, 8, 8) == links.intra_Bps
    assert list(comm.members_per_node(np.array([4, 32, 2]), np.array([8, 1, 2]), 8)) == [1, 8, 2]


def test_measured_busbw_replaces_catalog_and_calibration_scales():
    sys_m = _system(measured_internode_busbw_gbps=100.0, measured_intranode_busbw_gbps=1000.0)
    links = comm.Links.of(sys_m, Settings())
    assert links.inter_node_Bps == pytest.approx(100e9 / 8)
    assert links.intra_Bps == pytest.approx(1000e9 / 8)
    half = comm.Links.of(sys_m, Settings(calibration=Calibration(network=0.5)))
    assert half.inter_node_Bps == pytest.approx(links.inter_node_Bps / 2)


def test_node_bytes_zero_inside_a_node():
    links = comm.Links.of(_system(), Settings())
    assert comm.Group.of(links, 8, 8).node_bytes(1e9, 2.0) == 0
    assert comm.Group.of(links, 16, 8).node_bytes(1e9, 2.0) == pytest.approx(2 * 15 / 16 * 1e9)
    # 4 members per node (every other rank): the node's two groups share its NICs
    assert comm.Group.of(links, 16, 4).node_bytes(1e9, 1.0) == pytest.approx(15 / 16 * 1e9 * 2)
