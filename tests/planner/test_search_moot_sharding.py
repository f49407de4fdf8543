"""ZeRO / FSDP over one rank is no sharding: the search does not offer it as another plan."""

import numpy as np

from hardware.catalog import load_catalog
from planner import api, memory, search
from planner.api import resolve_model, resolve_system
from planner.layout import OFFLOAD, SHARD
from planner.scenario import Scenario


def _row(e):
    p = e.plan
    return (p.tp, p.pp, p.vpp, p.cp, p.dp, p.sequence_parallel, p.offload, p.activation_checkpointing,
            p.micro_batch, p.grad_accum, round(e.performance.tokens_per_s, 6))


def test_no_sharded_copy_of_an_unsharded_plan_at_dp1():
    # the new-user pass: #1 (tp2 pp4 dp1, no sharding) and #3 (the same with zero1) had the same numbers
    r = api.estimate(Scenario(model="llama2-13b", gpus=8, cluster="dgx-h100", precision="fp8"), top=None)
    assert r.evaluated == r.fitting + sum(r.rejected.values())
    rows = [_row(e) for e in r.results if e.plan.dp * e.plan.cp == 1]
    assert rows and len(rows) == len(set(rows))
    dp1 = [e.plan for e in r.results if e.plan.dp * e.plan.cp == 1]
    assert dp1 and all(p.sharding == "none" or p.offload != "none" for p in dp1)


def test_candidates_keep_offload_and_pinned_sharding_at_one_rank():
    cat = load_catalog(None)
    sc = Scenario(model="llama2-7b", gpus=1, cluster="dgx-a100")
    spec, system = resolve_model(sc), resolve_system(sc, cat)
    lay = search.candidates(spec, system, sc, 4096, 16)
    sharded = lay.sharding != SHARD["none"]
    assert (memory.shard_degree(lay, system) == 1).all()
    # ZeRO-Offload on one GPU is a real plan (Ren et al. 2021); plain zero2 on one GPU is not
    assert sharded.any() and (lay.offload[sharded] != OFFLOAD["none"]).all()
    pinned = Scenario(model="llama2-7b", gpus=1, cluster="dgx-a100", sharding="zero1")
    lay = search.candidates(spec, system, pinned, 4096, 16)
    assert (lay.sharding == SHARD["zero1"]).all() and (lay.offload == OFFLOAD["none"]).any()


def test_moe_keeps_sharding_where_experts_still_shard():
    cat = load_catalog(None)
    sc = Scenario(model="mixtral-8x7b", gpus=16, cluster="dgx-h100")
    spec, system = resolve_model(sc), resolve_system(sc, cat)
    lay = search.candidates(spec, system, sc, 4096, 256)
    one = (memory.shard_degree(lay, system) == 1) & (lay.sharding != SHARD["none"]) & (lay.offload == OFFLOAD["none"])
    assert one.any()  # dp x cp = 1 but the expert data-parallel group is larger: expert states shard
    from planner import moe_parallel
    assert (moe_parallel.edp(lay.take(np.flatnonzero(one))) > 1).all()


def test_hybrid_that_replicates_nothing_is_full_shard():
    # one node (or one GPU): fsdp_hybrid shards over the whole data-parallel group, as fsdp_full_shard
    r = api.estimate(Scenario(model="llama2-13b", gpus=1, cluster="dgx-h100"), top=None)
    assert r.results and "fsdp_full_shard" in {e.plan.sharding for e in r.results}
    assert "fsdp_hybrid" not in {e.plan.sharding for e in r.results}
    # across nodes it is a plan of its own (replicated over the nodes)
    r = api.estimate(Scenario(model="llama2-7b", gpus=16, cluster="dgx-a100", stack="torchtitan", tp=1, pp=1),
                     top=None)
    assert "fsdp_hybrid" in {e.plan.sharding for e in r.results}
    pinned = api.estimate(Scenario(model="llama2-13b", gpus=1, cluster="dgx-h100", sharding="fsdp_hybrid"), top=3)
    assert pinned.results and all(e.plan.sharding == "fsdp_hybrid" for e in pinned.results)
