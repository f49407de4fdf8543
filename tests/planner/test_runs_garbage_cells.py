"""Cells validation/runs_fuzz.py found read into a traceback or scored although garbage: each row is now
refused naming its column (or kept and not scored, for an impossible measured speed), and no real row of
validation/data is refused by these checks."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from hardware.catalog import load_catalog
from planner.errors import PlanError
from planner.runs import load_runs
from tests.planner.test_run_spellings import BASE, COLUMNS

DATA = Path(__file__).parents[2] / "validation" / "data"
CAT = load_catalog()


def _load(tmp_path, **cells):
    path = tmp_path / "runs.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS + [c for c in cells if c not in COLUMNS])
        w.writeheader()
        w.writerow({**BASE, **cells})
    missed: list = []
    return load_runs(path, CAT, missed), missed


def _refused(tmp_path, column: str, value: str) -> str:
    runs, missed = _load(tmp_path, **{column: value})
    assert not runs and len(missed) == 1, (runs, missed)
    assert missed[0].field == column, missed[0]
    return missed[0].reason


@pytest.mark.parametrize("column, value", [
    ("gpus_per_node", "1e400"),  # float() gives inf: int(inf) was an OverflowError traceback
    ("measured_iter_time_s", "1e309"),  # inf: Infinity in --json
    ("seq_len", "-1e400"),
])
def test_non_finite_cells_are_refused(tmp_path, column, value):
    assert "not a finite number" in _refused(tmp_path, column, value)


@pytest.mark.parametrize("column, value", [
    ("n_gpus", "1e300"),  # an OverflowError in planner/layout.py
    ("gpus_per_node", "1e30"),  # silently clamped to the GPU count, then scored
    ("dp", "99999999999999999999"),  # noted as a mismatch and scored
    ("vocab", "1e12"),
    ("measured_tflops_per_gpu", "1e300"),  # 1e300 x 1e12 overflowed: a ZeroDivisionError in plan calibrate
    ("measured_mfu", "150"),  # a percentage above 100
])
def test_cells_above_the_planners_bounds_are_refused(tmp_path, column, value):
    assert "too large" in _refused(tmp_path, column, value)


def test_a_cell_too_small_for_any_run_is_refused(tmp_path):
    """'1e-310' days per 100B tokens made an infinite speed."""
    assert "too small" in _refused(tmp_path, "days_per_100B_tokens", "1e-310")


@pytest.mark.parametrize("column, value", [
    ("measured_mfu", "-1e400"),  # beside a measured speed: never read, the row was scored
    ("measured_tflops_per_gpu", "abc"),
    ("days_per_100B_tokens", "-3"),
])
def test_garbage_in_a_cell_another_column_overrides_is_refused(tmp_path, column, value):
    _refused(tmp_path, column, value)


def test_garbage_shape_cell_on_a_preset_row_is_refused(tmp_path):
    """A preset's own shape wins over the row's columns: a garbage vocab there was dropped unseen."""
    assert "llama2-7b" in CAT.models
    _, missed = _load(tmp_path, model_name="llama2-7b", vocab="-32000")
    assert [m.field for m in missed] == ["vocab"]


@pytest.mark.parametrize("cells", [
    dict(measured_tokens_per_sec_per_gpu="", measured_iter_time_s="3500"),  # 3.5 s written in ms as seconds
    dict(measured_iter_time_s="1e300"),  # beside the speed: the iteration time went into the iteration MAPE
    dict(days_per_100B_tokens="1e30"),  # beside the speed: never read
])
def test_speed_under_a_thousandth_of_the_peak_is_kept_not_scored(tmp_path, cells):
    runs, missed = _load(tmp_path, **cells)
    assert not missed and len(runs) == 1
    assert runs[0].inconsistent and "below 0.1%" in runs[0].inconsistent, runs[0].inconsistent
    assert not runs[0].scored


def test_peak_memory_above_twice_the_gpus_is_refused(tmp_path):
    reason = _refused(tmp_path, "measured_peak_mem_GB", "999999999999")
    assert "more than 2x" in reason and "80" in reason, reason
    runs, missed = _load(tmp_path, measured_peak_mem_GB="79.5")  # a full GPU is a peak, not garbage
    assert runs and not missed


@pytest.mark.parametrize("name, rows", [("published_dev.csv", 249), ("seed_runs.csv", 83)])
def test_no_real_row_is_refused(name, rows):
    missed: list = []
    runs = load_runs(DATA / name, CAT, missed)
    assert not missed and len(runs) == rows
    assert not [r.id for r in runs if r.inconsistent and "below 0.1%" in r.inconsistent]


def test_a_check_across_columns_names_its_column(tmp_path):
    """ModelSpec's 'hidden must be divisible by n_heads' has no location: it was field 'row' and 'Value error, ...';
    without a not-predicted list (plan calibrate) it was 'input: Value error, ...'."""
    reason = _refused(tmp_path, "hidden", "100")
    assert reason == "hidden (100) must be divisible by n_heads (32)", reason
    path = tmp_path / "runs.csv"
    with pytest.raises(PlanError) as e:
        load_runs(path, CAT)
    assert e.value.field == "hidden" and e.value.message.startswith("row probe_001: hidden (100)"), e.value
