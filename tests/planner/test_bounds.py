"""planner/bounds.py: one list of the planner's upper bounds, each refusing with its reason."""

import pytest

from planner.bounds import InfeasibleMargin, WithinDays, checked
from planner.errors import PlanError


def test_checked_takes_a_value_inside_and_names_the_field_outside():
    assert checked("within_days", 30, WithinDays) == 30
    with pytest.raises(PlanError) as e:
        checked("within_days", 40_000, WithinDays)
    assert str(e.value) == "within_days: at most 36,500, got 40,000: days: a hundred years"


@pytest.mark.parametrize("value,words", [(1.5, "at most 1 (100% over), got 1.5"), (-0.1, "greater than or equal to 0"),
                                         (float("inf"), "finite")])
def test_infeasible_margin_is_a_fraction_a_user_could_mean(value, words):
    with pytest.raises(PlanError) as e:
        checked("infeasible_margin", value, InfeasibleMargin)
    assert str(e.value).startswith("infeasible_margin: ") and words in str(e.value)
    assert checked("infeasible_margin", 1.0, InfeasibleMargin) == 1.0
