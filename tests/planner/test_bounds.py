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



def test_a_model_dimension_past_its_bound_says_why(tmp_path):
    """A config.json with 1e12 layers said "n_layers: Input should be less than or equal to 10000"."""
    import json

    from planner.presets import resolve_model

    cfg = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
           "num_hidden_layers": 20_000, "vocab_size": 32000}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(PlanError) as e:
        resolve_model(str(tmp_path / "config.json"))
    assert "n_layers: at most 10,000, got 20,000: far beyond any real model's" in str(e.value)
    cfg["num_hidden_layers"] = 10_000
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert resolve_model(str(tmp_path / "config.json")).n_layers == 10_000
