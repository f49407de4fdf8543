"""The rendezvous port race, reproduced for real: another process holds the port a launch was
given (what happens when a port picked free is taken before torch binds it). Before, torch's
c10d rendezvous fell back to being a client of the holder and failed after its 60 s read
timeout; now a single node launches again on a port the OS picks, and several nodes (which
must meet at the agreed port) get a one-line error naming it. `plan allreduce-bench` is the
tuner's first step (tuner/network.py) and runs the same launcher as `plan train`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.network import measure_busbw

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def _env(**extra) -> dict:
    e = dict(os.environ, OMP_NUM_THREADS="1", **extra)
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    return e


@pytest.fixture
def held_port():
    """A port another socket listens on (and never answers): the lost race."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        yield s.getsockname()[1]


def bench(args: list[str], tmp_path: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "plan_cli.main", "allreduce-bench", "--sizes", "1M",
                           "--json", str(tmp_path / "bench.json"), *args],
                          env=_env(**env), capture_output=True, text=True, timeout=300)


def test_single_node_launch_whose_port_is_held_runs_on_another(held_port, tmp_path):
    r = bench(["--nproc", "2", "--rdzv-endpoint", f"127.0.0.1:{held_port}"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"rendezvous 127.0.0.1:{held_port}: port in use" in r.stderr
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["nproc"] == 2 and report["busbw_gbps"]["intranode"] > 0


def test_multi_node_launch_whose_port_is_held_says_so(held_port, tmp_path):
    r = bench(["--nproc", "1", "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", f"127.0.0.1:{held_port}"],
              tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr[-3000:]
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert err == [f"error: rdzv_endpoint: 127.0.0.1:{held_port}: port {held_port} is already in use on this node "
                   "(give every node a free port)"], r.stderr[-3000:]
    assert not (tmp_path / "bench.json").exists()


def test_a_training_node_whose_agreed_port_is_held_is_a_bad_config(held_port, tmp_path):
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "trainer", "--model", "tiny", "--steps", "3", "--nproc", "1",
                        "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", f"127.0.0.1:{held_port}",
                        "--json", str(out)], env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stdout + r.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["status"] == "bad_config"
    assert result["error"] == f"rdzv_endpoint: 127.0.0.1:{held_port}: port {held_port} is already in use on this node " \
                              "(give every node a free port)"


def test_a_bench_that_fails_twice_reports_both_attempts(monkeypatch):
    """gloo on a network interface that does not exist: every attempt fails for real."""
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "no-such-if0")
    busbw, note = measure_busbw(2, timeout_s=240)
    assert busbw is None
    first, _, second = note.partition("; attempt 2: ")
    # the bench's one line (trainer/ranks.py: a failed rank is a PlanError, exit 2) names the rank's own error
    assert first.startswith("attempt 1: allreduce-bench failed (exit 2): error: ranks: a rank failed: ") and second, note
    assert second.startswith("allreduce-bench failed (exit 2): ") and "Unable to find address" in first, note
