"""A measured all-reduce busbw is read on the planner's own busbw curve at the size, ranks and nodes it was
measured at (planner/measured_plateau.py): the plateau it stands for, not the busbw itself."""

import pytest

from hardware.catalog import load_catalog
from planner.comm import system_curves
from planner.measured_plateau import Reading, plateau_gbps, share_at
from planner.network import readings, with_measured
from planner.resolve import resolve_system
from planner.scenario import Scenario
from tuner import device

MiB = 2**20


def _h100(gpus=16):
    return resolve_system(Scenario(model="7b", gpus=gpus, cluster="dgx-h100"), load_catalog())


def _as_measured(curves, plateau, size, ranks, per_node) -> Reading:
    """The busbw the planner predicts for an all-reduce of `size` at `plateau` Gbps, as a bench would report it."""
    probe = Reading(busbw_gbps=1.0, size_bytes=size, ranks=ranks, per_node=per_node)
    return Reading(busbw_gbps=plateau * share_at(curves, probe, plateau), size_bytes=size, ranks=ranks,
                   per_node=per_node)


@pytest.mark.parametrize("size", [4 * MiB, 16 * MiB, 64 * MiB, 1024 * MiB])
@pytest.mark.parametrize("ranks,per_node,plateau", [(8, 8, 3840.0), (2, 2, 3840.0), (16, 8, 1600.0), (32, 8, 1600.0), (4, 1, 400.0)])
def test_the_plateau_is_the_one_whose_curve_gives_the_measurement(size, ranks, per_node, plateau):
    curves = system_curves(_h100())
    r = _as_measured(curves, plateau, size, ranks, per_node)
    assert r.busbw_gbps < plateau  # below the top: taking it as the plateau would count the slope twice
    assert plateau_gbps(curves, r) == pytest.approx(plateau, rel=1e-6)


def test_nvlink_at_64_mib_is_mid_curve():
    """nccl-tests on 8 x H200: 369.8 GB/s at 64 MiB of a 480.7 GB/s plateau (catalog/links/nvlink.toml; on 8 x
    H100 ~480 GB/s is reached only above 256 MiB, NVIDIA/nccl-tests#212): a 64 MiB bench reads as that plateau."""
    curves = system_curves(_h100(8))
    r = Reading(busbw_gbps=369.82 * 8, size_bytes=64 * MiB, ranks=8, per_node=8)
    assert plateau_gbps(curves, r) / 8 == pytest.approx(480.7, rel=0.03)


@pytest.mark.parametrize("gbps", [5.0, 25.0, 28.0])
def test_gloo_on_cpu_reads_at_the_top_of_its_curve(gbps):
    """A CPU `local` system reads the GPU default (NVLink) sweep; at gloo's 5-28 Gbps the tuner's largest size,
    64 MiB on 2 ranks, lies past the sweep's last point (its 16 GiB at 480 GB/s): the plateau is the
    measurement, as before (4 MiB would read 2% up: a share of 0.98 there)."""
    gpu, cluster = device.cpu_entries(2, device_memory_gib=4.0, busbw_gbps=25.0,
                                      peaks_tflops={"fp32": 0.1, "fp16": 0.1, "bf16": 0.1})
    system = resolve_system(Scenario(model="tiny", gpus=2, cluster=device.CPU_CLUSTER_ID),
                            device.with_entries(load_catalog(), gpu, cluster))
    assert system.intranode_link.id == "nvlink"
    r = Reading(busbw_gbps=gbps, size_bytes=64 * MiB, ranks=2, per_node=2)
    assert plateau_gbps(system_curves(system), r) == gbps


def test_a_call_faster_than_the_curve_allows_is_not_read():
    curves = system_curves(_h100(8))
    assert plateau_gbps(curves, Reading(busbw_gbps=3000.0, size_bytes=32 * 1024, ranks=8, per_node=8)) is None


def _report(per_node=8, nnodes=1, intra=2958.6, inter=None, sizes=(4 * MiB, 16 * MiB, 64 * MiB)):
    return {"nproc": per_node * nnodes, "nnodes": nnodes, "gpus_per_node": per_node, "backend": "nccl",
            "results": [{"op": "all_reduce", "size_bytes": s, "time_s": 1e-3, "algbw_gbps": 1.0, "busbw_gbps": 1.0}
                        for s in sizes] + [{"op": "all_gather", "size_bytes": 2**30, "time_s": 1e-3,
                                            "algbw_gbps": 1.0, "busbw_gbps": 1.0}],
            "busbw_gbps": {"intranode": intra, "internode": inter}}


def test_readings_of_a_bench_report():
    # every size measured over all ranks goes with the reading (the largest at the busbw_gbps figure)
    one = readings(_report())
    assert one["intranode"] == Reading(busbw_gbps=2958.6, size_bytes=64 * MiB, ranks=8, per_node=8,
                                       points=((4 * MiB, 1.0), (16 * MiB, 1.0), (64 * MiB, 2958.6)))
    assert one["internode"] is None
    two = readings(_report(nnodes=2, inter=1500.0))
    assert two["internode"] == Reading(busbw_gbps=1500.0, size_bytes=64 * MiB, ranks=16, per_node=8,
                                       points=((4 * MiB, 1.0), (16 * MiB, 1.0), (64 * MiB, 1500.0)))
    assert two["intranode"] == Reading(busbw_gbps=2958.6, size_bytes=64 * MiB, ranks=8, per_node=8)  # largest only
    assert readings({"busbw_gbps": {"intranode": 900.0}}) == {"intranode": None, "internode": None}
    one_per_node = readings(_report(per_node=1, nnodes=4, intra=None, inter=200.0, sizes=(64 * MiB,)))
    assert one_per_node == {"intranode": None,  # no node-local all-reduce; one size: no points
                            "internode": Reading(busbw_gbps=200.0, size_bytes=64 * MiB, ranks=4, per_node=1)}


def test_with_measured_says_which_plateau_came_from_what():
    one_size = readings(_report(sizes=(64 * MiB,)))  # a bench of one size reads as before every size was used
    system, note = with_measured(_h100(8), {"intranode": 2958.6, "internode": None}, one_size)
    assert system.measured_intranode_busbw_gbps == pytest.approx(3846, rel=1e-3)
    assert system.measured_internode_busbw_gbps is None
    assert note == ("3,846 Gbps within a node (plateau inferred from 2,959 Gbps measured at 64 MiB over 8 ranks: "
                    "curve share 0.77 there)")
    plain, said = with_measured(_h100(8), {"intranode": 900.0, "internode": 180.0}, {})
    assert (plain.measured_intranode_busbw_gbps, plain.measured_internode_busbw_gbps) == (900.0, 180.0)
    assert said == "900 Gbps within a node, 180 Gbps between nodes"
