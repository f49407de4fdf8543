"""The sentence that says how `plan estimate` chose the global batch names the model's size in the unit
people use: 0.479M, 356M, 7.06B (it said '0.000479B parameters' for the tiny model)."""

from planner.presets import resolve_model
from planner.search import default_global_batch


def test_rule_names_the_size_in_m_below_a_billion():
    for model, size in (("tiny", "0.479M"), ("350m", "356M"), ("7b", "7.06B")):
        batch, rule = default_global_batch(resolve_model(model), 8, 2048)
        assert f"tokens for {size} parameters, rounded to" in rule, rule
        assert rule.startswith(f"global batch {batch} sequences")
