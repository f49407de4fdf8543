"""Mixture-of-experts plans in the exports (planner/exports/moe_settings.py).

- Megatron-LM: the real MoE arguments, every flag checked in NVIDIA/Megatron-LM
  megatron/training/arguments.py `_add_moe_args` (commit 000c4ac24f61159c138b0975def722c65245983c).
- DeepSpeed JSON, FSDP settings, accelerate YAML: no expert-parallel key exists there (DeepSpeed-MoE takes
  ep_size in deepspeed.moe.layer.MoE, in the model code): an ep/etp > 1 plan is REFUSED in one line naming
  ep; an MoE model at ep 1 is EXPORTED with a note (the experts live in the user's model code).
- torchrun / SLURM (the bundled trainer: every expert on every rank, no tp/pp with experts): ep > 1 is REFUSED
  naming ep, tp/pp > 1 naming tp/pp; an MoE model at ep 1, tp 1, pp 1 is EXPORTED with a note.
"""

import pytest

from planner.errors import PlanError
from planner.exports import moe_settings
from planner.exports.bundle import Chosen, export, refusal_of
from planner.exports.megatron_args import megatron_args
from planner.model import ModelSpec
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from tests.exports.test_export_megatron import MEGATRON_FLAG_SOURCES, values
from tests.planner.moe_models import MIXTRAL_8X7B

MOE_SOURCE = ("NVIDIA/Megatron-LM@000c4ac24f61159c138b0975def722c65245983c megatron/training/arguments.py "
              "_add_moe_args")
MOE_FLAGS = {f: MOE_SOURCE for f in (
    "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size", "--expert-model-parallel-size",
    "--expert-tensor-parallel-size", "--moe-token-dispatcher-type", "--moe-grouped-gemm",
    "--moe-shared-expert-intermediate-size", "--moe-layer-freq", "--moe-expert-capacity-factor",
    "--moe-token-drop-policy")}
SYSTEM = resolve_system(Scenario(gpu="h100-80gb", gpus=64))


def _plan(**kw) -> ExecutionPlan:
    base = dict(tp=1, pp=4, dp=16, ep=8, micro_batch=1, grad_accum=16, seq_len=4096, sharding="zero1",
                stack="megatron", activation_checkpointing="selective")
    return ExecutionPlan(**{**base, **kw})


def _flags(args):
    flags = [a for a in args if a.startswith("--")]
    assert len(flags) == len(set(flags))
    unknown = [f for f in flags if f not in MEGATRON_FLAG_SOURCES and f not in MOE_FLAGS]
    assert not unknown, unknown
    return flags


def test_mixtral_ep8_megatron_args():
    args = megatron_args(_plan(), MIXTRAL_8X7B)
    _flags(args)
    assert values(args, "--num-experts") == ["8"] and values(args, "--moe-router-topk") == ["2"]
    assert values(args, "--moe-ffn-hidden-size") == ["14336"] and values(args, "--ffn-hidden-size") == ["14336"]
    assert values(args, "--expert-model-parallel-size") == ["8"]
    # written even at 1: Megatron's default etp is tp (validate_args), the plan's is its own
    assert values(args, "--expert-tensor-parallel-size") == ["1"]
    assert values(args, "--moe-token-dispatcher-type") == ["alltoall"]  # what planner/moe_time.py models
    assert "--moe-grouped-gemm" not in args  # one expert per rank at ep 8 of 8 experts
    assert "--moe-layer-freq" not in args and "--moe-shared-expert-intermediate-size" not in args
    grouped = megatron_args(_plan(ep=2, dp=16), MIXTRAL_8X7B)
    assert "--moe-grouped-gemm" in grouped  # 4 experts per rank


def test_shared_experts_and_dense_first_layers():
    # a DeepSeekMoE-style shape (invented sizes): 2 shared experts of 1408 -> the TOTAL shared width
    spec = ModelSpec(**{**MIXTRAL_8X7B.model_dump(), "name": "probe", "n_layers": 8, "moe_experts": 16,
                        "moe_top_k": 4, "moe_ffn_hidden": 1408, "moe_shared_experts": 2, "moe_first_dense_layers": 1,
                        "published_params": None})
    args = megatron_args(_plan(ep=4), spec)
    _flags(args)
    assert values(args, "--moe-shared-expert-intermediate-size") == [str(2 * 1408)]
    assert values(args, "--moe-layer-freq") == ["([0]*1+[1]*7)"]
    every_other = ModelSpec(**{**spec.model_dump(), "moe_first_dense_layers": 0, "moe_layer_freq": 2})
    # the planner's layer i (0-based) is MoE where (i + 1) % 2 == 0; Megatron's list says so layer by layer
    assert values(megatron_args(_plan(ep=4), every_other), "--moe-layer-freq") == ["[0,1,0,1,0,1,0,1]"]


def test_megatron_refuses_what_megatron_core_refuses():
    with pytest.raises(PlanError) as e:
        megatron_args(_plan(ep=3), MIXTRAL_8X7B)
    assert e.value.field == "ep" and "8 experts" in str(e.value)
    with pytest.raises(PlanError) as e:  # Megatron-Core: ep > 1 with tp > 1 needs sequence parallelism
        megatron_args(_plan(tp=2, dp=8, sequence_parallel=False), MIXTRAL_8X7B)
    assert e.value.field == "sequence_parallel" and "\n" not in str(e.value)
    args = megatron_args(_plan(tp=2, dp=8, sequence_parallel=True, etp=2), MIXTRAL_8X7B)
    assert values(args, "--expert-tensor-parallel-size") == ["2"] and "--sequence-parallel" in args
    with pytest.raises(PlanError) as e:
        megatron_args(_plan(), resolve_model("llama2-7b"))
    assert e.value.field == "ep"


def test_megatron_export_file_has_the_moe_flags_and_the_capacity_hint():
    out = export("megatron", Chosen(plan=_plan(), model_ref="mixtral-8x7b", model=MIXTRAL_8X7B, system=SYSTEM))
    text = out.files[0].content
    assert "--expert-model-parallel-size 8" in text and "--num-experts 8" in text
    assert "--moe-expert-capacity-factor 1.25" in text.split("MEGATRON_ARGS=(")[0]  # a comment, not a flag
    assert refusal_of("megatron", _plan(), SYSTEM) is None


@pytest.mark.parametrize("fmt", ["deepspeed", "fsdp", "accelerate", "torchrun", "slurm"])
def test_expert_parallel_plans_are_refused_by_formats_without_an_ep_setting(fmt):
    plan = _plan(stack="megatron_deepspeed" if fmt != "fsdp" else "torchtitan")
    why = refusal_of(fmt, plan, SYSTEM)
    assert why is not None and why.field == "ep" and "\n" not in why.message
    assert f"{'an' if fmt == 'accelerate' else 'a'} {fmt} export" in why.message
    assert ("DeepSpeed-MoE" in why.message) == (fmt == "deepspeed")
    with pytest.raises(PlanError) as e:
        export(fmt, Chosen(plan=plan, model_ref="mixtral-8x7b", model=MIXTRAL_8X7B, system=SYSTEM))
    assert e.value.field == "ep"


def test_moe_at_ep1_exports_a_deepspeed_config_with_a_note():
    plan = _plan(ep=1, tp=1, pp=1, dp=64, grad_accum=4, stack="hf", sharding="zero2")
    out = export("deepspeed", Chosen(plan=plan, model_ref="mixtral-8x7b", model=MIXTRAL_8X7B, system=SYSTEM))
    assert '"zero_optimization"' in out.files[0].content
    assert any("8 experts" in n and "model code" in n for n in out.notes)
    assert moe_settings.note("deepspeed", plan, resolve_model("llama2-7b")) is None


@pytest.mark.parametrize("fmt", ["torchrun", "slurm"])
def test_bundled_trainer_exports_moe_models_at_ep1(fmt):
    plan = _plan(ep=1, tp=1, pp=1, dp=64, stack="bundled", sharding="zero2")
    out = export(fmt, Chosen(plan=plan, model_ref="mixtral-8x7b", system=SYSTEM, step_time_s=1.0, tokens=1e9))
    assert "--sharding zero2" in out.files[0].content
    assert any("8 experts" in n and "bundled trainer" in n for n in out.notes)


@pytest.mark.parametrize("fmt", ["torchrun", "slurm"])
@pytest.mark.parametrize("kw, field", [(dict(tp=2, pp=1, dp=32), "tp"), (dict(tp=1, pp=4, dp=16), "pp")])
def test_bundled_trainer_refuses_tp_pp_with_moe(fmt, kw, field):
    plan = _plan(ep=1, stack="bundled", sharding="none", **kw)
    with pytest.raises(PlanError) as e:
        export(fmt, Chosen(plan=plan, model_ref="mixtral-8x7b", system=SYSTEM, step_time_s=1.0, tokens=1e9))
    assert e.value.field == field and "data parallelism only" in str(e.value) and "\n" not in str(e.value)
