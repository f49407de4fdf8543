"""planner/api.py: an objective that needs an input names the one missing (`--objective cost --tokens 1T` said it
needed tokens and price_per_gpu_hour, tokens given)."""

import pytest

from planner import api
from planner.errors import PlanError
from planner.scenario import Scenario


@pytest.mark.parametrize("given, says, not_said", [
    ({"tokens": "1T"}, "cost needs price_per_gpu_hour (e.g. --price-per-gpu-hour 2.5)", "tokens"),
    ({"price_per_gpu_hour": 2.5}, "cost needs tokens (e.g. --tokens 100B)", "price"),
    ({}, "cost needs tokens (e.g. --tokens 100B) and price_per_gpu_hour", None),
])
def test_cost_names_what_is_missing(given, says, not_said):
    with pytest.raises(PlanError) as e:
        api.estimate(Scenario(model="7b", gpus=8, **given), objective="cost")
    assert e.value.field == "objective" and e.value.message.startswith(says), e.value.message
    assert not_said is None or not_said not in e.value.message
