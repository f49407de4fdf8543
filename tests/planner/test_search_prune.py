"""The search leaves out the knob combinations of its own choosing that no stack runs (planner/search_prune.py):
the same answer (fitting plans, top 10, every other reason's count), without those rejections."""

import pytest

from planner import api, rules, search_prune
from planner.scenario import Scenario

SELF = {rules.BY_NAME[name].reason for name in search_prune.SELF_GENERATED}


def _whole(monkeypatch, scenario, **kwargs):
    """The report of the search that enumerates every combination (no rule's rejections left out)."""
    with monkeypatch.context() as m:
        m.setattr(search_prune, "searched_rules", lambda system, scenario: ())
        return api.estimate(scenario, **kwargs)


@pytest.mark.parametrize("scenario", [
    Scenario(model="125m", gpus=8, gpu="a100-80gb"),  # the audit's case: 910 "offload needs ZeRO or FSDP sharding", ...
    Scenario(model="olmoe-1b-7b", gpus=8, gpu="a100-80gb", seq_len=2048),  # MoE: ep x etp, DeepSpeed-MoE under ZeRO-3
    Scenario(model="7b", gpus=16, gpu="a100-80gb", stack="bundled"),  # a pinned stack's refusals of searched knobs
], ids=["125m", "olmoe", "7b-bundled"])
def test_same_answer_without_the_searchs_own_impossibilities(monkeypatch, scenario):
    whole = _whole(monkeypatch, scenario, top=10)
    r = api.estimate(scenario, top=10)
    assert whole.rejected.keys() & SELF  # the full enumeration generates them ...
    assert not r.rejected.keys() & SELF, r.rejected  # ... the search does not
    assert r.fitting == whole.fitting > 0
    assert [e.model_dump() for e in r.results] == [e.model_dump() for e in whole.results]
    # informative reasons (memory, divisibility) keep their counts: only first-broken self-generated ones left out
    assert {k: v for k, v in whole.rejected.items() if k not in SELF} == r.rejected
    assert r.evaluated == r.fitting + sum(r.rejected.values()) < whole.evaluated


def test_a_dead_end_of_pinned_knobs_keeps_every_reason(monkeypatch):
    """Nothing passes the structural rules (torchtitan runs no ZeRO-2; with pp > 1 DeepSpeed's pipeline runs ZeRO-1
    only): the counts are those of the whole enumeration, the pinned knob's reason among them."""
    scenario = Scenario(model="7b", gpus=16, gpu="a100-80gb", stack="torchtitan", sharding="zero2")
    r = api.estimate(scenario, include_rejected=True)
    assert r.fitting == 0 and r.rejected == _whole(monkeypatch, scenario, include_rejected=True).rejected
    assert rules.BY_NAME["stack_supports"].reason in r.rejected


def test_searched_rules_leave_a_fully_pinned_rule_alone():
    from hardware.catalog import load_catalog
    from planner.resolve import resolve_system

    scenario = Scenario(model="7b", gpus=16, gpu="a100-80gb", offload="optimizer", sharding="zero2")
    names = {r.name for r in search_prune.searched_rules(resolve_system(scenario, load_catalog()), scenario)}
    # offload and sharding both pinned: their rules' rejections would be the user's, not the search's
    assert not names & {"offload_needs_sharding", "param_offload_zero3", "fsdp_offload_params"}
    assert "deepspeed_pp_zero1" in names and "cp_heads" in names  # pp, cp_impl still searched


def test_gemm_factors_over_distinct_shapes_equal_the_per_candidate_ones(monkeypatch):
    """planner/gemm_shape.py plan_factors computes each distinct (tokens, tp, bytes) once over a large search:
    bit for bit the numbers of the per-candidate formulas."""
    from planner import gemm_shape

    found = api.search(Scenario(model="mixtral-8x7b", gpus=16, gpu="a100-80gb", seq_len=4096)).found
    assert len(found.layout) > gemm_shape.DISTINCT_MIN
    spec = api.resolve_model(Scenario(model="mixtral-8x7b"))
    gpu = api.resolve_system(Scenario(model="mixtral-8x7b", gpus=16, gpu="a100-80gb")).gpu
    fast = gemm_shape.plan_factors(spec, found.layout, gpu)
    monkeypatch.setattr(gemm_shape, "DISTINCT_MIN", 10**12)
    slow = gemm_shape.plan_factors(spec, found.layout, gpu)
    for a, b in zip(fast[0] + [fast[2]], slow[0] + [slow[2]]):
        assert a.shape == b.shape and (a == b).all()
