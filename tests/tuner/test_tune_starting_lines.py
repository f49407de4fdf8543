"""`plan tune` in a terminal says what it does before its first trial ends (the page's "starting" phase), on stderr;
--no-progress (and --json) keep stderr free of it."""

import pytest

from tests.tuner.tune_helpers import FAST, plan


@pytest.mark.slow
def test_tune_prints_its_starting_steps(tmp_path):
    args = [a for a in FAST if a != "--no-progress"]
    r = plan(["tune", *args, "--max-trials", "1", "--budget", "3m", "--storage", f"sqlite:///{tmp_path}/x.db",
              "--study", "x", "--remeasure-rounds", "0"], tmp_path)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("starting: ")]
    assert lines[0] == "starting: opening the study", r.stderr
    assert any(ln.startswith("starting: its first trial #0 (ddp") for ln in lines), r.stderr
    assert len(lines) == len(set(lines))
    quiet = plan(["tune", *FAST, "--max-trials", "1", "--budget", "3m", "--storage", f"sqlite:///{tmp_path}/y.db",
                  "--study", "y", "--remeasure-rounds", "0"], tmp_path)
    assert "starting: " not in quiet.stderr
