"""Seed rows repeating one stated configuration are scored against the spread of their repeats
(validation/replicates.py), on the real seed 002 rows."""

import pytest

from planner.runs import load_runs
from validation.fit_profiles import DATA, SEED_BAND
from validation.replicates import inside_band, replicate_groups


@pytest.fixture(scope="module")
def runs():
    return [r for r in load_runs(DATA / "seed_runs.csv") if r.id.startswith("s002-")]


def test_the_52b_configuration_measured_on_four_days_is_one_group(runs):
    groups = replicate_groups(runs)
    assert sorted(r.id for r in groups["s002-22"]) == ["s002-22", "s002-23", "s002-24", "s002-25"]
    # micro batch 6 on the same table is another configuration; a different table never groups
    assert [r.id for r in groups["s002-26"]] == ["s002-26"]
    assert [r.id for r in groups["s002-31"]] == ["s002-31"]


def test_a_prediction_near_the_fast_repeats_counts_for_the_slow_repeats(runs):
    by = {r.id: r for r in runs}
    fast = by["s002-24"].measured_tokens_per_s_per_gpu
    predicted = 1.1 * fast  # 10% above the fastest day: inside for every day's row of the group
    errors = {i: predicted / by[i].measured_tokens_per_s_per_gpu - 1.0 for i in ("s002-22", "s002-23", "s002-24",
                                                                                 "s002-25", "s002-26")}
    assert abs(errors["s002-23"]) > SEED_BAND  # outside against its own day
    got = inside_band(runs, errors, SEED_BAND)
    assert got == {"s002-22": True, "s002-23": True, "s002-24": True, "s002-25": True, "s002-26": False}


def test_a_prediction_outside_every_repeat_stays_outside(runs):
    by = {r.id: r for r in runs}
    predicted = 1.5 * max(by[i].measured_tokens_per_s_per_gpu for i in ("s002-22", "s002-23", "s002-24", "s002-25"))
    errors = {i: predicted / by[i].measured_tokens_per_s_per_gpu - 1.0 for i in ("s002-22", "s002-23")}
    assert inside_band(runs, errors, SEED_BAND) == {"s002-22": False, "s002-23": False}
