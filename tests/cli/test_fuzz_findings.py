"""Inputs validation/cli_fuzz.py found ending in something other than a result or one error line: each is
one line naming the field with exit code 2, and no RuntimeWarning (a NaN or inf inside) on stderr."""

from __future__ import annotations

import warnings

import pytest
from typer.testing import CliRunner

from plan_cli.main import app

runner = CliRunner()


def error_line(args: list[str]) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # a warning from an earlier test must not hide this one's
        res = runner.invoke(app, args, env={"COLUMNS": "400"})
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (res.exit_code, res.stderr)
    return lines[0]


def test_cost_at_price_zero_says_rank_by_days():
    """Every plan costs 0 at price 0: ranking by cost divided by zero (a RuntimeWarning) and ranked by nothing."""
    line = error_line(["estimate", "--model", "tiny", "--gpus", "1", "--objective", "cost", "--tokens", "1B",
                       "--price-per-gpu-hour", "0"])
    assert line.startswith("error: objective: cost is 0 for every plan at price_per_gpu_hour 0"), line
    assert "--objective days" in line, line


@pytest.mark.parametrize("flag, value", [
    ("--tokens", "1e400"),  # parsed as inf: `days inf` in the table, exit 0
    ("--internode-gbps", "inf"),
    ("--price-per-gpu-hour", "inf"),
    ("--runtime-overhead-gib", "inf"),  # "nothing fits", exit 3
])
def test_non_finite_numbers_are_bad_input(flag, value):
    line = error_line(["estimate", "--model", "tiny", "--gpus", "8", "--tokens", "1B", flag, value])
    field = flag[2:].replace("-", "_")
    assert line.startswith(f"error: {field}: "), line


@pytest.mark.parametrize("flag, value", [
    ("--internode-gbps", "1e-300"),  # 1/bandwidth overflowed: NaN communication times, exit 0
    ("--price-per-gpu-hour", "1e308"),  # the cost overflowed with a RuntimeWarning
])
def test_numbers_past_what_the_math_can_carry_are_bad_input(flag, value):
    line = error_line(["estimate", "--model", "tiny", "--gpus", "8", "--tokens", "1B", flag, value])
    assert line.startswith(f"error: {flag[2:].replace('-', '_')}: "), line
