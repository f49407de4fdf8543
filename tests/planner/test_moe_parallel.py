"""Expert parallelism in the planner: the ep/etp rules' one-line errors, memory falling with ep, the
all-to-all volume against DeepSpeed-MoE's formula, the grouped GEMMs' per-expert M, the breakdown's
MoE terms, and a ranked Mixtral-8x7B plan on 64 H100 (planner/moe_parallel.py, moe_memory.py,
moe_time.py)."""

import numpy as np
import pytest

from hardware.catalog import load_catalog
from planner import api, comm, memory, moe_parallel, moe_time, rules, throughput
from planner.context_parallel import all_to_all_s
from planner.errors import PlanError
from planner.layout import Layout
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from tests.planner.moe_models import MIXTRAL_8X7B, OLMOE_1B_7B

CATALOG = load_catalog()
SYSTEM = resolve_system(Scenario(gpu="h100-80gb", gpus=64), CATALOG)
SETTINGS = Settings(stacks=CATALOG.stacks)
MIXTRAL_COLUMNS = dict(n_layers=32, hidden=4096, n_heads=32, n_kv_heads=8, ffn_hidden=14336, vocab=32000,
                       mlp="swiglu", moe_experts=8, moe_top_k=2)


def _plan(**knobs) -> Layout:
    base = dict(tp=2, dp=32, sharding="zero1", activation_checkpointing="full", micro_batch=1, grad_accum=8,
                sequence_parallel=True, seq_len=4096)
    return Layout.from_plan(ExecutionPlan(**{**base, **knobs}))


def _one_line_error(field, **knobs):
    with pytest.raises(PlanError) as e:
        rules.check(knobs, spec=knobs.pop("spec", MIXTRAL_8X7B), system=SYSTEM)
    assert e.value.field == field and "\n" not in str(e.value)
    return str(e.value)


def test_ep_must_divide_the_experts():
    msg = _one_line_error("ep", ep=3)
    assert "8 routed experts" in msg and "allowed: 1, 2, 4, 8" in msg


def test_etp_x_ep_x_pp_must_divide_the_gpus():
    # Megatron-Core parallel_state.py: world_size % (etp x ep x pp)
    msg = _one_line_error("ep", ep=8, etp=4, pp=4)
    assert "etp x ep x pp = 4 x 8 x 4" in msg and "64 GPUs" in msg
    rules.check({"ep": 8, "etp": 2, "pp": 4}, spec=MIXTRAL_8X7B, system=SYSTEM)  # 64 = 2 x 8 x 4


def test_ep_needs_experts_and_moe_refuses_zero3_and_stacks_without_ep():
    from planner.presets import resolve_model

    dense = resolve_model("7b")
    _one_line_error("ep", ep=2, spec=dense)
    _one_line_error("etp", etp=2, spec=dense)
    msg = _one_line_error("sharding", stack="megatron_deepspeed", sharding="zero3")
    assert "Native DeepSpeed MoE is not supported with ZeRO Stage 3" in msg
    assert "no expert parallelism" in _one_line_error("stack", stack="hf", ep=2)


def test_zero3_refuses_only_deepspeed_moe_layers():
    """DeepSpeed's engine refuses ZeRO-3 with its own MoE layer (deepspeed.moe.layer.MoE, Megatron-DeepSpeed's,
    at any ep), not Hugging Face experts that are plain modules (a ZeRO-3 leaf MoE block): hf, bundled and
    generic plans at ep 1 pass; an unpinned stack is no refusal either (zero3 without tp/pp runs on hf)."""
    for stack in ("hf", "bundled", "generic"):
        rules.check({"stack": stack, "ep": 1, "sharding": "zero3"}, spec=MIXTRAL_8X7B, system=SYSTEM)
    rules.check({"sharding": "zero3"}, spec=MIXTRAL_8X7B, system=SYSTEM)
    for ep in (1, 2, 8):
        msg = _one_line_error("sharding", stack="megatron_deepspeed", sharding="zero3", ep=ep)
        assert "allowed: none, zero1, zero2" in msg


def test_the_bundled_trainer_runs_moe_at_ep1_without_tp_pp():
    """trainer/moe.py: every expert on every rank, plain modules that its ZeRO-3 shards as any other."""
    rules.check({"stack": "bundled", "ep": 1, "tp": 1, "pp": 1, "sharding": "zero3"}, spec=MIXTRAL_8X7B, system=SYSTEM)
    assert "no expert parallelism" in _one_line_error("stack", stack="bundled", ep=2)
    rules.check({"stack": "hf", "sharding": "zero3"}, spec=MIXTRAL_8X7B, system=SYSTEM)
    for knobs in ({"tp": 2}, {"pp": 2}):
        msg = _one_line_error("tp", stack="bundled", **knobs)
        assert "data parallelism only" in msg and "allowed: tp 1, pp 1" in msg
    rules.check({"stack": "megatron", "tp": 2, "pp": 2}, spec=MIXTRAL_8X7B, system=SYSTEM)


def test_search_tries_ep_among_the_divisors():
    from planner import search

    lay = search.candidates(MIXTRAL_8X7B, SYSTEM, Scenario(tp=2, pp=1, cp=1, sharding="zero1"), 4096, 512)
    assert set(np.unique(lay.ep)) == {1, 2, 4, 8} and set(np.unique(lay.etp)) == {1, 2}
    assert np.all((lay.tp * lay.cp * lay.dp) % (lay.ep * lay.etp) == 0)


def test_memory_falls_with_ep():
    totals = []
    for ep in (1, 2, 4, 8):
        mem = memory.memory_arrays(MIXTRAL_8X7B, _plan(ep=ep), SYSTEM, SETTINGS)
        totals.append(float(mem["weights_bytes"][0]))
    assert totals == sorted(totals, reverse=True) and totals[0] > 6 * totals[-1]
    # every routed expert on every GPU with ep = etp = 1: 2 bytes x 45.1B expert parameters
    assert totals[0] > 2 * 45e9


def test_expert_states_sharded_over_the_expert_data_parallel_group():
    # ZeRO-1 shards the expert optimizer states over edp = 64 / (ep x etp)
    lay = _plan(ep=8)
    assert float(moe_parallel.edp(lay)[0]) == 8.0
    from planner import moe_memory
    from planner.moe import dense_view

    view = dense_view(MIXTRAL_8X7B)
    p_e = float(moe_memory.expert_params_per_gpu(MIXTRAL_8X7B, view, lay)[0])
    assert p_e == pytest.approx(32 * 8 * 3 * 4096 * 14336 / 8)


def test_all_to_all_bytes_follow_the_deepspeed_moe_formula():
    """Each GPU sends tokens x hidden x top-k x bytes x (ep-1)/ep per dispatch or combine (DeepSpeed-MoE,
    arXiv 2201.05596; deepspeed/moe/sharded_moe.py MOELayer: two all-to-alls per forward), 4 all-to-alls
    per MoE layer and micro batch, 2 more when recomputing."""
    lay = _plan(ep=8, etp=1, activation_checkpointing="none", micro_batch=2)
    tokens = 2 * 4096 / 2  # a tp rank's share of the micro batch
    expected = tokens * 4096 * 2 * 2 * 7 / 8
    assert float(moe_time.a2a_bytes_per_call(MIXTRAL_8X7B, lay)[0]) == pytest.approx(expected)
    assert float(moe_time.a2a_calls_per_layer(lay)[0]) == 4.0
    assert float(moe_time.a2a_calls_per_layer(_plan(ep=8, activation_checkpointing="full"))[0]) == 6.0
    assert float(moe_time.a2a_bytes_per_call(MIXTRAL_8X7B, _plan(ep=1))[0]) == 0.0


def test_all_to_all_inside_a_node_is_faster_than_across():
    links = comm.Links.of(SYSTEM, SETTINGS)
    inside = all_to_all_s(links, 1e9, 8, 8, 1)
    across = all_to_all_s(links, 1e9, 16, 8, 1)
    assert across > 2 * inside
    a2a = [float(throughput.performance(MIXTRAL_8X7B, _plan(tp=1, dp=64, sequence_parallel=False, ep=8, etp=etp),
                                        SYSTEM, SETTINGS)["moe_a2a_s"][0]) for etp in (1, 2)]
    assert a2a[1] > a2a[0]  # ep 8 x etp 2 spans two nodes


def test_grouped_gemm_m_is_tokens_per_expert():
    lay = _plan(tp=1, dp=64, sequence_parallel=False, ep=8, micro_batch=1)
    # 4096 tokens x top-8 x ep 8 / 64 experts = 4096 rows per local expert
    assert float(moe_time.tokens_per_expert(OLMOE_1B_7B, lay)[0]) == 4096.0


def test_few_rows_per_expert_are_memory_bound():
    """ep 1 at 1024 tokens: 128 rows per expert, each GEMM reads a 2048 x 1024 expert for 128 rows
    (arithmetic intensity ~ 2 x 128 / 2 bytes = 128 FLOP/B, below H100's ~300 FLOP/B ridge): slower
    per FLOP than ep 8 (1024 rows per expert)."""
    def expert_s(ep):
        lay = _plan(tp=1, dp=64, sequence_parallel=False, ep=ep, seq_len=1024, activation_checkpointing="none")
        return float(throughput.performance(OLMOE_1B_7B, lay, SYSTEM, SETTINGS)["moe_compute_s"][0])
    assert expert_s(1) > 1.2 * expert_s(8)


def test_breakdown_and_mfu_count_active_parameters():
    from planner import flops, moe

    perf = throughput.performance(MIXTRAL_8X7B, _plan(ep=8), SYSTEM, SETTINGS)
    for key in ("moe_compute_s", "moe_a2a_s", "moe_expert_grad_s"):
        assert float(perf[key][0]) > 0
    tps_gpu = float(perf["tokens_per_s_per_gpu"][0])
    model_tf = float(flops.model_flops_per_token(MIXTRAL_8X7B, 4096)) * tps_gpu / 1e12
    assert float(perf["model_tflops_per_gpu"][0]) == pytest.approx(model_tf)
    assert float(flops.model_flops_per_token(MIXTRAL_8X7B, 4096)) < 6.5 * moe.active_params(MIXTRAL_8X7B) + 3 * 32 * 4 * 4096 * 4096


def test_dense_breakdown_has_no_moe_terms():
    from planner.presets import resolve_model

    perf = throughput.performance(resolve_model("7b"), _plan(tp=2, ep=1), SYSTEM, SETTINGS)
    assert "moe_a2a_s" not in perf


def test_mixtral_on_64_h100_ranks_plans_with_expert_parallelism():
    report = api.estimate(Scenario(gpu="h100-80gb", gpus=64, seq_len=4096, **MIXTRAL_COLUMNS), catalog=CATALOG, top=10)
    assert report.fitting > 0 and report.results
    assert any(r.plan.ep > 1 for r in report.results)
    best = report.results[0]
    assert best.time.moe_compute_s > 0 and "ACTIVE" in report.flops_convention
    assert report.model.moe_experts == 8 and report.model.n_params == MIXTRAL_8X7B.n_params


def test_cli_ep_error_exits_2():
    from typer.testing import CliRunner

    from plan_cli.main import app

    args = ["estimate", "--gpu", "h100-80gb", "--gpus", "64", "--ep", "3"]
    for k, v in MIXTRAL_COLUMNS.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "ep: 3 does not divide the 8 routed experts" in result.output
