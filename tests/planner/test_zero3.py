"""DeepSpeed ZeRO-3 fetch model (planner/zero3.py): what a micro batch gathers, and what it costs."""

import numpy as np
import pytest

from hardware.catalog import load_catalog
from planner import comm, zero3
from planner.layout import Layout
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from planner.throughput import performance

BLOOM = resolve_model("bloom-7b1")


def _layout(**kw) -> Layout:
    return Layout.from_plan(ExecutionPlan(**{"dp": 16, "seq_len": 2048, "micro_batch": 1, "sharding": "zero3",
                                             "stack": "hf", **kw}))


def _perf(settings=Settings(), spec=BLOOM, gpus=16, **kw):
    system = resolve_system(Scenario(cluster="jean-zay-a100", gpus=gpus))
    out = performance(spec, _layout(dp=gpus, **kw), system, settings)
    return {k: np.asarray(v)[0] for k, v in out.items()}


def _block_weights(spec) -> float:
    """One block's weight matrices (the parameters above the persistence threshold)."""
    return float(sum(np.prod(s) for s in spec.layer_param_shapes() if len(s) == 2))


def test_a_micro_batch_gathers_blocks_twice_and_the_vocabulary_three_times():
    """Forward and backward gather each block; the embedding and the output layer cost three
    vocabulary-sized gathers (embedding forward and backward, output layer forward)."""
    n = zero3.gathers(BLOOM, _layout())
    blocks = BLOOM.n_layers * _block_weights(BLOOM)
    emb = BLOOM.vocab_padded * BLOOM.hidden
    assert n["fwd"][0] == pytest.approx(blocks + 2 * emb)
    assert n["bwd"][0] == pytest.approx(blocks + emb)
    # biases and norms stay resident: a fetch per weight matrix (q, k, v, o, fc1, fc2), not per tensor
    assert n["calls_fwd"][0] == BLOOM.n_layers * 6 + 2


def test_recompute_with_a_short_reuse_distance_gathers_a_third_time():
    """With full recompute the recompute forward gathers a block and its backward reuses it, unless
    stage3_max_reuse_distance is shorter than a block: then backward gathers again (3 per micro batch)."""
    keep = zero3.gathers(BLOOM, _layout(activation_checkpointing="full"))
    short = zero3.gathers(BLOOM, _layout(activation_checkpointing="full", stage3_max_live_params=0))
    no_ckpt_short = zero3.gathers(BLOOM, _layout(stage3_max_live_params=0))
    blocks = BLOOM.n_layers * _block_weights(BLOOM)
    assert short["bwd"][0] - keep["bwd"][0] == pytest.approx(blocks)
    assert no_ckpt_short["bwd"][0] == pytest.approx(keep["bwd"][0])  # nothing recomputed: nothing to re-gather
    # and it shows in the step on Jean Zay's slow inter-node fabric
    slow = _perf(activation_checkpointing="full", stage3_max_live_params=0)
    fast = _perf(activation_checkpointing="full")
    assert slow["dp_comm_s"] > fast["dp_comm_s"] * 1.2


def test_prefetch_hides_real_compute_seconds_not_a_scaled_share():
    """The stack's comm_time_factor slows the collectives; the compute they hide behind does not
    shrink with it: exposed = c*T - overlap*compute, so doubling c more than doubles the exposed part."""
    stacks = load_catalog().stacks

    def with_c(c):
        prof = stacks["hf"].model_copy(update={"comm_time_factor": c, "overlap_zero3": 0.5})
        return _perf(Settings(stacks={**stacks, "hf": prof}), activation_checkpointing="full")

    one, two = with_c(1.0), with_c(2.0)
    assert one["dp_comm_s"] > 0
    assert two["dp_comm_s"] > 2.05 * one["dp_comm_s"]


def test_small_fetches_on_a_slow_fabric_pay_the_latency_of_every_call():
    """A deep, narrow model: thousands of small all-gathers across nodes; each pays the collective's
    latency, so the exposed time is at least calls x latency even with nothing to move."""
    tiny = BLOOM.model_copy(update={"n_layers": 96, "hidden": 256, "n_heads": 4, "vocab": 512})
    stacks = load_catalog().stacks
    prof = stacks["hf"].model_copy(update={"comm_time_factor": 1.0, "overlap_zero3": 0.0})
    p = _perf(Settings(stacks={**stacks, "hf": prof}), spec=tiny, gpus=32)
    n = zero3.gathers(tiny, _layout(dp=32))
    calls = n["calls_fwd"][0] + n["calls_bwd"][0]
    system = resolve_system(Scenario(cluster="jean-zay-a100", gpus=32))
    group = comm.Group.of(comm.Links.of(system, Settings()), np.array(32), np.array(8))
    # the latency floor of one gather across the 4 nodes: a call of one byte (planner/busbw_curve.py)
    lat = float(group.allgather_s(1.0, 1))
    assert calls > 1000
    assert p["dp_comm_s"] >= calls * lat
    # the same bytes in one call per block would be far cheaper: the per-call overhead dominates here
    moved = (n["fwd"][0] + n["bwd"][0]) * 2.0
    assert float(group.allgather_s(moved, calls)) > 3 * float(group.allgather_s(moved, 2 * tiny.n_layers))
