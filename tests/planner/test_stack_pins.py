"""planner/stack_pins.py: the first pinned knob a pinned stack's profile cannot run, none where it runs them all."""

from hardware.catalog import load_catalog
from planner.scenario import Scenario
from planner.stack_pins import pinned_conflict


def test_no_conflict_where_the_stack_runs_every_pinned_knob():
    stacks = load_catalog().stacks
    for stack, knobs in (("torchtitan", dict(sharding="fsdp_full_shard", tp=2, cp=2, cp_impl="allgather", compile=True)),
                         ("megatron", dict(sharding="zero1", tp=2, pp=2, precision="fp8")),
                         ("hf", dict(sharding="zero3", offload="optimizer")), ("fsdp", {})):
        assert pinned_conflict(Scenario(model="7b", stack=stack, **knobs), stacks[stack]) is None, stack
    # cp_impl without a pinned cp > 1: the search still has cp 1, no conflict to name
    assert pinned_conflict(Scenario(model="7b", stack="torchtitan", cp_impl="ulysses"), stacks["torchtitan"]) is None


def test_each_conflict_names_its_field():
    stacks = load_catalog().stacks
    for stack, knobs, field in (("torchtitan", dict(sharding="zero2"), "sharding"), ("fsdp", dict(tp=2), "tp"),
                                ("hf", dict(pp=2), "pp"), ("megatron", dict(offload="optimizer"), "offload"),
                                ("megatron", dict(compile=True), "compile"),
                                ("torchtitan", dict(cp=2, cp_impl="ulysses"), "cp_impl")):
        why = pinned_conflict(Scenario(model="7b", stack=stack, **knobs), stacks[stack])
        assert why is not None and why.field == field, (stack, knobs, why)
