"""Pairs a group orders wrongly against the group's replicate spread (validation/ranking_pairs.py),
on seed 002's real 52B Megatron rows (one configuration measured on four days: 125-225 s)."""

import numpy as np
import pytest

from planner.runs import load_runs
from validation.fit_profiles import DATA
from validation.ranking_pairs import concordance, pairs, replicate_spread


@pytest.fixture(scope="module")
def rows():
    by = {r.id: r for r in load_runs(DATA / "seed_runs.csv")}
    return [by[i] for i in ("s002-22", "s002-23", "s002-24", "s002-25", "s002-26", "s002-31")]


def test_the_spread_is_the_widest_gap_between_repeats_of_one_configuration(rows):
    measured = np.array([r.measured_tokens_per_s_per_gpu for r in rows])
    # s002-22..25: 129, 217, 125, 225 s for one configuration -> 225 / 125 - 1 = 80%
    assert replicate_spread(rows, measured) == pytest.approx(225 / 125 - 1, rel=1e-3)
    # nothing repeated: no spread
    assert replicate_spread(rows[3:], measured[3:]) == 0.0


def test_only_gaps_above_the_spread_are_resolvable_and_repeats_are_never_paired(rows):
    measured = np.array([r.measured_tokens_per_s_per_gpu for r in rows])
    spread = replicate_spread(rows, measured)
    predicted = measured[::-1].copy()  # every order reversed
    ps = pairs(rows, measured, predicted, spread)
    ids = {(p.faster, p.slower) for p in ps}
    assert ("s002-24", "s002-25") not in ids and ("s002-22", "s002-23") not in ids  # same configuration
    assert all(p.resolvable == (p.measured_gap > spread) for p in ps)
    n, right = concordance(ps)
    assert n == sum(p.measured_gap > spread for p in ps)
    # a prediction equal to the measurements orders every resolvable pair right
    assert concordance(pairs(rows, measured, measured * 1.1, spread)) == (n, n)
