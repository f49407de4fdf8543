"""`plan tune` inputs validation/opts_fuzz.py found getting past the checks: an output path that fails only
after the study's whole budget, an Optuna traceback, a silently replaced option. Each is now refused before
the study opens (no storage, no network measurement, no trial): one line naming the option, exit code 2."""

from __future__ import annotations

import time

import pytest
from typer.testing import CliRunner

from plan_cli.main import app
from planner.errors import PlanError
from tuner.space import parse_choices

runner = CliRunner()


@pytest.fixture
def places(tmp_path):
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x\n")
    return {"folder": str(tmp_path / "folder"), "file": str(tmp_path / "file"), "db": f"sqlite:///{tmp_path}/t.db"}


@pytest.mark.parametrize("args, field", [
    (["--seed", "-1"], "seed"),  # optuna's ValueError traceback
    (["--seed", "4294967296"], "seed"),
    (["--csv", "{folder}"], "csv"),  # written after the budget: an IsADirectoryError then
    (["--csv", "{file}/trials.csv"], "csv"),
    (["--calibration-out", "{folder}"], "calibration_out"),
    (["--stack-out", "{folder}"], "stack_out"),
    (["--stack-out", "out/stacks/other.toml"], "stack_out"),
    (["--workdir", "{file}"], "workdir"),  # a NotADirectoryError at the first trial
    (["--calibration", "{folder}"], "calibration"),  # an IsADirectoryError
    (["--gpu", "nope"], "gpu"),  # ignored on a CPU machine: a typo went unseen
    (["--cluster", ""], "cluster"),
    (["--storage", ""], "storage"),  # silently the default storage
    (["--study", " "], "study"),
    (["--device-memory-gib", "1e308"], "device_memory_gib"),  # overflowed RLIMIT_AS in the rank
    (["--infeasible-margin", "inf"], "infeasible_margin"),
    (["--steps", "99999999999999999999"], "steps"),  # every trial a bad_config, exit 0 with no trial
    (["--choices", "grad_accum=99999999999999"], "grad_accum"),
])
def test_refused_before_the_study(args, field, places):
    args = [a.format(**places) for a in args]
    t0 = time.perf_counter()
    res = runner.invoke(app, ["tune", "--model", "tiny", "--gpus", "2", "--budget", "1m", "--no-network-bench",
                              "--no-progress", "--storage", places["db"], *args], env={"COLUMNS": "400"})
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {field}"), (res.exit_code, res.stderr)
    assert time.perf_counter() - t0 < 10


def test_choices_within_the_plans_bounds():
    assert parse_choices(["tp=1,1024", "micro_batch=1000000"]) == {"tp": (1, 1024), "micro_batch": (1_000_000,)}
    with pytest.raises(PlanError) as e:
        parse_choices(["tp=2048"])
    assert e.value.field == "tp" and "at most 1,024" in e.value.message


def test_tune_config_bounds_the_infeasible_margin_as_the_cli_does():
    """The margin's bound lives on TuneConfig (planner/bounds.py), not only on the CLI option: the tuner's API and
    the service build a TuneConfig and get the same one-line reason."""
    from pydantic import ValidationError

    from tuner.config import TuneConfig

    ok = TuneConfig(model="tiny", budget_s=60, infeasible_margin=1.0)
    assert ok.infeasible_margin == 1.0
    with pytest.raises(ValidationError, match=r"at most 1 \(100% over\), got 1,000,000,000"):
        TuneConfig(model="tiny", budget_s=60, infeasible_margin=1e9)
