"""Exports refuse Mamba / hybrid layer stacks in one line naming the model (no export writes a layer
pattern yet: Megatron args or a trainer command without it would run a transformer)."""

import pytest

from planner.errors import PlanError
from planner.exports.bundle import Chosen, export
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario


@pytest.mark.parametrize("fmt", ["megatron", "torchrun", "deepspeed"])
def test_hybrid_models_are_refused_naming_model(fmt):
    system = resolve_system(Scenario(gpu="h100-80gb", gpus=16))
    plan = ExecutionPlan(tp=1, pp=1, dp=16, micro_batch=1, grad_accum=1, seq_len=4096, sharding="zero1",
                         stack="megatron")
    with pytest.raises(PlanError, match="hybrid layer stacks") as e:
        export(fmt, Chosen(plan=plan, model_ref="nemotron-h-8b", system=system))
    assert e.value.field == "model" and "\n" not in str(e.value)
    assert export(fmt, Chosen(plan=plan, model_ref="llama2-7b", system=system)).files
