"""`plan estimate --network-from` with a bench's sweep: each busbw is read on the planner's curve at the size and
ranks it was measured at (planner/measured_plateau.py), so a bench at 4-64 MiB plans as the plateau it stands
for. Before, the 64 MiB busbw was taken as the plateau and the curve discounted it again (NVLink and IB slow)."""

import json

import pytest
from typer.testing import CliRunner

from hardware.catalog import load_catalog
from planner.comm import system_curves
from planner.measured_plateau import Reading, share_at
from planner.resolve import resolve_system
from planner.scenario import Scenario
from plan_cli.main import app

runner = CliRunner()
MiB = 2**20
SIZES = (4 * MiB, 16 * MiB, 64 * MiB)


def _bench(intra: float, inter: float, per_node=8, nnodes=2) -> dict:
    """The report `plan allreduce-bench --json` would write on dgx-h100 nodes whose plateaus are `intra` /
    `inter` Gbps, as the planner predicts each size."""
    curves = system_curves(resolve_system(Scenario(model="7b", gpus=16, cluster="dgx-h100"), load_catalog()))
    world = per_node * nnodes

    def busbw(plateau, size, ranks):
        probe = Reading(busbw_gbps=1.0, size_bytes=size, ranks=ranks, per_node=per_node)
        return plateau * share_at(curves, probe, plateau)

    results = [{"op": "all_reduce", "size_bytes": s, "time_s": 1e-3, "algbw_gbps": 1.0,
                "busbw_gbps": busbw(inter, s, world)} for s in SIZES]
    return {"nproc": world, "nnodes": nnodes, "gpus_per_node": per_node, "backend": "nccl", "results": results,
            "busbw_gbps": {"intranode": busbw(intra, SIZES[-1], per_node), "internode": results[-1]["busbw_gbps"]}}


def _estimate(net, *args) -> dict:
    r = runner.invoke(app, ["estimate", "--model", "7b", "--cluster", "dgx-h100", "--top", "5", "--json",
                            "--network-from", str(net), *args], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def _times(report: dict) -> list[tuple]:
    return [(json.dumps(e["plan"], sort_keys=True), e["time"]) for e in report["results"]]


@pytest.mark.parametrize("gpus", ["8", "32"])
def test_a_sweep_at_small_sizes_plans_as_its_plateau(tmp_path, gpus):
    sweep, plateau = tmp_path / "sweep.json", tmp_path / "plateau.json"
    bench = _bench(3840.0, 2720.0)
    assert bench["busbw_gbps"]["intranode"] < 0.85 * 3840 and bench["busbw_gbps"]["internode"] < 0.75 * 2720
    sweep.write_text(json.dumps(bench))
    plateau.write_text(json.dumps({"busbw_gbps": {"intranode": 3840.0, "internode": 2720.0}}))
    a, b = _estimate(sweep, "--gpus", gpus), _estimate(plateau, "--gpus", gpus)
    assert a["system"]["measured_intranode_busbw_gbps"] == pytest.approx(3840.0, rel=1e-6)
    assert a["system"]["measured_internode_busbw_gbps"] == pytest.approx(2720.0, rel=1e-6)
    ta, tb = _times(a), _times(b)
    assert [p for p, _ in ta] == [p for p, _ in tb]
    for (_, x), (_, y) in zip(ta, tb):
        assert x.keys() == y.keys()
        for k in x:
            if isinstance(x[k], float):
                assert x[k] == pytest.approx(y[k], rel=1e-5, abs=1e-9), k


def test_the_header_says_which_plateau_came_from_what(tmp_path):
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps(_bench(3840.0, 2720.0)))
    r = runner.invoke(app, ["estimate", "--model", "7b", "--cluster", "dgx-h100", "--gpus", "16", "--top", "1",
                            "--network-from", str(sweep)], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    assert ("measured all-reduce busbw (--network-from): 3,840 Gbps within a node (plateau inferred from 2,955 Gbps "
            "measured at 64 MiB over 8 ranks: curve share 0.77 there), 2,720 Gbps between nodes (plateau fitted to "
            "3 sizes, 4-64 MiB over 16 ranks: each size's own plateau within 0.0% of it; 1,904 Gbps at 64 MiB, curve "
            "share 0.70 there)") in " ".join(r.output.split()), r.output


def test_a_cpu_bench_planned_for_gpus_says_so(tmp_path):
    """The README's `plan allreduce-bench --nproc 2` on a machine without GPUs measures gloo between CPU ranks
    (0.2 Gbps); `plan estimate --network-from` planned a dgx-h100 with it (2% MFU) and said only 'measured': the
    header now says the bench was gloo on CPU ranks, not the GPUs' NCCL links."""
    data = {**_bench(2000.0, 300.0), "backend": "gloo"}
    (tmp_path / "net.json").write_text(json.dumps(data))
    r = runner.invoke(app, ["estimate", "--model", "7b", "--cluster", "dgx-h100", "--gpus", "16", "--top", "1",
                            "--network-from", str(tmp_path / "net.json")], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    assert "measured with gloo on CPU ranks, not the NCCL links of h100-80gb" in " ".join(r.output.split())
    (tmp_path / "nccl.json").write_text(json.dumps(_bench(2000.0, 300.0)))
    r = runner.invoke(app, ["estimate", "--model", "7b", "--cluster", "dgx-h100", "--gpus", "16", "--top", "1",
                            "--network-from", str(tmp_path / "nccl.json")], env={"COLUMNS": "400"})
    assert r.exit_code == 0 and "gloo" not in r.output
