"""What `plan catalog show` prints is true to the model: an RMSNorm has no bias, Mamba has no position
encoding (both printed rope / norm_bias True before; neither changes a count)."""

import pytest

from planner.errors import PlanError
from planner.exports.megatron_args import megatron_args
from planner.model import ModelSpec
from planner.resolve import resolve_model
from planner.scenario import ExecutionPlan, Scenario


def test_norm_bias_only_on_a_layernorm():
    base = dict(n_layers=2, hidden=64, n_heads=4, vocab=100)
    assert ModelSpec(**base).norm_bias
    assert not ModelSpec(**base, norm_bias=False).norm_bias
    rms = ModelSpec(**base, norm="rmsnorm")
    assert not rms.norm_bias
    assert rms.n_params == ModelSpec(**base, norm="rmsnorm", norm_bias=True).n_params
    assert not ModelSpec(**base, norm="nonparametric").norm_bias
    assert not resolve_model(Scenario(model="llama2-7b")).norm_bias


@pytest.mark.parametrize("name", ["mamba-2.8b", "mamba2-2.7b", "falcon-mamba-7b", "jamba-v0.1"])
def test_mamba_presets_have_no_position_encoding(name):
    spec = resolve_model(Scenario(model=name))
    assert spec.position == "none"
    # no parameters either way: the count is the rope one
    assert spec.n_params == spec.model_copy(update={"position": "rope"}).n_params


def test_megatron_refuses_a_model_without_position_encoding():
    spec = ModelSpec(n_layers=2, hidden=64, n_heads=4, vocab=100, position="none")
    plan = ExecutionPlan(tp=1, pp=1, dp=8, micro_batch=1, grad_accum=1, seq_len=128, stack="megatron")
    with pytest.raises(PlanError) as e:
        megatron_args(plan, spec)
    assert e.value.field == "position"
