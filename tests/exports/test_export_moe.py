"""Exports refuse mixture-of-experts plans in one line naming the field (no export writes expert
settings yet: a DeepSpeed JSON or Megatron args without them would run a different plan)."""

import pytest

from planner.errors import PlanError
from planner.exports.bundle import Chosen, export, refusal_of
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario


def _plan(**kw) -> ExecutionPlan:
    base = dict(tp=1, pp=1, dp=16, micro_batch=1, grad_accum=1, seq_len=4096,
                sharding="zero1", stack="megatron")
    return ExecutionPlan(**{**base, **kw})


@pytest.mark.parametrize("fmt", ["deepspeed", "megatron", "torchrun", "accelerate"])
def test_expert_parallel_plans_are_refused_naming_ep(fmt):
    system = resolve_system(Scenario(gpu="h100-80gb", gpus=16))
    plan = _plan(ep=8)
    why = refusal_of(fmt, plan, system)
    assert why is not None and why.field == "ep"
    with pytest.raises(PlanError) as e:
        export(fmt, Chosen(plan=plan, model_ref="mixtral-8x7b", system=system))
    assert e.value.field == "ep" and "\n" not in str(e.value)


def test_moe_model_without_ep_is_refused_naming_model():
    system = resolve_system(Scenario(gpu="h100-80gb", gpus=16))
    model = resolve_model("mixtral-8x7b")
    with pytest.raises(PlanError) as e:
        export("megatron", Chosen(plan=_plan(), model_ref="mixtral-8x7b", model=model, system=system))
    assert e.value.field == "model"
    dense = export("megatron", Chosen(plan=_plan(), model_ref="llama2-7b", model=resolve_model("llama2-7b"),
                                      system=system))
    assert "--num-layers" in dense.files[0].content
