"""`plan estimate`'s table in a real terminal width: the default fits 100 columns (layout,
sharding/offload/ckpt, mb x ga, GiB/GPU, tokens/s, MFU, days), numbers are never cut (also at
80 columns, where only the layout wraps), `--wide` shows every column at full width."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

PLAN = [sys.executable, "-m", "plan_cli.main", "estimate"]
SCENARIOS = {
    "7b-48": ["--model", "7b", "--gpus", "48", "--tokens", "100B", "--price-per-gpu-hour", "2"],
    "70b-64-h100": ["--model", "llama2-70b", "--gpus", "64", "--cluster", "dgx-h100", "--tokens", "1T"],
}


def _run(args: list[str], columns: int) -> str:
    env = os.environ | {"COLUMNS": str(columns), "NO_COLOR": "1"}
    r = subprocess.run(PLAN + args, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _report(args: list[str]) -> dict:
    return json.loads(_run(args + ["--json"], 200))


def _numbers(e: dict) -> list[str]:
    """The cells of one fitting plan as the default table prints them."""
    p, m, perf = e["plan"], e["memory"], e["performance"]
    need = f"{m['required_bytes'] / 2**30:.1f}/{m['capacity_bytes'] / 2**30:.0f}" + ("*" if m["tight"] else "")
    return [f"{p['micro_batch']} x {p['grad_accum']}", need,
            f"{perf['tokens_per_s']:,.0f}", f"{perf['mfu']:.0%}", f"{perf['days']:.1f}"]


@pytest.mark.parametrize("columns", [100, 80])
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_default_table_fits_and_numbers_are_whole(name, columns):
    args = SCENARIOS[name]
    out = _run(args, columns)
    report = _report(args)
    lines = out.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= columns, "\n".join(l for l in lines if len(l.rstrip()) > columns)
    assert "…" not in out and "..." not in out
    header = next(line for line in lines if "shard/offload/ckpt" in line)
    for col in ("#", "layout", "mb x ga", "GiB/GPU", "tokens/s", "MFU", "days"):
        assert col in header, header
    fitting = [e for e in report["results"] if e["fits"]]
    assert len(fitting) == 10
    table = lines[lines.index(header):lines.index("Rejected:")] if "Rejected:" in lines else lines[lines.index(header):]
    rows = [line for line in table if re.match(r"^\s*\d+\s{2,}\S", line)]
    assert len(rows) == 10, out
    for rank, (row, e) in enumerate(zip(rows, fitting), 1):
        assert re.match(rf"^\s*{rank}\s", row), row
        for cell in _numbers(e):  # each number whole, on its plan's first line
            assert re.search(rf"(^|\s){re.escape(cell)}(\s|$)", row), (cell, row)
        p = e["plan"]
        from plan_cli.estimate_view import _SHORT

        assert _SHORT.get(p["sharding"], p["sharding"]).split("_")[0] in row and f"dp{p['dp']}" in out


def test_wide_table_has_every_column_uncut():
    args = SCENARIOS["7b-48"]
    out = _run(args + ["--wide"], 100)
    report = _report(args)
    header = next(line for line in out.splitlines() if "TFLOPs/GPU" in line)
    for col in ("layout", "sharding", "offload", "ckpt", "mb", "ga", "batch", "GiB/GPU", "w/g/opt/act",
                "host GiB/node", "tokens/s", "MFU", "step s", "bottleneck", "days", "cost"):
        assert re.search(rf"(^|\s){re.escape(col)}(\s|$)", header), (col, header)
    assert len(header.rstrip()) > 100 and "…" not in out
    best = report["results"][0]
    row = next(line for line in out.splitlines() if re.match(r"^\s*1\s", line))
    for cell in (f"{best['performance']['tokens_per_s']:,.0f}", f"{best['time']['step_time_s']:.2f}",
                 f"{best['performance']['cost']:,.0f}", best["time"]["bottleneck"]):
        assert cell in row, (cell, row)


def test_tiny_parameter_count_in_millions():
    out = _run(["--model", "tiny", "--gpus", "2", "--gpu", "a100-80gb", "--top", "1"], 100)
    assert re.search(r"tiny: 0\.\d+M params", out) and "0.000B" not in out, out.splitlines()[0]
