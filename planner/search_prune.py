"""Combinations the search would only generate to reject: left out before any memory or speed is computed.

The search crosses every free knob (planner/search.py); most of that cross product is knob values that
no stack can run together (offload without sharding, parameter offload under ZeRO-1/2, DeepSpeed's
pipeline with ZeRO-2/3, a stack's unsupported features, an all-to-all CP that cannot split the heads).
Those candidates never fit, so leaving them out changes no fitting plan nor its rank; it spares their
memory model and keeps the "Rejected:" list to reasons that inform (memory, divisibility).

A rule's rejections are left out only where the search chose at least one of the knobs the rule reads:
where the user pinned every one of them, the candidates stay and the rule's reason is counted (a pinned
knob's reason stays explicit). Where no candidate passes every structural rule (a dead end), nothing is
left out: the counts are the whole picture the pinned knobs made.
"""

from __future__ import annotations

import numpy as np

from planner import rules
from planner.pinned import pinned_knobs
from planner.scenario import Scenario
from planner.system import System

# Rules about knob combinations that no stack (or not the plan's stack) runs: their rejections of
# searched values are the search's own (rules.py holds each rule's source).
SELF_GENERATED = (
    "cp_heads", "offload_needs_sharding", "param_offload_zero3", "fsdp_offload_params", "unified_memory_offload",
    "deepspeed_pp_zero1", "moe_zero3", "ep_stack", "bundled_moe_model_parallel", "bundled_model_parallel_zero",
    "bundled_model_parallel_offload", "bundled_model_parallel_compile", "bundled_tp_ddp", "bundled_hybrid_dp",
    "bundled_adafactor_dtensor", "bundled_offload_optimizer", "bundled_deepspeed_bf16_pure", "stack_supports",
)
assert set(SELF_GENERATED) <= set(rules.BY_NAME)

# The plan knobs the search varies (planner/search.py candidates); every other input is one value.
SEARCHED = frozenset({"stack", "tp", "pp", "vpp", "cp", "cp_impl", "ep", "etp", "dp", "sequence_parallel", "sharding",
                      "offload", "activation_checkpointing", "micro_batch", "grad_accum", "zeropp_qwz",
                      "zeropp_hpz_partition_size", "zeropp_qgz"})


def searched_rules(system: System, scenario: Scenario) -> tuple[rules.Rule, ...]:
    """The SELF_GENERATED rules that read at least one knob the scenario leaves to the search."""
    pinned = set(pinned_knobs(system, scenario))
    return tuple(rules.BY_NAME[name] for name in SELF_GENERATED
                 if any(i in SEARCHED and i not in pinned for i in rules.BY_NAME[name].inputs))


# The knobs the search varies fastest (planner/search.py's grid order): a rule that reads none of them
# is evaluated on the candidates with these left out, then repeated.
PER_STEP = frozenset({"activation_checkpointing", "checkpoint_fraction", "micro_batch", "grad_accum"})


def dropped(k: rules.Knobs, own: tuple[rules.Rule, ...], coarse: rules.Knobs | None = None,
            inner: int = 1) -> np.ndarray:
    """True where the first structural rule a candidate breaks (rules.RULES' order, as the search counts
    it) is one of `own`: every other reason keeps its count. All False where no candidate passes every
    structural rule: a dead end is reported whole, as the pinned knobs made it (planner/stack_pins.py
    names its cause from the counts). Rules whose inputs `k` lacks (`profiles` None) are skipped.
    `coarse`: every `inner`-th candidate without the PER_STEP knobs (they vary fastest), for the rules
    that do not read them."""
    n = len(k)
    drop = np.zeros(n, dtype=bool)
    names = {r.name for r in own}
    decided = np.zeros(n, dtype=bool)
    for rule in rules.structural():
        if any(not hasattr(k, i) or (i == "profiles" and k.profiles is None) for i in rule.inputs):
            continue
        if coarse is not None and not PER_STEP & set(rule.inputs):
            bad = np.repeat(np.broadcast_to(np.asarray(rule.bad(coarse), dtype=bool), (len(coarse),)), inner)
        else:
            bad = np.broadcast_to(np.asarray(rule.bad(k), dtype=bool), (n,))
        if rule.name in names:
            drop |= bad & ~decided
        decided |= bad
    return drop if not decided.all() else np.zeros(n, dtype=bool)
