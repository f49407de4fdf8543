"""Context-parallel implementations (planner/context_parallel.py) against the papers' figures:
DeepSpeed Ulysses (Jacobs et al. 2023, arXiv:2309.14509, sec. 3.2: all-to-all volume per GPU 4Nh/P,
constant when N and P grow together; ring attention's grows), Llama 3's all-gather CP (sec. 3.3.2:
exposed all-gather of K/V), Megatron's hierarchical a2a+p2p; the rules, the search, the stacks."""

import numpy as np
import pytest

from planner import comm, context_parallel, rules, search
from planner.errors import PlanError
from planner.layout import Layout
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings, stack_profiles
from planner.throughput import performance

MHA = resolve_model("llama2-7b")  # 32 heads, no GQA, hidden 4096
GQA = resolve_model("llama3-70b")  # 64 heads, 8 kv heads


def _system(gpus):
    return resolve_system(Scenario(cluster="dgx-h100", gpus=gpus))


def _lay(**kw):
    base = dict(stack="megatron", dp=1, seq_len=32768, micro_batch=1)
    return Layout.from_plan(ExecutionPlan(**(base | kw)))


def _vol(spec, **kw):
    return {k: float(v[0]) for k, v in context_parallel.volume_bytes(spec, _lay(**kw), 8).items()}


def test_ulysses_volume_is_the_papers_4Nh_over_P():
    """Sec. 3.2: forward all-to-alls of q, k, v (3Nh/P) and the output (Nh/P) per GPU, x (P-1)/P sent
    off the GPU; backward the same. bf16, b=1, MHA, tp 1."""
    s, h, p = 32768, MHA.hidden, 8
    v = _vol(MHA, cp=p, cp_impl="ulysses", seq_len=s)
    forward = 4 * s * h * 2 / p * (p - 1) / p
    assert v["a2a"] == pytest.approx(2 * forward)  # forward + backward
    assert v["ring"] == 0 and v["allgather"] == 0


def test_ulysses_volume_constant_when_sequence_and_degree_grow_together_ring_grows():
    """Ulysses: N/P fixed -> the same volume per GPU (up to the (P-1)/P factor); ring attention
    receives P-1 K/V chunks of fixed size: its volume grows linearly with P (sec. 3.2 vs ring)."""
    uly = {p: _vol(MHA, cp=p, cp_impl="ulysses", seq_len=4096 * p)["a2a"] * p / (p - 1) for p in (2, 4, 8, 16)}
    assert max(uly.values()) == pytest.approx(min(uly.values()))
    ring = {p: _vol(MHA, cp=p, cp_impl="ring", seq_len=4096 * p)["ring"] for p in (2, 4, 8, 16)}
    assert ring[16] / ring[2] == pytest.approx(15.0)
    assert ring[8] > uly[8]  # already at 8 GPUs ring moves more than Ulysses with MHA


def test_ulysses_time_inside_a_node_stays_flat_while_ring_grows():
    spec, system = MHA, _system(8)
    links = comm.Links.of(system, Settings())
    t = {}
    for impl in ("ulysses", "ring"):
        for p in (2, 4, 8):
            parts = context_parallel.comm_s(spec, _lay(cp=p, cp_impl=impl, seq_len=8192 * p), links, 32)
            t[impl, p] = float((parts["ring"] + parts["exposed"])[0])
    assert t["ulysses", 8] / t["ulysses", 2] < 2.0  # 4x the sequence: only the (P-1)/P factor and latency
    assert t["ring", 8] / t["ring", 2] > 6.0  # 7 chunks vs 1


def test_allgather_moves_the_full_kv_three_times_and_is_exposed():
    """Llama 3 sec. 3.3.2: K/V all-gathered (forward; again in backward with the dK/dV
    reduce-scatter), the latency exposed: no share of it hides behind attention."""
    spec, system = GQA, _system(64)
    lay = _lay(tp=8, cp=8, cp_impl="allgather", seq_len=65536)
    full_kv = 65536 * 2 * GQA.kv_dim * 2 / 8
    assert _vol(GQA, tp=8, cp=8, cp_impl="allgather", seq_len=65536)["allgather"] == pytest.approx(3 * full_kv)
    links = comm.Links.of(system, Settings())
    parts = context_parallel.comm_s(spec, lay, links, 10)
    huge_attention = np.array([1e6])
    assert context_parallel.exposed_s(spec, lay, links, 10, huge_attention, 1.0)[0] == pytest.approx(
        parts["exposed"][0]) and parts["exposed"][0] > 0
    ring = _lay(tp=8, cp=8, cp_impl="ring", seq_len=65536)
    assert context_parallel.exposed_s(spec, ring, links, 10, huge_attention, 1.0)[0] == 0.0  # ring hides


def test_ring_is_the_model_as_before():
    """The ring path reproduces the pre-cp_impl formula (dev rows unchanged)."""
    system = _system(32)
    links = comm.Links.of(system, Settings())
    lay = _lay(tp=2, cp=16, cp_impl="ring", seq_len=65536)
    kv = 2 * (65536 / 16) * 2 * MHA.kv_dim / 2
    m = comm.members_per_node(16, 2, 8)
    old = 10 * 3 * 15 * kv / comm.group_busbw_Bps(links, 16, m) + 10 * 3 * 15 * comm.INTRANODE_LATENCY_S
    assert context_parallel.comm_s(MHA, lay, links, 10)["ring"][0] == pytest.approx(old)
    assert context_parallel.buffer_bytes(MHA, lay, 8)[0] == 0


def test_hierarchical_a2a_inside_the_node_ring_across():
    """a2a+p2p: all-to-all among the cp ranks of one node, a ring over the node groups."""
    for tp, inner, outer in ((1, 8, 2), (2, 4, 4), (8, 1, 16)):
        lay = _lay(tp=tp, cp=16, cp_impl="a2a+p2p", seq_len=65536)
        assert context_parallel.inner_degree(lay, 8)[0] == inner
        assert context_parallel.ring_degree(lay, 8)[0] == outer
    # across 2 nodes Ulysses's all-to-all crosses the NICs: hierarchical is faster there
    system = _system(16)
    links = comm.Links.of(system, Settings())
    t = {impl: context_parallel.exposed_s(MHA, _lay(cp=16, cp_impl=impl, seq_len=131072), links, 32,
                                          np.array([0.0]), 0.0)[0] for impl in ("ulysses", "a2a+p2p")}
    inside = context_parallel.exposed_s(MHA, _lay(cp=8, cp_impl="ulysses", seq_len=65536), links, 32,
                                        np.array([0.0]), 0.0)[0]
    assert t["ulysses"] > 2 * inside  # same tokens per GPU, over InfiniBand instead of NVLink


def test_memory_buffers_by_implementation():
    spec = GQA
    uly = _lay(tp=1, cp=8, cp_impl="ulysses", seq_len=65536)
    qkv = 2 * (65536 / 8) * (spec.hidden + 2 * spec.kv_dim)
    assert context_parallel.buffer_bytes(spec, uly, 8)[0] == pytest.approx(2 * qkv)
    ag = _lay(tp=1, cp=8, cp_impl="allgather", seq_len=65536)
    assert context_parallel.buffer_bytes(spec, ag, 8)[0] == pytest.approx(2 * 2 * 65536 * 2 * spec.kv_dim)
    mem_ring = _memory(spec, cp_impl="ring")
    mem_uly = _memory(spec, cp_impl="ulysses")
    assert mem_uly["comm_buffers_bytes"] > mem_ring["comm_buffers_bytes"]
    assert mem_uly["activations_bytes"] == mem_ring["activations_bytes"]  # s/N x all heads == s x heads/N


def _memory(spec, **kw):
    from planner.memory import memory_arrays

    lay = _lay(tp=1, cp=8, seq_len=65536, **kw)
    return {k: float(np.asarray(v)[0]) for k, v in memory_arrays(spec, lay, _system(8), Settings()).items()}


def test_ulysses_heads_rule_names_the_field():
    system = _system(64)
    with pytest.raises(PlanError) as e:
        rules.check({"tp": 8, "cp": 2, "cp_impl": "ulysses"}, spec=GQA, system=system)  # 1 kv head per TP rank
    assert e.value.field == "cp" and "kv heads" in str(e.value) and "\n" not in str(e.value)
    rules.check({"tp": 8, "cp": 2, "cp_impl": "allgather"}, spec=GQA, system=system)
    rules.check({"tp": 1, "cp": 8, "cp_impl": "ulysses"}, spec=GQA, system=system)
    with pytest.raises(PlanError):
        rules.check({"tp": 2, "cp": 8, "cp_impl": "ulysses"}, spec=GQA, system=system)  # 4 kv heads per rank


def test_stacks_run_only_their_implementations():
    profiles = stack_profiles(Settings())
    for stack, impl, ok in (("hf", "ulysses", True), ("hf", "ring", False), ("megatron_deepspeed", "ulysses", True),
                            ("torchtitan", "allgather", True), ("torchtitan", "ulysses", False),
                            ("megatron", "a2a+p2p", True), ("fsdp", "ring", False)):
        sharding = {"hf": "zero3", "fsdp": "fsdp_full_shard", "megatron_deepspeed": "zero1"}.get(stack, "none")
        broken = rules.violations({"stack": stack, "tp": 1, "pp": 1, "cp": 4, "cp_impl": impl, "sharding": sharding,
                                   "precision": "bf16", "offload": "none", "compile": False, "async_tp": False,
                                   "activation_offload": False}, profiles=profiles)
        assert (not broken) is ok, (stack, impl, broken)


def test_search_chooses_among_the_implementations():
    spec, system = MHA, _system(16)
    scn = Scenario(tp=1, pp=1, cp=16, stack="megatron", micro_batch=1, sharding="zero1", activation_checkpointing="full")
    found = search.search(spec, system, scn, Settings(), 131072, global_batch=16)
    lay = found.layout.take(np.flatnonzero(found.fits))
    impls = set(np.asarray(lay.cp_impl).tolist())
    assert impls == {0, 1, 2, 3}  # every implementation is a candidate for 32 heads over 16
    perf = performance(spec, lay, system, Settings())
    best = lay.plan(int(np.argmax(perf["tokens_per_s_per_gpu"])))
    assert best.cp_impl in ("ring", "a2a+p2p")  # Ulysses over InfiniBand loses at cp 16 on 8-GPU nodes
    pinned = search.search(spec, system, scn.model_copy(update={"cp_impl": "ulysses"}), Settings(), 131072, 16)
    assert set(np.asarray(pinned.layout.cp_impl).tolist()) == {1}
    without = search.search(spec, system, Scenario(tp=1, pp=1, cp=1), Settings(), 131072, 16)
    assert set(np.asarray(without.layout.cp_impl).tolist()) == {0}  # moot without cp: one candidate, ring


def test_search_skips_a2a_p2p_where_it_repeats_ring_or_ulysses():
    """tp 8 fills an 8-GPU node: no two cp ranks share a node, a2a+p2p is the ring; tp 1 cp 8 in
    one node: it is Ulysses. Only a split group (tp 2, cp 8: 4 cp ranks per node) keeps it."""
    spec, system = MHA, _system(16)
    for tp, cp, kept in ((8, 2, False), (1, 8, False), (2, 8, True)):
        scn = Scenario(tp=tp, pp=1, cp=cp, stack="megatron", micro_batch=1, sharding="zero1")
        found = search.search(spec, system, scn, Settings(), 65536, global_batch=16)
        impls = set(np.asarray(found.layout.cp_impl).tolist())
        assert (3 in impls) is kept, (tp, cp, impls)
        assert context_parallel.hybrid_is_distinct(cp, tp, 8) is kept
    pinned = search.search(spec, system, Scenario(tp=8, pp=1, cp=2, cp_impl="a2a+p2p"), Settings(), 65536, 16)
    assert set(np.asarray(pinned.layout.cp_impl).tolist()) == {3}  # pinned: kept as asked


@pytest.mark.parametrize("notes, cp, impl", [
    ("sequence parallel (DeepSpeed-Ulysses) 8", 8, "ulysses"),
    ("Megatron-DeepSpeed, ds-sequence-parallel-size 4, ZeRO-1", 4, "ulysses"),
    ("8-way Ulysses, FlashAttention-2", 8, "ulysses"),
    ("CP=4, cp_comm_type a2a", 4, "ulysses"),
    ("context parallel 8 --cp-comm-type a2a+p2p", 8, "a2a+p2p"),
    ("CP 16 with cp_comm_type=allgather", 16, "allgather"),
    ("torchtitan CP 4, rotate_method allgather", 4, "allgather"),
    ("torchtitan CP 4, rotate_method alltoall", 4, "ring"),
    ("all-gather CP 16 (document mask)", 16, "allgather"),
    ("CP=2 ring attention", 2, "ring"),
    ("CP=2", 2, "ring"),
])
def test_reader_spellings(notes, cp, impl):
    from planner import run_text

    row, notes_out = {"id": "x", "notes": notes}, []
    assert run_text.cp_of(row, notes_out) == cp
    assert context_parallel.impl_of(row, cp, notes_out) == impl
    # DeepSpeed's "sequence parallel" is Ulysses, not Megatron's sequence parallelism
    if "Ulysses" in notes:
        assert run_text.sequence_parallel_of(row, 1, False, 2024, False, []) is False


def test_reader_columns_and_unknown_cell():
    assert context_parallel.impl_of({"cp_comm_type": "a2a+p2p"}, 8, []) == "a2a+p2p"
    assert context_parallel.impl_of({"cp_impl": "Ulysses"}, 8, []) == "ulysses"
    notes = []
    assert context_parallel.impl_of({"notes": "CP 4"}, 4, notes) == "ring" and "not stated" in notes[0]
    with pytest.raises(PlanError) as e:
        context_parallel.impl_of({"id": "r1", "cp_impl": "zigzag"}, 4, [])
    assert e.value.field == "cp_impl" and "allowed" in str(e.value)
