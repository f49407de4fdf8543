"""ZeRO++ (planner/zeropp.py; Wang et al. 2023, arXiv 2306.10209): the cross-node volumes of the
paper's sec. 4 (3M -> 0.75M), hpZ's memory, the speed-up direction by network bandwidth, the
rules (one-line errors naming the knob) and the search proposing it on a slow network."""

import numpy as np
import pytest

from planner import api, comm, memory, zero3, zeropp
from planner.errors import PlanError
from planner.layout import Layout
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings, stack_profiles
from planner.stacks import per_candidate
from planner.throughput import performance

GPT18B = resolve_model("gpt2-18b")  # the DeepSpeed ZeRO++ tutorial's model size
ALL = dict(zeropp_qwz=True, zeropp_hpz_partition_size=8, zeropp_qgz=True)
OFF = dict(zeropp_qwz=False)


def _system(gpus=384, gbps=100.0):
    return resolve_system(Scenario(cluster="dgx-a100", gpus=gpus, internode_gbps=gbps))


def _layout(dp=384, **kw) -> Layout:
    return Layout.from_plan(ExecutionPlan(**{"dp": dp, "seq_len": 1024, "micro_batch": 1, "sharding": "zero3",
                                             "stack": "hf", **kw}))


def _node_bytes(lay, system, spec=GPT18B):
    """Bytes one node sends across the network per step, by ZeRO++'s model and by plain ZeRO-3's."""
    links = comm.Links.of(system, Settings())
    dp = lay.dp * lay.cp
    g = comm.Group.of(links, dp, comm.members_per_node(dp, lay.tp, links.gpus_per_node))
    prof = per_candidate(stack_profiles(Settings()), lay)
    zero = np.zeros(1)
    args = (spec, lay, links, g, 2.0, 2.0, zero, zero, prof)
    return zeropp.exposed_s(*args, 1e12)[1][0], zero3.exposed_s(spec, lay, g, 2.0, 2.0, zero, zero, prof)[1][0]


def test_each_feature_cuts_its_collective_by_the_papers_factor():
    """Paper sec. 3: qwZ halves the forward all-gather (int8 for fp16), hpZ takes the backward
    all-gather off the network (secondary copy inside the node), qgZ sends int4 gradients
    across nodes (a quarter of the fp16 reduce-scatter)."""
    system = _system()
    n = zero3.gathers(GPT18B, _layout())
    M_f, M_b, P = n["fwd"][0] * 2.0, n["bwd"][0] * 2.0, GPT18B.n_params * 2.0  # 16-bit bytes
    f = 383 / 384  # (n-1)/n of a ring over 384 GPUs, 8 per node: each node's NICs carry f x bytes
    _, plain = _node_bytes(_layout(), system)
    assert plain == pytest.approx(f * (M_f + M_b + P))
    qwz, _ = _node_bytes(_layout(zeropp_qwz=True), system)
    assert plain - qwz == pytest.approx(f * (M_f + M_b) * (1 - zeropp.QWZ_WIRE_BYTES / 2))  # every gather int8
    assert zeropp.QWZ_WIRE_BYTES / 2 == pytest.approx(0.5, abs=0.001)
    hpz, _ = _node_bytes(_layout(zeropp_hpz_partition_size=8), system)
    assert hpz == pytest.approx(f * (M_f + P))  # the backward gather stays in the node
    qgz, _ = _node_bytes(_layout(zeropp_qgz=True), system)
    nodes_f = 47 / 48  # the cross-node all-to-all runs among the 48 nodes
    assert qgz - f * (M_f + M_b) == pytest.approx(nodes_f * P * zeropp.QGZ_WIRE_BYTES / 2)
    assert zeropp.QGZ_WIRE_BYTES / 2 == pytest.approx(0.25, abs=0.001)


def test_all_three_move_a_quarter_of_plain_zero3_across_nodes():
    """Paper sec. 4: 3M -> 0.75M across nodes per iteration (here with grad_accum 1: one forward)."""
    system = _system()
    zpp, plain = _node_bytes(_layout(**ALL), system)
    assert zpp / plain == pytest.approx(0.25, abs=0.01)


def test_hpz_keeps_later_micro_batches_forward_gathers_in_the_node():
    """DeepSpeed drops the secondary copy only after the optimizer step (stage3.py _post_step):
    micro batches 2..ga gather their forward weights inside the node too."""
    system = _system()
    one, _ = _node_bytes(_layout(zeropp_hpz_partition_size=8), system)
    four, plain4 = _node_bytes(_layout(zeropp_hpz_partition_size=8, grad_accum=4), system)
    n = zero3.gathers(GPT18B, _layout())
    P, M_f = GPT18B.n_params * 2.0, n["fwd"][0] * 2.0
    f = 383 / 384
    assert four == pytest.approx(f * (M_f + 4 * P))  # one cross-node forward gather, four reductions
    assert plain4 == pytest.approx(4 * f * (2 * M_f - 2.0 * GPT18B.vocab_padded * GPT18B.hidden + P))


def test_hpz_costs_a_sixteen_bit_model_copy_over_the_partition():
    """hpZ's secondary partition: the 16-bit weights / partition size on every GPU (18B over 8 GPUs:
    4.6 GB), nothing else changes in the weights."""
    system = _system()
    base = memory.memory_arrays(GPT18B, _layout(), system, Settings())
    for h in (2, 8, 16):
        hp = memory.memory_arrays(GPT18B, _layout(zeropp_hpz_partition_size=h), system, Settings())
        assert hp["weights_bytes"][0] - base["weights_bytes"][0] == pytest.approx(2.0 * GPT18B.n_params / h)
    q = memory.memory_arrays(GPT18B, _layout(zeropp_qwz=True, zeropp_qgz=True), system, Settings())
    assert q["weights_bytes"][0] == base["weights_bytes"][0]
    # int8 copy of the prefetch bucket, int4 send + receive copies of the reduce bucket
    lay = _layout()
    extra = zeropp.QWZ_WIRE_BYTES * lay.stage3_prefetch_elems[0] + 2 * zeropp.QGZ_WIRE_BYTES * lay.reduce_bucket_elems[0]
    assert q["comm_buffers_bytes"][0] - base["comm_buffers_bytes"][0] == pytest.approx(extra)


def _speedup(gbps: float, model="gpt2-52b", gpus=384) -> float:
    system = _system(gpus, gbps)
    spec = resolve_model(model)
    tps = [performance(spec, _layout(dp=gpus, micro_batch=2, activation_checkpointing="full", **kw), system,
                       Settings())["tokens_per_s"][0] for kw in (OFF, ALL)]
    return tps[1] / tps[0]


def test_large_gain_on_a_slow_network_small_on_a_fast_one():
    """Paper (abstract, sec. 6): up to 2.16x at 384 GPUs on a low-bandwidth cluster, the gain
    shrinking as bandwidth grows. 100 Gbps per node: well above 1.5x; 1600 Gbps: within 35% (the
    plain ZeRO-3 gathers over 384 ranks pay a 383-step ring's latency there, NCCL having no tree for
    all-gather, and hpZ keeps the later ones inside a node)."""
    for model in ("gpt2-18b", "gpt2-52b"):
        slow, fast = _speedup(100, model), _speedup(1600, model)
        assert slow > 1.5, (model, slow)
        assert 0.95 < fast < min(1.35, slow), (model, fast)
        assert slow > fast + 0.5


def test_inside_one_node_zeropp_only_adds_kernel_time():
    """One node: nothing crosses the network, qgZ falls back to the reduce-scatter (DeepSpeed needs
    num_nodes > 1), qwZ still halves NVLink bytes but pays its quantization kernels."""
    system = _system(8, 100)
    a = performance(GPT18B, _layout(dp=8, **OFF), system, Settings())
    b = performance(GPT18B, _layout(dp=8, zeropp_qgz=True), system, Settings())
    assert b["dp_comm_s"][0] == pytest.approx(a["dp_comm_s"][0])


@pytest.mark.parametrize("knobs, field, words", [
    (dict(sharding="zero2", zeropp_qwz=True), "zeropp_qwz", "needs sharding zero3"),
    (dict(sharding="zero3", stack="fsdp", zeropp_qgz=True), "zeropp_qgz", "DeepSpeed feature"),
    (dict(sharding="zero3", tp=2, zeropp_hpz_partition_size=8), "zeropp_hpz_partition_size", "tp 1"),
    (dict(sharding="zero3", tp=2, zeropp_qgz=True), "zeropp_qgz", "tp 1"),
    (dict(sharding="zero3", tp=1, pp=1, cp=1, zeropp_hpz_partition_size=5), "zeropp_hpz_partition_size",
     "does not divide"),
    (dict(sharding="zero3", offload="optimizer+params", zeropp_hpz_partition_size=8), "zeropp_hpz_partition_size",
     "host memory"),
])
def test_invalid_combinations_are_one_line_errors_naming_the_knob(knobs, field, words):
    with pytest.raises(PlanError) as e:
        api.estimate(Scenario(model="gpt2-18b", cluster="dgx-a100", gpus=64, **knobs))
    assert e.value.field == field and words in str(e.value) and "\n" not in str(e.value)


def test_the_search_proposes_zeropp_on_a_slow_network():
    """Nothing pinned about ZeRO++: at 100 Gbps per node the best ZeRO-3 plan of a 52B model on 384
    GPUs uses it (the DeepSpeed tutorial's form: hpZ over one node); pinning it off is respected."""
    sc = dict(model="gpt2-52b", cluster="dgx-a100", gpus=384, internode_gbps=100, sharding="zero3", tp=1, pp=1,
              cp=1, stack="hf")
    best = api.evaluate(Scenario(**sc)).plan
    assert best.zeropp_qwz and best.zeropp_qgz and best.zeropp_hpz_partition_size == 8
    off = api.evaluate(Scenario(**sc, zeropp_qwz=False, zeropp_qgz=False)).plan
    assert not off.zeropp_qwz and not off.zeropp_qgz and off.zeropp_hpz_partition_size == 1
    # pinning a feature on restricts the searched shardings to zero3
    r = api.estimate(Scenario(model="gpt2-52b", cluster="dgx-a100", gpus=384, internode_gbps=100, tp=1, pp=1,
                              zeropp_qwz=True), top=5)
    assert r.results and all(e.plan.sharding == "zero3" and e.plan.zeropp_qwz for e in r.results)


def test_label():
    assert zeropp.label(ExecutionPlan(**ALL)) == "qwZ+hpZ8+qgZ"
    assert zeropp.label(ExecutionPlan()) == ""
