"""`plan estimate`'s numeric bounds say why, in `plan tune`'s one-line form (planner/bounds.py, planner/units.at_most):
they said "Input should be less than or equal to 100000000" (a scenario field) or typer's "Invalid value for
'--within-days'"; --tokens 1e40, --internode-gbps 1e30 and --runtime-overhead-gib 1e9 were taken."""

import pytest
from typer.testing import CliRunner

from plan_cli.main import app


@pytest.mark.parametrize("flags,name,limit", [
    (["--gpus", "99999999"], "gpus", "at most 1,000,000, got 99,999,999"),
    (["--seq-len", "999999999"], "seq_len", "at most 100,000,000, got 999,999,999"),
    (["--global-batch", "99999999999"], "global_batch", "at most 1,000,000,000"),
    (["--global-batch-tokens", "1e20"], "global_batch_tokens", "at most 1T (1e12), got 1e+20"),
    (["--tokens", "1e40"], "tokens", "at most 10,000T (1e16), got 1e+40"),
    (["--tp", "4096"], "tp", "at most 1,024, got 4,096"),
    (["--micro-batch", "9999999"], "micro_batch", "at most 1,000,000"),
    (["--gpus-per-node", "100000"], "gpus_per_node", "at most 1,024"),
    (["--internode-gbps", "1e30"], "internode_gbps", "at most 100,000,000 Gbps, got 1e+30 Gbps"),
    (["--price-per-gpu-hour", "1e9"], "price_per_gpu_hour", "at most 1,000,000"),
    (["--runtime-overhead-gib", "1e9"], "runtime_overhead_gib", "at most 1,024 GiB"),
    (["--checkpoint-fraction", "2"], "checkpoint_fraction", "at most 1, got 2"),
    (["--tokens", "1T", "--gpus", "8:64", "--within-days", "1e9"], "within_days", "at most 36,500, got 1,000,000,000"),
])
def test_an_absurd_value_is_one_line_with_the_limit_and_why(flags, name, limit):
    r = CliRunner().invoke(app, ["estimate", *flags])
    assert r.exit_code == 2, r.output
    line = r.output.strip()
    assert "\n" not in line and line.startswith(f"error: {name}: {limit}"), line
    assert len(line.split(": ")) >= 4 and "less than or equal" not in line  # the why after the limit


def test_within_days_below_its_floor_is_still_refused():
    r = CliRunner().invoke(app, ["estimate", "--tokens", "1T", "--gpus", "8:64", "--within-days", "0"])
    assert r.exit_code == 2 and r.output.startswith("error: within_days: ") and "Invalid value" not in r.output


def test_the_limits_themselves_are_taken():
    from planner.scenario import Scenario
    from planner.settings import Settings

    s = Scenario(gpus=1_000_000, seq_len=100_000_000, tokens="10000T", global_batch_tokens="1T",
                 internode_gbps=1e8, tp=1024, checkpoint_fraction=1)
    assert s.tokens == 1e16 and s.global_batch_tokens == 10**12 and s.gpus == 1_000_000
    assert Settings(runtime_overhead_gib=1024).runtime_overhead_gib == 1024


def test_explain_with_csv_is_refused():
    """--explain --csv printed the explain table and ignored --csv without a word."""
    r = CliRunner().invoke(app, ["estimate", "--gpus", "8", "--explain", "--csv"])
    assert r.exit_code == 2 and r.output.startswith("error: csv: --explain prints one plan's breakdown"), r.output
