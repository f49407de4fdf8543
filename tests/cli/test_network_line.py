"""`plan estimate` answers "is my network the bottleneck?" under its table, in --explain and in --wide's columns
(planner/network_need.py), with the numbers its --json carries."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PLAN = [sys.executable, "-m", "plan_cli.main", "estimate"]
SLOW = ["--model", "13b", "--gpus", "64", "--internode-gbps", "100", "--top", "3"]


def _run(args: list[str], columns: int = 100) -> str:
    env = os.environ | {"COLUMNS": str(columns), "NO_COLOR": "1"}
    r = subprocess.run(PLAN + args, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_a_slow_network_is_named_with_its_cost_and_the_bandwidth_needed():
    best = json.loads(_run(SLOW + ["--json"]))["results"][0]["performance"]
    assert best["network_gbps_needed"] > 100 and best["network_share"] > 0.05
    line = next(ln for ln in _run(SLOW, 200).splitlines() if ln.startswith("Network:"))
    assert (f"the 100 Gbps between nodes costs plan #1 {best['network_share']:.0%} of its step; "
            f"{best['network_gbps_needed']:,.0f} Gbps per node would bring it within 1% of an unlimited network") in line


def test_a_fast_network_is_said_not_to_be_the_bottleneck():
    out = _run(["--model", "13b", "--gpus", "64", "--top", "3"], 200)
    assert "Network: not the bottleneck: the 1,600 Gbps between nodes costs plan #1" in out


def test_one_node_prints_no_network_line():
    assert "Network:" not in _run(["--model", "1.3b", "--gpus", "8", "--top", "3"])


def test_explain_and_wide_carry_it_too():
    explain = _run(SLOW + ["--explain", "--rank", "2"], 200)
    assert "network_share" in explain and "dp_comm_s" in explain and "tp_comm_s" in explain
    assert any(ln.startswith("Network:") and "plan #2" in ln for ln in explain.splitlines())
    wide = _run(SLOW + ["--wide"], 300)
    assert "net %" in wide and "net Gbps" in wide


def test_a_measured_network_is_judged_in_its_own_unit(tmp_path):
    """--network-from gives a measured busbw: what is needed is said as a busbw too (was the cluster's 1,600 Gbps
    line rate x the multiplier, 9,452 Gbps, beside a measured 80)."""
    net = tmp_path / "net.json"
    net.write_text('{"busbw_gbps": {"intranode": 1500.0, "internode": 80.0}}')
    args = ["--model", "13b", "--gpus", "64", "--top", "3", "--network-from", str(net)]
    best = json.loads(_run(args + ["--json"]))["results"][0]["performance"]
    out = _run(args, 200)
    assert "measured all-reduce busbw (--network-from): 1,500 Gbps within a node, 80 Gbps between nodes" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("Network:"))
    assert line.startswith(f"Network: the measured 80 Gbps busbw between nodes costs plan #1 "
                           f"{best['network_share']:.0%} of its step; {best['network_gbps_needed']:,.0f} Gbps busbw")
    assert 80 < best["network_gbps_needed"] < 1600
