"""`plan allreduce-bench` and `plan probe` on 2 CPU ranks with small sizes."""

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from plan_cli.bench import _gbps
from plan_cli.main import app
from trainer.collectives import bus_factor, parse_size
from trainer.probe import ProbeReport, MatmulPoint, gpu_entry, to_toml


def test_sizes_and_bus_factors():
    assert parse_size("1M") == 2**20 and parse_size("256k") == 256 * 2**10 and parse_size("1G") == 2**30
    assert bus_factor("all_reduce", 2) == 1.0 and bus_factor("all_reduce", 8) == 1.75
    assert bus_factor("all_gather", 4) == 0.75


def test_bad_sizes_and_ops_are_one_line_errors():
    r = CliRunner().invoke(app, ["allreduce-bench", "--sizes", "abc"])
    assert r.exit_code == 2 and "sizes" in r.output
    r = CliRunner().invoke(app, ["allreduce-bench", "--ops", "all_to_all"])
    assert r.exit_code == 2 and "ops" in r.output


@pytest.mark.slow
def test_allreduce_bench_two_ranks(tmp_path):
    out = tmp_path / "bench.json"
    r = CliRunner().invoke(app, ["allreduce-bench", "--nproc", "2", "--sizes", "64K,1M",
                                 "--ops", "all_reduce,all_gather", "--json", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert (data["nproc"], data["nnodes"], data["gpus_per_node"], data["backend"]) == (2, 1, 2, "gloo")
    assert len(data["results"]) == 4
    for row in data["results"]:
        assert row["time_s"] > 0
        assert row["algbw_gbps"] == pytest.approx(row["size_bytes"] * 8 / row["time_s"] / 1e9)
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * bus_factor(row["op"], 2))
    largest = max((r for r in data["results"] if r["op"] == "all_reduce"), key=lambda r: r["size_bytes"])
    assert data["busbw_gbps"] == {"intranode": largest["busbw_gbps"], "internode": None}
    last = [line for line in r.output.splitlines() if line.strip()][-1]  # a sentence, not a dict
    assert last.startswith("All-reduce bus bandwidth within one node: ") and "{" not in last, last
    assert f"{_gbps(largest['busbw_gbps'])} Gbps at 1M over 2 ranks (gloo)" in " ".join(r.output.split()), r.output
    # --json was given: the line says where it went, not "save it with --json FILE"
    assert f"wrote {out}: plan with `plan estimate ... --network-from {out}`" in " ".join(r.output.split()), r.output
    assert "save it with --json" not in r.output


def test_gpu_entry_is_catalog_valid(tmp_path):
    from hardware.models import GPU
    import tomllib

    rep = ProbeReport(device="cpu", device_name="x", threads=1, ranks_per_node=2, memory_gib=8,
                      matmul=[MatmulPoint(dtype="fp32", n=n, gemm_gflop=2 * n**3 / 1e9, tflops=t)
                              for n, t in ((256, 0.05), (512, 0.1))],
                      peak_tflops={"fp32": 0.1}, copy_gbytes_per_s=10.0, host_to_device_gbps=None,
                      allreduce_busbw_gbps=None)
    gpu = GPU(id="local", **tomllib.loads(to_toml(gpu_entry(rep))))
    assert gpu.hbm_gib == 4 and gpu.matmul_efficiency[0].fraction == 0.5 and gpu.bf16_tflops is None


@pytest.mark.slow
def test_probe_writes_a_catalog_the_planner_reads(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-m", "plan_cli.main", "probe", "--out", str(tmp_path), "--nproc", "2",
                        "--sizes", "128,256", "--copy-size", "16M", "--allreduce-size", "1M"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    from hardware.catalog import load_catalog
    from planner.resolve import resolve_system
    from planner.scenario import Scenario

    cat = load_catalog([tmp_path])
    gpu = cat.gpus["local"]
    assert gpu.fp32_tflops > 0 and len(gpu.matmul_efficiency) == 2 and gpu.bf16_tflops
    assert cat.clusters["local"].gpus_per_node == 2
    system = resolve_system(Scenario(gpu="local", cluster="local", gpus=2), cat)
    assert system.gpu.id == "local" and system.gpus == 2


def test_probe_stops_growing_a_dtype_where_one_matmul_would_take_over_a_second(monkeypatch):
    """An emulated dtype (fp16 on most CPUs, ~1 GFLOP/s) is measured at the sizes it can do in under
    MAX_MATMUL_S each; the others at every size. The rates are given (the rule is what is tested, not timing)."""
    from trainer import probe

    rate = {"fp32": 0.1, "bf16": 0.2, "fp16": 0.001}  # TFLOP/s
    calls = []

    def fixed_rate(n, dtype, device, min_time_s=0.2):
        calls.append((dtype, n))
        return rate[dtype]

    monkeypatch.setattr(probe, "matmul_tflops", fixed_rate)
    monkeypatch.setattr(probe, "copy_gbytes_per_s", lambda device, size: 10.0)
    monkeypatch.setattr(probe, "host_to_device_gbps", lambda device: None)
    import torch

    threads = torch.get_num_threads()  # probe_device sets a CPU rank's share of the cores
    try:
        report = probe.probe_device(1, [256, 512, 1024], 2**20, rounds=2)
    finally:
        torch.set_num_threads(threads)
    measured = {(p.dtype, p.n) for p in report.matmul}
    # fp16: 256 takes 0.034 s, 512 0.27 s, 1024 would take 2.1 s: not measured, in any round
    assert measured == {(d, n) for d in ("fp32", "bf16") for n in (256, 512, 1024)} | {("fp16", 256), ("fp16", 512)}
    assert ("fp16", 1024) not in calls and calls.count(("fp32", 1024)) == 2
    assert report.peak_tflops == rate


@pytest.mark.parametrize("device, nproc, gpus, ranks", [
    ("cuda", 1, 8, 8),  # plan probe on an 8-GPU node: all-reduce over the 8 (it wrote HBM copy x 8 as NVLink)
    ("cuda", 4, 8, 4), ("cuda", 1, 1, 1),
    ("cpu", 1, 0, 1), ("cpu", 2, 0, 2)])  # CPU: as before, --nproc decides
def test_probe_all_reduce_ranks(device, nproc, gpus, ranks):
    from trainer.probe import bench_ranks

    assert bench_ranks(device, nproc, gpus) == ranks
