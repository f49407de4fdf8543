"""`plan tune` errors name the option the user typed (--budget), not the config field (budget_s)."""

import pytest
from typer.testing import CliRunner

from plan_cli.main import app


@pytest.mark.parametrize("flags,name", [
    (["--budget", "0s"], "budget"),
    (["--budget", "abc"], "budget"),
    (["--budget", "1m", "--trial-timeout", "xyz"], "trial_timeout"),
])
def test_a_refused_value_names_the_option(tmp_path, flags, name):
    r = CliRunner().invoke(app, ["tune", "--model", "tiny", "--gpus", "2", "--storage", f"sqlite:///{tmp_path}/s.db",
                                 *flags])
    assert r.exit_code == 2
    assert f"error: {name}: " in r.output and "_s:" not in r.output


@pytest.mark.parametrize("flags,name,limit", [
    (["--budget", "99999999h"], "budget", "at most 7d (604,800 s), got 359,999,996,400 s"),
    (["--budget", "1m", "--top-k", "100000000"], "top_k", "at most 1,000, got 100,000,000"),
    (["--budget", "1m", "--max-trials", "100000000"], "max_trials", "at most 100,000"),
    (["--budget", "1m", "--steps", "1000000"], "steps", "at most 10,000"),
    (["--budget", "1m", "--global-batch", "100000000000"], "global_batch", "at most 16,777,216"),
    (["--budget", "1m", "--seq-len", "99999999"], "seq_len", "at most 16,777,216"),
    (["--budget", "1m", "--trial-timeout", "2d"], "trial_timeout", "at most 1d (86,400 s)"),
    (["--budget", "1m", "--remeasure-rounds", "1000"], "remeasure_rounds", "at most 100"),
])
def test_an_absurd_value_is_one_line_with_the_limit_and_why(tmp_path, flags, name, limit):
    """Valid but absurd values were taken (--budget 99999999h, --top-k 1e8): now one line naming the option,
    the limit and why (a study resumes; a trial times a few steps ...), exit 2, before anything is measured."""
    r = CliRunner().invoke(app, ["tune", "--model", "tiny", "--gpus", "2", "--storage", f"sqlite:///{tmp_path}/s.db",
                                 *flags])
    assert r.exit_code == 2, r.output
    line = r.output.strip()
    assert "\n" not in line and line.startswith(f"error: {name}: {limit}") and len(line.split(": ")) >= 4
    assert not (tmp_path / "s.db").exists()


def test_the_limits_themselves_are_taken():
    from tuner.config import TuneConfig

    c = TuneConfig(model="tiny", budget_s="7d", top_k=1000, max_trials=100_000, steps=10_000, global_batch=1 << 24,
                   seq_len=1 << 24, trial_timeout_s="1d", remeasure_rounds=100)
    assert c.budget_s == 7 * 86400 and c.top_k == 1000


def test_infeasible_margin_has_an_upper_bound(tmp_path):
    """--infeasible-margin 1e9 was taken (every predicted memory miss launched, as --explore-infeasible does):
    one line with the limit and why, exit 2, before any study."""
    r = CliRunner().invoke(app, ["tune", "--model", "tiny", "--gpus", "2", "--storage", f"sqlite:///{tmp_path}/s.db",
                                 "--budget", "1m", "--infeasible-margin", "1e9"])
    assert r.exit_code == 2, r.output
    assert r.output.strip().startswith("error: infeasible_margin: at most 1 (100% over), got 1,000,000,000: ")
    assert "--explore-infeasible" in r.output and not (tmp_path / "s.db").exists()


@pytest.mark.parametrize("path", ["bundled.toml", "mycat/bundled.toml", "mycat/stacks/hf.toml"])
def test_stack_out_is_where_a_catalog_reads_it(tmp_path, path):
    """--stack-out bundled.toml (no stacks/ folder) ran the study and wrote a profile no --catalog DIR reads
    (validation/opts_fuzz.py, seed 33): refused first, naming the place it must be."""
    r = CliRunner().invoke(app, ["tune", "--model", "tiny", "--gpus", "2", "--storage", f"sqlite:///{tmp_path}/s.db",
                                 "--budget", "1m", "--stack-out", str(tmp_path / path)])
    assert r.exit_code == 2, r.output
    assert r.output.strip().startswith("error: stack_out: ") and "DIR/stacks/bundled.toml" in r.output
    assert not (tmp_path / "s.db").exists()
