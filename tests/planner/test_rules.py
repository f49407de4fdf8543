"""The feasibility rules (planner/rules.py): one table, evaluated vectorised by the search and
for one plan by validation, the pinned-knob check and the trainer; the two evaluations agree."""

import dataclasses
from dataclasses import fields

import numpy as np
import pytest

from planner import api, memory, pinned, rules, search
from planner import validate as planner_validate
from planner.errors import PlanError
from planner.layout import Layout
from planner.resolve import resolve_model, resolve_system
from planner.scenario import (ATTENTIONS, CHECKPOINTINGS, CP_IMPLS, OFFLOADS, OPTIMIZERS, PRECISIONS, SHARDINGS,
                              STACKS, Scenario)
from planner.settings import Settings, stack_profiles

N = 3000
# (model, GPU, gpus, gpus per node): with and without bf16/fp8, GPU counts with odd factors
CONTEXTS = [("7b", "a100-80gb", 48, 8), ("gpt2", "v100-32gb", 24, 4), ("70b", "h100-80gb", 64, 8),
            ("llama3-8b", "h100-80gb", 32, 16),  # 8 kv heads, 16 GPUs per node: tp 16 splits no kv head
            ("7b", "h100-80gb", 48, 8, {"moe_experts": 8, "moe_top_k": 2}),  # a mixture of experts (ep, etp)
            ("mamba2-2.7b", "a100-80gb", 48, 8), ("mamba-2.8b", "h100-80gb", 32, 8),  # Mamba-2 / Mamba-1 (ssm rules)
            ("7b", "mi300a", 16, 4, {"cluster": "el-capitan"}),  # unified memory: offload frees nothing
            ("olmoe-1b-7b", "h100-80gb", 32, 8)]  # q/k norms over the full width: the bundled trainer's tp refusal


WIDE = dict(stack=range(len(STACKS)), tp=[1, 2, 3, 4, 8, 16], pp=[1, 2, 4, 5, 8, 64, 128], vpp=[1, 2, 3],
            cp=[1, 2, 3, 4, 8], cp_impl=range(len(CP_IMPLS)), dp=[1, 2, 3, 4, 6, 8], sequence_parallel=[0, 1], sharding=range(len(SHARDINGS)),
            offload=range(len(OFFLOADS)), activation_checkpointing=range(len(CHECKPOINTINGS)),
            precision=range(len(PRECISIONS)), optimizer=range(len(OPTIMIZERS)), attention=range(len(ATTENTIONS)),
            compile=[0, 1], async_tp=[0, 1], activation_offload=[0, 1],
            zeropp_qwz=[0, 1], zeropp_hpz_partition_size=[1, 2, 4, 8, 16], zeropp_qgz=[0, 1],
            micro_batch=[1, 2, 4, 8, 64], grad_accum=[1, 2, 4, 8, 64, 256],
            first_stage_layers=[0, 0, 3, 4, 7], last_stage_layers=[0, 0, 3, 4, 7], embedding_in_split=[0, 1],
            loss_in_split=[0, 1])
MOE_WIDE = dict(WIDE, ep=[1, 1, 2, 3, 4, 8], etp=[1, 1, 2, 4])  # redrawn for a mixture-of-experts model only


def random_layout(rng: np.random.Generator, n: int, spec, system, seq_len: int, global_batch=None,
                  wide=None, scenario=None) -> Layout:
    """Candidates no search would build: the search's own candidates with up to three knobs
    each redrawn from a wide range, so that every rule gets to be the first one broken."""
    base = search.candidates(spec, system, scenario or Scenario(), seq_len, global_batch)
    lay = base.take(rng.integers(0, len(base), n))
    cols = {f.name: np.array(getattr(lay, f.name)) for f in fields(lay)}
    wide = wide or (MOE_WIDE if spec.moe_experts else WIDE)
    for _ in range(3):
        knob = rng.choice(list(wide), size=n)
        for name, values in wide.items():
            rows = np.flatnonzero(knob == name)
            cols[name][rows] = rng.choice(np.asarray(values), size=rows.size)
    return Layout(**cols)


def context(model, gpu, gpus, per_node, extra=None):
    scenario = Scenario(model=model, gpu=gpu, gpus=gpus, gpus_per_node=per_node, **(extra or {}))
    return resolve_model(scenario), resolve_system(scenario)


@pytest.mark.parametrize("ctx", CONTEXTS, ids=lambda c: c[0] + "-" + c[1])
@pytest.mark.parametrize("global_batch", [None, 96])
def test_vectorised_and_one_plan_evaluation_agree(ctx, global_batch):
    spec, system = context(*ctx)
    rng = np.random.default_rng(2 * CONTEXTS.index(ctx) + (global_batch is None))
    seq_len = 4096
    lay = random_layout(rng, N, spec, system, seq_len, global_batch)
    profiles = stack_profiles(Settings())
    mem = memory.memory_arrays(spec, lay, system, Settings())
    # the search's evaluation (reject_reasons is what search.search calls)
    vec = search.reject_reasons(spec, system, lay, seq_len, global_batch, profiles, mem)
    for i in range(N):
        plan = lay.plan(i)  # one plan, as strings and bools: the path validation and the trainer take
        broken = rules.violations(plan.model_dump(), spec=spec, system=system, seq_len=seq_len,
                                  global_batch=global_batch, profiles=profiles,
                                  mem={k: v[i:i + 1] for k, v in mem.items()})
        first = rules.INDEX[broken[0][0].name] if broken else rules.FITS
        assert first == vec[i], (plan, broken, vec[i])
    assert (vec == rules.FITS).any() and (vec != rules.FITS).any()


def test_every_rule_is_the_first_reason_somewhere():
    """Every reason text can be shown: each rule is the first broken for some candidate."""
    seen = set()
    for ctx in CONTEXTS:
        spec, system = context(*ctx)
        for global_batch in (None, 96):
            lay = random_layout(np.random.default_rng(len(seen)), 20_000, spec, system, 4096, global_batch)
            mem = memory.memory_arrays(spec, lay, system, Settings())
            seen |= set(search.reject_reasons(spec, system, lay, 4096, global_batch,
                                              stack_profiles(Settings()), mem).tolist())
    # expert parallelism on a dense model
    spec, system = context(*CONTEXTS[0])
    lay = random_layout(np.random.default_rng(7), 5000, spec, system, 4096, None, MOE_WIDE)
    seen |= set(search.reject_reasons(spec, system, lay, 4096, None, stack_profiles(Settings())).tolist())
    # the bundled trainer's refusals (planner/bundled_rules.py), from the bundled stack's own candidates
    bundled = dict(sharding=range(len(SHARDINGS)), precision=range(len(PRECISIONS)), dp=[1, 2, 3, 4], tp=[1, 2])
    optimizers = dict(sharding=range(len(SHARDINGS)), optimizer=range(len(OPTIMIZERS)), offload=range(len(OFFLOADS)),
                      tp=[1, 2])
    for seed, wide in ((8, bundled), (9, optimizers)):
        lay = random_layout(np.random.default_rng(seed), 5000, spec, system, 4096, None, wide,
                            Scenario(stack="bundled"))
        seen |= set(search.reject_reasons(spec, system, lay, 4096, None, stack_profiles(Settings())).tolist())
    missing = {r.name for i, r in enumerate(rules.RULES) if i not in seen}
    assert not missing, missing
    assert rules.FITS in seen


def test_one_table_serves_search_api_and_validation():
    assert search.REASONS is rules.REASONS and search.FITS == rules.FITS
    assert search.GPU_OOM in rules.MEMORY and search.HOST_OOM in rules.MEMORY
    r = api.estimate(Scenario(model="7b", gpus=48), include_rejected=True)
    assert set(r.rejected) <= set(rules.REASONS) and r.rejected
    assert r.evaluated == r.fitting + sum(r.rejected.values())


def test_rule_reads_only_its_declared_inputs():
    """The one-plan path hands a rule exactly its inputs: reading another name fails."""
    rule = rules.Rule("x", "x", "tp", ("tp",), lambda k: k.pp > 1)
    with pytest.raises(AttributeError):
        rule.bad(rules._knobs_for(rule, {"tp": 2, "pp": 2}, {}))


@pytest.mark.parametrize("pins, field, words", [
    (dict(tp=3), "tp", "attention heads (n_heads)"),
    (dict(tp=4, pp=5), "gpus", "4 x 5 x 1 = 20"),  # cp relaxed to 1
    (dict(tp=16), "tp", "gpus_per_node"),
    (dict(pp=48), "pp", "every stage needs at least one layer"),
    (dict(vpp=5), "vpp", "pp x vpp = 5"),  # pp relaxed to 1
    (dict(cp=3), "cp", "does not divide seq_len"),
    (dict(sequence_parallel=True, tp=1), "sequence_parallel", "needs tp > 1"),
    (dict(offload="optimizer", sharding="none"), "offload", "needs sharding"),
    (dict(offload="optimizer+params", sharding="zero2"), "offload", "zero3"),
    (dict(offload="optimizer", sharding="fsdp_full_shard"), "offload", "optimizer+params"),
    (dict(pp=2, sharding="zero3"), "sharding", "ZeRO-1 only"),
    (dict(precision="fp8"), "precision", "fp8 tensor cores"),
    (dict(tp=2, pp=2, cp=1, micro_batch=2, grad_accum=2, global_batch=96), "global_batch", "96 != micro_batch"),
    (dict(tp=1, pp=1, cp=1, micro_batch=64, grad_accum=64), "global_batch", "above 4M tokens"),
])
def test_pinned_knobs_are_checked_by_the_table(pins, field, words):
    scenario = Scenario(model="7b", gpu="a100-80gb", gpus=48, seq_len=2048, **pins)
    spec, system = resolve_model(scenario), resolve_system(scenario)
    with pytest.raises(PlanError) as e:
        pinned.check_pinned(spec, system, scenario, 2048, scenario.global_batch)
    assert e.value.field == field and words in str(e.value), str(e.value)


def test_validation_verdict_comes_from_the_table():
    """`plan validate` names the rule a published plan breaks (same text as the search counts)."""
    from planner.runs import load_runs
    from tests.planner.test_golden_published import DATA

    run = load_runs(DATA / "published_dev.csv")[0]
    bad = dataclasses.replace(run, plan=run.plan.model_copy(update={"sequence_parallel": True, "tp": 1}),
                              layout_stated=True)
    pred = planner_validate.predict(bad, Settings())
    assert not pred.fits and pred.verdict == rules.BY_NAME["sp_needs_tp"].reason


def test_codes_match_the_layout():
    """Rules compare Layout codes: the coding of one plan's strings is the Layout's."""
    lay = random_layout(np.random.default_rng(0), 50, *context(*CONTEXTS[0]), 4096)
    for i in range(50):
        plan = lay.plan(i)
        for f in fields(lay):
            if f.name in ("sharding", "offload", "precision", "stack", "activation_checkpointing"):
                assert rules._coded(f.name, getattr(plan, f.name)) == getattr(lay, f.name)[i]
