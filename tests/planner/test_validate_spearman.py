"""Spearman's rank correlation of the ranking scores (planner/validate.py): ties share their mean rank."""

import numpy as np
import pytest

from planner.validate import _fractional_ranks, _spearman


def test_ties_share_their_mean_rank():
    assert list(_fractional_ranks(np.array([3.0, 1.0, 1.0, 2.0]))) == [3.0, 0.5, 0.5, 2.0]
    # one configuration measured twice is predicted alike up to rounding: still a tie
    assert list(_fractional_ranks(np.array([88.9, 88.9 * (1 + 1e-12), 100.0]))) == [0.5, 0.5, 2.0]


def test_a_tie_in_the_prediction_does_not_depend_on_its_last_bits():
    """Two repeats of one configuration (measured 144.7 and 103.3) are predicted the same; which of the two copies
    of the prediction is a hair larger must not move the score (it moved 1.00 <-> 0.80 with argsort ranks)."""
    measured = np.array([1269.1, 990.9, 144.7, 103.3])
    a = np.array([1489.0, 1154.3, 88.9, 88.9 * (1 - 1e-13)])
    b = np.array([1489.0, 1154.3, 88.9 * (1 - 1e-13), 88.9])
    assert _spearman(a, measured) == pytest.approx(_spearman(b, measured))
    assert _spearman(a, measured) == pytest.approx(np.corrcoef([3, 2, 0.5, 0.5], [3, 2, 1, 0])[0, 1])
    assert _spearman(np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 30.0])) == pytest.approx(1.0)
