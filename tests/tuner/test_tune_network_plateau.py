"""`plan tune`'s measured busbw becomes the plateau the planner's curve needs (tuner/setup.py, planner/network.py):
on GPUs a 64 MiB all-reduce is mid-curve (nccl-tests 8 x H200 NVLink: 77% of the plateau, catalog/links/
nvlink.toml), on CPU ranks (gloo, ~25 Gbps) it is at the curve's top and the plateau is the measurement."""

from __future__ import annotations

import re

import pytest

from planner.network import readings
from tuner import device, setup
from tuner.config import TuneConfig

MiB = 2**20


def _bench_8xh100() -> dict:
    """What `plan allreduce-bench --json` wrote, the busbw of 8 x H200 nccl-tests at 4/16/64 MiB (catalog/links/
    nvlink.toml: 140.0, 242.5, 369.8 GB/s)."""
    results = [{"op": "all_reduce", "size_bytes": s, "time_s": 1e-3, "algbw_gbps": 1.0, "busbw_gbps": gbs * 8}
               for s, gbs in ((4 * MiB, 139.97), (16 * MiB, 242.45), (64 * MiB, 369.82))]
    return {"nproc": 8, "nnodes": 1, "gpus_per_node": 8, "backend": "nccl", "results": results,
            "busbw_gbps": {"intranode": 369.82 * 8, "internode": None}}


def test_a_gpu_bench_at_64_mib_gives_the_plateau(monkeypatch):
    """The bench itself needs 8 GPUs: its report stands in for measure_busbw's subprocess."""
    report = _bench_8xh100()
    measured = {**report["busbw_gbps"], "readings": readings(report)}
    monkeypatch.setattr(setup, "measure_busbw", lambda nproc, on_gpu=False, **kw: (measured, "measured"))
    cfg = TuneConfig(model="tiny", gpus=8, budget_s=60, gpu="h100-80gb")
    system, note, assumed = setup._system_for(cfg, 8, on_gpu=True)
    assert system.measured_intranode_busbw_gbps / 8 == pytest.approx(480.7, rel=0.03)  # the sweep's plateau
    # all three sizes are read (each on the curve at its size: 480.7 GB/s from every one of them)
    assert note.startswith("measured all-reduce busbw: ") and "plateau fitted to 3 sizes, 4-64 MiB over 8 ranks: " \
        "each size's own plateau within 0.0% of it; 2,959 Gbps at 64 MiB, curve share 0.77 there" in note, note
    assert assumed.measured_intranode_busbw_gbps is None


def test_the_gpu_bench_measures_past_64_mib():
    from tuner import network

    assert network.GPU_SIZES.split(",")[-1] == "1G" and network.CPU_SIZES == "4M,16M,64M"


@pytest.mark.slow
def test_cpu_ranks_keep_the_measurement_as_plateau(monkeypatch):
    """A real gloo bench on 2 CPU ranks: 4-64 MiB are past the curve's last point (share 1.00), so each size's
    plateau is its busbw and the plateau their median."""
    monkeypatch.setenv("PLAN_FORCE_CPU", "1")
    cfg = TuneConfig(model="tiny", gpus=2, budget_s=60, device_memory_gib=2.0)
    system, note, _ = setup._system_for(cfg, 2, on_gpu=False)
    m = re.fullmatch(r"measured all-reduce busbw: ([\d.,]+) Gbps within a node \(plateau fitted to 3 sizes, 4-64 MiB "
                     r"over 2 ranks: each size's own plateau within [\d.]+% of it; [\d.,]+ Gbps at 64 MiB, curve share "
                     r"1.00 there\)", note)
    assert m, note
    assert system.gpu.id == device.CPU_GPU_ID
    assert system.measured_intranode_busbw_gbps == system.gpu.intranode_gbps == pytest.approx(float(m.group(1).replace(",", "")), rel=0.01)
