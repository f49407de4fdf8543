"""The plateau of a bench is read from every size it measured (planner/measured_plateau.py fitted_plateau): each
size's own plateau on the planner's curve, their median weighted by how much each size's time depends on the
plateau. It was the largest size's alone."""

import itertools
import json
import tomllib
from pathlib import Path

import pytest

from hardware.catalog import load_catalog
from planner.comm import system_curves
from planner.measured_plateau import Reading, fitted_plateau, plateau_gbps, sensitivity, share_at
from planner.network import readings, with_measured
from planner.resolve import resolve_system
from planner.scenario import Scenario

MiB = 2**20
SIZES = (1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, 1024 * MiB)
LINKS = Path(__file__).resolve().parents[2] / "catalog" / "links"


def _system(gpus=16, cluster="dgx-h100"):
    return resolve_system(Scenario(model="7b", gpus=gpus, cluster=cluster), load_catalog())


def _busbw(curves, plateau, size, ranks, per_node) -> float:
    """What the planner's curve gives an all-reduce of `size` at `plateau` Gbps, as a bench reports it."""
    return plateau * share_at(curves, Reading(busbw_gbps=1.0, size_bytes=size, ranks=ranks, per_node=per_node), plateau)


def _reading(points, ranks, per_node) -> Reading:
    points = tuple(sorted(points))
    return Reading(busbw_gbps=points[-1][1], size_bytes=points[-1][0], ranks=ranks, per_node=per_node,
                   points=points if len(points) > 1 else ())


@pytest.mark.parametrize("ranks,per_node,plateau", [(8, 8, 3840.0), (2, 2, 3000.0), (16, 8, 1600.0), (64, 8, 2720.0)])
def test_any_subset_of_sizes_recovers_the_plateau(ranks, per_node, plateau):
    curves = system_curves(_system())
    measured = [(s, _busbw(curves, plateau, s, ranks, per_node)) for s in SIZES]
    for k in (1, 2, 3, len(SIZES)):
        for subset in itertools.combinations(measured, k):
            fit = fitted_plateau(curves, _reading(subset, ranks, per_node))
            assert fit.plateau_gbps == pytest.approx(plateau, rel=1e-6), subset
            assert fit.spread_pct < 1e-4 and len(fit.used) == k


def test_a_noisy_small_size_does_not_drag_the_plateau():
    """4 MiB 1.6x slow (per-call launch cost on the bench's Python loop) and 1 MiB faster than the curve allows
    at any plateau: the plateau is the other sizes' one; least squares in log time would have moved it."""
    curves = system_curves(_system(8))
    measured = {s: _busbw(curves, 3840.0, s, 8, 8) for s in SIZES}
    measured[4 * MiB] /= 1.6
    measured[1 * MiB] = 3000.0
    fit = fitted_plateau(curves, _reading(measured.items(), 8, 8))
    assert fit.plateau_gbps == pytest.approx(3840.0, rel=1e-6)
    assert [s for s, _ in fit.used] == list(SIZES[1:])  # 1 MiB left out: no plateau gives it
    slow = dict(fit.used)[4 * MiB]
    assert slow < 0.6 * 3840 and fit.spread_pct == pytest.approx(100 * (1 - slow / 3840), rel=1e-6)
    # a size whose time hardly depends on the plateau weighs little: 4 MiB's weight is below 1 MiB-1 GiB's top
    r4 = Reading(busbw_gbps=measured[4 * MiB], size_bytes=4 * MiB, ranks=8, per_node=8)
    r1g = Reading(busbw_gbps=measured[1024 * MiB], size_bytes=1024 * MiB, ranks=8, per_node=8)
    assert sensitivity(curves, r4, 3840.0) < 0.7 < 0.95 < sensitivity(curves, r1g, 3840.0) <= 1.0 + 1e-6


def test_two_sizes_that_disagree_are_weighed_by_what_their_time_says_of_the_plateau():
    curves = system_curves(_system(8))

    def fit(a, pa, b, pb):
        return fitted_plateau(curves, _reading([(a, _busbw(curves, pa, a, 8, 8)), (b, _busbw(curves, pb, b, 8, 8))],
                                               8, 8)).plateau_gbps

    # 4 MiB's time depends on the plateau less than 1 GiB's (share 0.29 vs 0.97 of it): 1 GiB's plateau is kept
    assert fit(4 * MiB, 3000.0, 1024 * MiB, 4000.0) == pytest.approx(4000.0, rel=1e-6)
    assert fit(4 * MiB, 4000.0, 1024 * MiB, 3000.0) == pytest.approx(3000.0, rel=1e-6)
    # on one power-law stretch of the curve both weigh the same: they meet half-way (in log)
    assert fit(512 * MiB, 3000.0, 1024 * MiB, 4000.0) == pytest.approx((3000.0 * 4000.0) ** 0.5, rel=1e-6)


@pytest.mark.parametrize("link,cluster,gpus", [("nvlink", "dgx-h200", 8), ("nvlink", "dgx-h100", 8),
                                               ("infiniband", "dgx-b200", 32), ("infiniband", "dgx-h100", 32)])
def test_published_sweeps_give_their_own_plateau(link, cluster, gpus):
    """stas00/ml-engineering network/benchmarks/README.md @0cc3de50: nccl-tests on 8 x H200 (NVLink) and
    all_reduce_bench on 4 x 8 B200 (InfiniBand), catalog/links/*.toml; the points from 8 MiB to 1 GiB, read on
    the planner's curve of a system of the same group (ranks, 8 per node), give the sweep's plateau."""
    sweep = tomllib.loads((LINKS / f"{link}.toml").read_text())
    top = sweep["plateau_busbw_gbytes_per_s"]
    points = [(p["message_bytes"], p["fraction"] * top * 8) for p in sweep["busbw_efficiency"]
              if 8 * MiB <= p["message_bytes"] <= 1024 * MiB]
    assert len(points) == 8 and points[-1][1] < 0.98 * top * 8  # 1 GiB is still below the top
    curves = system_curves(_system(gpus, cluster))
    fit = fitted_plateau(curves, _reading(points, gpus, 8))
    assert fit.plateau_gbps / 8 == pytest.approx(top, rel=1e-3) and fit.spread_pct < 0.1


def _bench(curves, plateau, per_node=8, nnodes=1, sizes=SIZES) -> dict:
    world = per_node * nnodes
    results = [{"op": "all_reduce", "size_bytes": s, "time_s": 1e-3, "algbw_gbps": 1.0,
                "busbw_gbps": _busbw(curves, plateau, s, world, per_node)} for s in sizes]
    largest = results[-1]["busbw_gbps"]
    return {"nproc": world, "nnodes": nnodes, "gpus_per_node": per_node, "backend": "nccl", "results": results,
            "busbw_gbps": {"intranode": largest if nnodes == 1 else 0.8 * 3840.0,
                           "internode": largest if nnodes > 1 else None}}


def test_a_bench_report_plans_as_the_plateau_of_all_its_sizes():
    system = _system(16)
    curves = system_curves(system)
    report = json.loads(json.dumps(_bench(curves, 2720.0, nnodes=2)))
    where = readings(report)
    assert len(where["internode"].points) == len(SIZES) and where["intranode"].points == ()
    values = {k: v for k, v in report["busbw_gbps"].items()}
    measured, note = with_measured(system, values, where)
    assert measured.measured_internode_busbw_gbps == pytest.approx(2720.0, rel=1e-6)
    assert "2,720 Gbps between nodes (plateau fitted to 6 sizes, 1 MiB-1 GiB over 16 ranks: each size's own " \
           "plateau within 0.0% of it; " in note, note


def test_old_files_read_as_before():
    system = _system(8)
    curves = system_curves(system)
    # a busbw alone: the plateau itself
    plain, said = with_measured(system, {"intranode": 900.0, "internode": None}, readings({"busbw_gbps": {"intranode": 900.0}}))
    assert plain.measured_intranode_busbw_gbps == 900.0 and said == "900 Gbps within a node"
    # one size: that size's plateau, the note as it was
    one = _bench(curves, 3840.0, sizes=(64 * MiB,))
    r = readings(one)["intranode"]
    assert r.points == ()
    measured, note = with_measured(system, one["busbw_gbps"], readings(one))
    assert measured.measured_intranode_busbw_gbps == plateau_gbps(curves, r) == pytest.approx(3840.0, rel=1e-6)
    assert note.startswith("3,840 Gbps within a node (plateau inferred from 2,955 Gbps measured at 64 MiB over "
                           "8 ranks: curve share 0.77 there)"), note
