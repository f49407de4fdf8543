"""NVLink SHARP all-reduce inside a node (planner/nvls.py) and NCCL's choice of the faster algorithm
(planner/comm.py Group.allreduce_s)."""

import numpy as np
import pytest

from hardware.catalog import load_catalog
from planner import comm
from planner.settings import Settings
from planner.system import System

CAT = load_catalog()
NVLS = CAT.links["nvls"]


def _system(gpu: str, **kw) -> System:
    g = CAT.gpus[gpu]
    base = dict(gpu=g, gpus=16, gpus_per_node=8, host_ram_gib=1024, host_to_gpu_gbps=252,
                intranode_gbps=g.intranode_gbps, internode_gbps=3200)
    return System(**{**base, **kw})


def _busbw_GBps(group: comm.Group, n: int, nbytes: float, sp=None) -> float:
    t = group.allreduce_s(nbytes) if sp is None else group.tp_exchange_s(nbytes, 1, sp)
    return float(2.0 * (n - 1) / n * nbytes / np.asarray(t).item() / 1e9)


def _ring_only(links: comm.Links) -> comm.Links:
    return comm.Links(intra_Bps=links.intra_Bps, inter_node_Bps=links.inter_node_Bps,
                      gpus_per_node=links.gpus_per_node, host_Bps=links.host_Bps, curves=links.curves)


def test_h100_node_all_reduce_runs_nvls_at_large_sizes():
    """8 x H100 SXM: ~480 GB/s busbw at 1 GiB with NVLS vs the ring's 0.80 x 450 (NVIDIA/nccl#1455)."""
    links = comm.Links.of(_system("h100-80gb"), Settings())
    assert links.nvls is not None
    node, ring = comm.Group.of(links, 8, 8), comm.Group.of(_ring_only(links), 8, 8)
    big = 2.0 ** 30
    assert _busbw_GBps(ring, 8, big) < 370
    assert _busbw_GBps(node, 8, big) == pytest.approx(NVLS.busbw_efficiency[15].fraction * 480.0, rel=0.01)
    # at 64 KiB both are latency-bound: about the same time (the sweep is NCCL's Ring/LL there)
    assert _busbw_GBps(node, 8, 2.0 ** 16) == pytest.approx(_busbw_GBps(ring, 8, 2.0 ** 16), rel=0.02)


def test_the_nvls_curve_is_read_at_the_call_size():
    """On 8 GPUs at the 8-GPU plateau (480 GB/s) each measured size reads back its measured share."""
    links = comm.Links.of(_system("h100-80gb"), Settings())
    node = comm.Group.of(links, 8, 8)
    plateau = NVLS.nvls_busbw_share[-1].share * 450.0
    for p in NVLS.busbw_efficiency[7:]:  # 4 MiB and up: NVLS beats the ring there
        assert _busbw_GBps(node, 8, p.message_bytes) == pytest.approx(p.fraction * plateau, rel=2e-3)
    shares = [_busbw_GBps(node, 8, s) / plateau for s in (2 ** 22, 2 ** 24, 2 ** 26, 2 ** 28)]
    assert shares == sorted(shares) and shares[0] < 0.35 < 0.9 < shares[-1]


def test_no_nvls_on_a100_v100_small_groups_across_nodes_or_a_measured_busbw():
    for gpu in ("a100-80gb", "v100-32gb"):
        links = comm.Links.of(_system(gpu), Settings())
        assert links.nvls is None
    links = comm.Links.of(_system("h100-80gb"), Settings())
    ring = _ring_only(links)
    for n, m in ((4, 4), (2, 2), (16, 8)):  # below NVLS's smallest measured group, or across nodes
        a, b = comm.Group.of(links, n, m), comm.Group.of(ring, n, m)
        assert float(a.allreduce_s(2.0 ** 28)) == float(b.allreduce_s(2.0 ** 28))
    # a measured busbw is NCCL's own choice on the node: it sets the plateau, NVLS adds nothing
    measured = comm.Links.of(_system("h100-80gb", measured_intranode_busbw_gbps=470 * 8), Settings())
    assert measured.nvls is None
    assert _busbw_GBps(comm.Group.of(measured, 8, 8), 8, 2.0 ** 34) == pytest.approx(470, rel=0.01)


def test_sequence_parallel_tp_exchanges_stay_on_the_ring():
    """Reduce-scatter + all-gather pairs do not run NVLS (NVIDIA/nccl#1083); the same volume as the ring's
    all-reduce inside a node."""
    links = comm.Links.of(_system("h100-80gb"), Settings())
    node, ring = comm.Group.of(links, 8, 8), comm.Group.of(_ring_only(links), 8, 8)
    s = 2.0 ** 27
    assert _busbw_GBps(node, 8, s, sp=True) == pytest.approx(_busbw_GBps(ring, 8, s), rel=1e-9)
    assert _busbw_GBps(node, 8, s, sp=False) > 1.2 * _busbw_GBps(node, 8, s, sp=True)
