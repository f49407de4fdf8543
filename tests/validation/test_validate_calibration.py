from pathlib import Path

import pytest

from validation import validate_calibration as vc
from validation.rows import DEFAULT_DATA_DIR, load_cases


def _need_data():
    if not (Path(DEFAULT_DATA_DIR) / "seed_runs.csv").exists():
        pytest.skip(f"calibration data not found at {DEFAULT_DATA_DIR} (validation/data)")


def test_script_prints_rows_and_mape(capsys):
    _need_data()
    assert vc.main(["--calibrated"]) == 0
    out = capsys.readouterr().out
    assert "s003-16" in out and "megatron_sc21_010" in out
    for source in ("seed002", "seed003", "published:megatron_sc21", "published:megatron_korthikanti"):
        assert source in out
    assert "MAPE after per-seed calibration" in out


def test_every_row_with_a_layout_is_evaluated():
    _need_data()
    cases, skipped = load_cases(DEFAULT_DATA_DIR)
    rows = vc.evaluate_cases(cases)
    assert len(rows) + len(skipped) == 83 + 32
    assert all(r["pred_tokens_per_s"] > 0 for r in rows)
    mape = vc.mape_by_source(rows)
    assert mape["published:megatron_korthikanti"]["mape_pct"] < 25


def test_calibration_fitted_on_seed_rows_lowers_their_error():
    _need_data()
    cases, _ = load_cases(DEFAULT_DATA_DIR)
    cal = vc.fit_seed_calibration(cases)
    before = vc.mape_by_source(vc.evaluate_cases(cases))
    after = vc.mape_by_source(vc.evaluate_cases(cases, cal))
    assert after["seed003"]["mape_pct"] < before["seed003"]["mape_pct"]
    # the published rows are never fitted
    assert after["published:megatron_sc21"] == before["published:megatron_sc21"]


def test_missing_data_dir_is_a_clear_error(tmp_path, capsys):
    assert vc.main(["--data-dir", str(tmp_path)]) == 2
    assert "no seed_runs.csv" in capsys.readouterr().err
