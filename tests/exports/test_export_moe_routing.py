"""The planned MoE routing settings in the exports (planner/exports/moe_routing.py).

Megatron-LM flags checked in NVIDIA/Megatron-LM megatron/training/arguments.py `_add_moe_args` (commit
000c4ac24f61159c138b0975def722c65245983c): --moe-expert-capacity-factor, --moe-pad-expert-input-to-capacity,
--moe-router-num-groups ("Set equal to number of nodes in EP group" for node-limited routing),
--moe-router-group-topk, --moe-token-dispatcher-type {allgather, alltoall, flex}, --moe-enable-deepep ("Only works
with flex token dispatcher"). FP8 dispatch has no flag there (refused); DeepSpeed / FSDP / accelerate have no key
(notes).
"""

import pytest
from typer.testing import CliRunner

from planner.errors import PlanError
from planner.exports import mla_settings
from planner.exports.bundle import Chosen, export
from planner.exports.megatron_args import megatron_args
from planner.moe_options import MoeOptions
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from tests.exports.test_export_megatron import MEGATRON_FLAG_SOURCES, values
from tests.exports.test_export_moe_settings import MOE_FLAGS, MOE_SOURCE
from tests.planner.moe_models import MIXTRAL_8X7B

ROUTING_FLAGS = {f: MOE_SOURCE for f in ("--moe-pad-expert-input-to-capacity", "--moe-router-num-groups",
                                         "--moe-router-group-topk", "--moe-enable-deepep")}
DISPATCHERS = {"allgather", "alltoall", "flex"}  # the flag's choices in _add_moe_args


def _plan(**kw) -> ExecutionPlan:
    base = dict(tp=1, pp=4, dp=16, ep=8, micro_batch=1, grad_accum=16, seq_len=4096, sharding="zero1",
                stack="megatron", activation_checkpointing="selective")
    return ExecutionPlan(**{**base, **kw})


def _args(gpus_per_node=8, plan=None, model=MIXTRAL_8X7B, notes=None, **options):
    args = megatron_args(plan or _plan(), model, gpus_per_node, moe=MoeOptions(**options), notes=notes)
    flags = [a for a in args if a.startswith("--")]
    assert len(flags) == len(set(flags))
    known = {**MEGATRON_FLAG_SOURCES, **MOE_FLAGS, **ROUTING_FLAGS}
    mla = set(mla_settings.megatron_args(model))  # checked in tests/exports/test_export_mla.py
    assert not [f for f in flags if f not in known and f not in mla]
    assert set(values(args, "--moe-token-dispatcher-type")) <= DISPATCHERS
    return args


def test_capacity_factor_is_written_padded():
    args = _args(moe_capacity_factor=1.5)
    assert values(args, "--moe-expert-capacity-factor") == ["1.5"]
    assert values(args, "--moe-pad-expert-input-to-capacity") == []  # a switch
    assert values(args, "--moe-token-dispatcher-type") == ["alltoall"]
    assert "--moe-expert-capacity-factor" not in _args()  # dropless: Megatron-Core's default


def test_node_limited_routing_groups_are_the_nodes_of_the_ep_group():
    # ep 8 on 4-GPU nodes: 2 nodes; a token to at most 1 of them
    args = _args(gpus_per_node=4, moe_node_limit=1)
    assert values(args, "--moe-token-dispatcher-type") == ["flex"] and "--moe-enable-deepep" in args
    assert values(args, "--moe-router-num-groups") == ["2"] and values(args, "--moe-router-group-topk") == ["1"]
    # one GPU per node: 8 groups; a limit of 4 above top-2 routes as top-2 groups (k experts reach <= k groups)
    args = _args(gpus_per_node=1, moe_node_limit=4)
    assert values(args, "--moe-router-num-groups") == ["8"] and values(args, "--moe-router-group-topk") == ["2"]
    # DeepSeek-V3's setting: 8 nodes of the ep-64 group, 4 of them per token
    v3 = resolve_model("deepseek-v3")
    args = _args(plan=_plan(ep=64, dp=16), model=v3, moe_node_limit=4)
    assert values(args, "--moe-router-num-groups") == ["8"] and values(args, "--moe-router-group-topk") == ["4"]


def test_a_limit_that_limits_nothing_writes_no_groups_and_says_so():
    notes = []
    args = _args(notes=notes, moe_node_limit=1)  # ep 8 inside one 8-GPU node
    assert "--moe-router-num-groups" not in args and values(args, "--moe-token-dispatcher-type") == ["flex"]
    assert any("nothing to limit" in n for n in notes)
    notes = []
    assert "--moe-router-num-groups" not in _args(gpus_per_node=4, notes=notes, moe_node_limit=2)  # 2 of 2 nodes
    assert notes


@pytest.mark.parametrize("options, plan, field", [
    (dict(moe_fp8_dispatch=True), {}, "moe_fp8_dispatch"),
    (dict(moe_capacity_factor=1.25, moe_node_limit=1), {}, "moe_capacity_factor"),
    (dict(moe_node_limit=1), dict(ep=1, pp=1, dp=64), "moe_node_limit"),
])
def test_what_megatron_cannot_run_is_refused_in_one_line(options, plan, field):
    with pytest.raises(PlanError) as e:
        _args(gpus_per_node=4, plan=_plan(**plan), **options)
    assert e.value.field == field and "allowed:" in e.value.message and "\n" not in str(e.value)


def test_the_file_header_says_how_the_load_was_planned():
    system = resolve_system(Scenario(gpu="h100-80gb", gpus=64))
    chosen = Chosen(plan=_plan(), model_ref="mixtral-8x7b", model=MIXTRAL_8X7B, system=system,
                    moe=MoeOptions(moe_capacity_factor=2.0))
    text = export("megatron", chosen).files[0].content
    head, body = text.split("MEGATRON_ARGS=(")
    assert "capacity factor 2, padded" in head and "--moe-expert-capacity-factor 2" in body


@pytest.mark.parametrize("fmt", ["deepspeed", "fsdp", "accelerate"])
def test_model_code_formats_note_what_has_no_key(fmt):
    system = resolve_system(Scenario(gpu="h100-80gb", gpus=64))
    plan = _plan(ep=1, pp=1, dp=64, grad_accum=4, stack="torchtitan" if fmt == "fsdp" else "hf",
                 sharding="fsdp_full_shard" if fmt == "fsdp" else "zero2")
    options = MoeOptions(moe_capacity_factor=1.25, moe_fp8_dispatch=True, moe_a2a_overlap=True)
    out = export(fmt, Chosen(plan=plan, model_ref="mixtral-8x7b", model=MIXTRAL_8X7B, system=system, moe=options))
    assert any("capacity_factor=1.25" in n and "no key" in n for n in out.notes)
    assert any("moe_fp8_dispatch, moe_a2a_overlap: no effect at ep 1" in n for n in out.notes)
    assert "capacity" not in out.files[0].content  # nothing invented in the config itself


def test_cli_export_writes_the_routing_flags():
    from plan_cli.main import app

    args = ["export", "megatron", "--gpu", "h100-80gb", "--gpus", "64", "--gpus-per-node", "4", "--model",
            "mixtral-8x7b", "--tp", "1", "--pp", "4", "--vpp", "2", "--ep", "8", "--micro-batch", "1", "--grad-accum",
            "8", "--sharding", "zero1", "--seq-len", "4096", "--stack", "megatron", "--activation-checkpointing",
            "selective"]
    out = CliRunner().invoke(app, args + ["--moe-node-limit", "1"])
    assert out.exit_code == 0, out.output
    assert "--moe-router-num-groups 2" in out.output and "--moe-router-group-topk 1" in out.output
    out = CliRunner().invoke(app, args + ["--moe-capacity-factor", "1.5"])
    assert out.exit_code == 0 and "--moe-expert-capacity-factor 1.5" in out.output
    out = CliRunner().invoke(app, args + ["--moe-fp8-dispatch"])
    assert out.exit_code == 2 and out.output.startswith("error: moe_fp8_dispatch:")
