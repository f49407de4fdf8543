import pytest

from planner.errors import PlanError
from planner.scenario import ExecutionPlan, Estimate, MemoryBreakdown, StepTimeBreakdown

pytest.importorskip("matplotlib")
from plan_cli.plots import plot_breakdown, plot_sweep  # noqa: E402


def test_sweep_png_and_svg(tmp_path):
    pts = [{"gpus": 8, "days": 40.0, "plan": ExecutionPlan(dp=8, sharding="zero1")},
           {"gpus": 16, "days": 21.0, "label": "zero1 mb2xga64"}, {"gpus": 32, "days": None}]
    png = plot_sweep(pts, tmp_path / "s.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = plot_sweep(pts, tmp_path / "s.svg")
    assert b"<svg" in svg.read_bytes()[:500]
    with pytest.raises(PlanError, match="png or .svg"):
        plot_sweep(pts, tmp_path / "s.pdf")
    with pytest.raises(PlanError, match="nothing to plot"):
        plot_sweep([{"gpus": 8, "days": None}], tmp_path / "n.png")


def test_breakdown(tmp_path):
    mem = MemoryBreakdown(weights_bytes=1e9, grads_bytes=1e9, optimizer_bytes=2e9, activations_bytes=3e9,
                          comm_buffers_bytes=1e8, runtime_bytes=1e9, fragmentation_bytes=5e8, total_bytes=8.6e9,
                          capacity_bytes=80e9, host_bytes_per_node=1e10, host_capacity_bytes_per_node=1e12)
    t = StepTimeBreakdown(step_time_s=2, compute_s=1.5, comm_exposed_s=0.3, bubble_s=0.2, offload_s=0, bottleneck="compute")
    ests = [Estimate(plan=ExecutionPlan(), memory=mem, time=t, fits=True),
            Estimate(plan=ExecutionPlan(sharding="zero3"), memory=mem, time=None, fits=True)]
    out = plot_breakdown(ests, tmp_path / "b.png")
    assert out.stat().st_size > 1000


@pytest.mark.parametrize("args, line", [
    (["--gpus", "8", "--plot", "out.txt"], "error: plot: out.txt: use a .png or .svg file name"),
    (["--gpus", "8:16", "--plot", "days.png"], "error: plot: a sweep plot shows days to train: add --tokens"),
])
def test_a_plot_it_cannot_draw_is_refused_before_the_search(tmp_path, args, line):
    """--plot out.txt (or a sweep plot without --tokens) printed the whole table, then refused, exit 2: now the
    one line alone, before the search."""
    from typer.testing import CliRunner

    from plan_cli.main import app

    r = CliRunner().invoke(app, ["estimate", "--model", "7b", *args])
    assert r.exit_code == 2 and r.output.strip().startswith(line), r.output
