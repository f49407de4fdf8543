"""Golden tests: the published Megatron-LM runs (published_dev.csv), never fitted to.

Tolerance (stated in the README): each row's predicted iteration time within 35% of the
measured one, and the MAPE of tokens/s per published source at most 25%.
"""

from pathlib import Path

import numpy as np
import pytest

from planner.layout import Layout
from planner.settings import Settings
from planner.throughput import performance

ROW_TOLERANCE = 0.35
SOURCE_MAPE = 0.25


def _cases():
    from validation.rows import DEFAULT_DATA_DIR, load_cases

    if not (Path(DEFAULT_DATA_DIR) / "published_dev.csv").exists():
        pytest.skip(f"calibration data not found at {DEFAULT_DATA_DIR} (validation/data)")
    cases, _ = load_cases(DEFAULT_DATA_DIR)
    return [c for c in cases if c.source.startswith("published") and c.scored]


def test_published_iteration_times_within_tolerance():
    cases = _cases()
    assert len(cases) >= 25
    errors: dict[str, list[float]] = {}
    bad = []
    for c in cases:
        perf = performance(c.spec, Layout.from_plan(c.plan), c.system, Settings())
        pred_it = float(perf["step_time_s"][0])
        rel = pred_it / c.measured_iter_time_s - 1
        if abs(rel) > ROW_TOLERANCE:
            bad.append(f"{c.id}: predicted {pred_it:.3g} s vs measured {c.measured_iter_time_s:.3g} s")
        tps_err = abs(float(perf["tokens_per_s"][0]) / c.measured_tokens_per_s - 1)
        errors.setdefault(c.source, []).append(tps_err)
    assert not bad, bad
    for source, errs in errors.items():
        assert np.mean(errs) <= SOURCE_MAPE, (source, np.mean(errs))
