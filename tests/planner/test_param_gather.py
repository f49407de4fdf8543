"""ZeRO-1/2's all-gather of the updated parameters: exposed after DeepSpeed's step, hidden behind the next
forward by Megatron-Core's --overlap-param-gather (planner/param_gather.py)."""

import numpy as np
import pytest

from hardware.catalog import load_catalog
from planner import param_gather
from planner.layout import Layout
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from planner.throughput import performance


def test_nothing_beside_it_exposes_the_whole_gather():
    assert param_gather.exposed_s(0.2, 1.0, 0.0, 10) == pytest.approx(0.2)


def test_a_long_forward_hides_all_but_the_first_bucket():
    assert param_gather.exposed_s(0.2, 1.0, 0.84, 10) == pytest.approx(0.02)


def test_a_short_forward_hides_its_net_share():
    # 0.1 s of forward with 18.9% compute slowdown under a concurrent collective hides 0.084 s; the first of
    # 10 buckets must arrive before the forward starts, so 9/10 of that forward is left beside the rest
    assert param_gather.exposed_s(0.2, 0.1, 0.84, 10) == pytest.approx(0.2 - 0.084 * 0.9)


def test_the_first_bucket_is_the_embedding_s_when_stated():
    assert param_gather.exposed_s(0.2, 1.0, 0.84, 10, first_share=0.3) == pytest.approx(0.06)


def _dp_comm_s(overlap: float) -> float:
    stacks = load_catalog().stacks
    prof = stacks["megatron"].model_copy(update={"overlap_param_gather": overlap})
    plan = ExecutionPlan(stack="megatron", tp=1, pp=1, dp=48, micro_batch=1, grad_accum=4, sharding="zero1",
                         activation_checkpointing="selective", precision="bf16", seq_len=4096)
    system = resolve_system(Scenario(cluster="dgx-h100", gpus=48))
    perf = performance(resolve_model("llama3-8b"), Layout.from_plan(plan), system,
                       Settings(stacks={**stacks, "megatron": prof}))
    return float(np.asarray(perf["dp_comm_s"]).reshape(-1)[0])


def test_overlapped_gather_shortens_the_step_by_the_hidden_part():
    exposed, hidden = _dp_comm_s(0.0), _dp_comm_s(0.84)
    assert hidden < exposed
    # 16 GB of bf16 parameters over 6 nodes: the gather alone is tens of ms; at most the forward of one
    # micro batch (4096 tokens of an 8B model: ~0.1-0.2 s) is hidden
    assert 0.005 < exposed - hidden < 0.3


def test_catalog_priors():
    stacks = load_catalog().stacks
    assert stacks["megatron"].overlap_param_gather == pytest.approx(0.84)
    for deepspeed in ("hf", "megatron_deepspeed", "bundled"):
        assert stacks[deepspeed].overlap_param_gather == 0.0
