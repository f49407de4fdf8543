"""plan_cli/sweep_view.py: the sweep's header names the cluster's GPUs per node, not the first count's (a sweep
from 1 GPU read 'dgx-a100, 1/node')."""

from typer.testing import CliRunner

from plan_cli.main import app


def test_a_sweep_from_one_gpu_says_the_clusters_node():
    r = CliRunner().invoke(app, ["estimate", "--model", "7b", "--gpus", "1:8"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[1] == "NVIDIA A100-SXM4-80GB (dgx-a100, 8/node, 1600 Gbps between nodes)"
