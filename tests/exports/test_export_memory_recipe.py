"""DeepSeek-V3's memory-saving switches in `plan export` (planner/exports/memory_settings.py).

The Megatron-LM flags are parsed by the argparse definitions of NVIDIA/Megatron-LM megatron/training/arguments.py
(commit 000c4ac24f61159c138b0975def722c65245983c) re-declared below exactly as that file declares them
(`_add_training_args`: --recompute-granularity, --recompute-modules; `_add_experimental_args`, "Args of
precision-aware optimizer": --use-precision-aware-optimizer, --exp-avg-dtype, --exp-avg-sq-dtype). FP8 activation
caching has no flag there, and the other formats have no key for any switch: one-line refusals, exit 2.
"""

from __future__ import annotations

import argparse
import json

import pytest
from typer.testing import CliRunner

from plan_cli.main import app
from planner.errors import PlanError
from planner.exports import mla_settings
from planner.exports.bundle import Chosen, export
from planner.exports.megatron_args import megatron_args
from planner.memory_recipe import MemoryRecipe
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from tests.exports.test_export_megatron import MEGATRON_FLAG_SOURCES, values
from tests.exports.test_export_moe_settings import MOE_FLAGS

SOURCE = "NVIDIA/Megatron-LM@000c4ac24f61159c138b0975def722c65245983c megatron/training/arguments.py"
MEMORY_FLAGS = {f: SOURCE for f in ("--recompute-modules", "--use-precision-aware-optimizer", "--exp-avg-dtype",
                                    "--exp-avg-sq-dtype")}
# the module names of --recompute-modules' help text in that file
RECOMPUTE_MODULES = {"core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts"}
runner = CliRunner()


def megatron_parser() -> argparse.ArgumentParser:
    """The flags of this feature as Megatron-LM declares them (types, nargs, choices)."""
    p = argparse.ArgumentParser(allow_abbrev=False)
    p.add_argument('--recompute-granularity', type=str, default=None, choices=['full', 'selective'])
    p.add_argument('--recompute-method', type=str, default=None, choices=['uniform', 'block'])
    p.add_argument('--recompute-modules', nargs='*', type=str, default=None)
    p.add_argument('--use-precision-aware-optimizer', action='store_true')
    p.add_argument('--main-grads-dtype', default='fp32', choices=['fp32', 'bf16'])
    p.add_argument('--main-params-dtype', default='fp32', choices=['fp32', 'fp16'])
    p.add_argument('--exp-avg-dtype', default='fp32', choices=['fp32', 'fp16', 'bf16', 'fp8'])
    p.add_argument('--exp-avg-sq-dtype', default='fp32', choices=['fp32', 'fp16', 'bf16', 'fp8'])
    p.add_argument('--use-distributed-optimizer', action='store_true')
    return p


def parse(args: list[str], model) -> argparse.Namespace:
    flags = [a for a in args if a.startswith("--")]
    assert len(flags) == len(set(flags)), flags
    known = {**MEGATRON_FLAG_SOURCES, **MOE_FLAGS, **MEMORY_FLAGS}
    assert not [f for f in flags if f not in known and f not in set(mla_settings.megatron_args(model))]
    ns, _ = megatron_parser().parse_known_args(args)
    assert set(ns.recompute_modules or []) <= RECOMPUTE_MODULES
    if ns.recompute_granularity == "selective":  # validate_args: no method with selective granularity
        assert ns.recompute_method is None
    if ns.use_precision_aware_optimizer:  # OptimizerConfig.__post_init__: distributed optimizer only
        assert ns.use_distributed_optimizer
    return ns


def _plan(**kw) -> ExecutionPlan:
    base = dict(tp=1, pp=1, dp=8, ep=8, micro_batch=1, grad_accum=4, seq_len=4096, sharding="zero1",
                stack="megatron", activation_checkpointing="none")
    return ExecutionPlan(**{**base, **kw})


V2_LITE = resolve_model("deepseek-v2-lite")


def test_recompute_norms_and_mla_up_without_other_recompute():
    ns = parse(megatron_args(_plan(), V2_LITE, memory=MemoryRecipe(recompute_norms_mla_up=True)), V2_LITE)
    assert ns.recompute_granularity == "selective" and ns.recompute_modules == ["layernorm", "mla_up_proj"]
    plain = parse(megatron_args(_plan(), V2_LITE), V2_LITE)
    assert plain.recompute_granularity is None and plain.recompute_modules is None


def test_selective_plans_keep_core_attention_and_dense_models_get_no_mla_module():
    ns = parse(megatron_args(_plan(activation_checkpointing="selective"), V2_LITE,
                             memory=MemoryRecipe(recompute_norms_mla_up=True)), V2_LITE)
    assert ns.recompute_modules == ["core_attn", "layernorm", "mla_up_proj"]  # core_attn: Megatron's default kept
    llama = resolve_model("llama2-7b")
    ns = parse(megatron_args(_plan(ep=1, dp=8), llama, memory=MemoryRecipe(recompute_norms_mla_up=True)), llama)
    assert ns.recompute_modules == ["layernorm"]


def test_full_recompute_writes_nothing_more_and_says_why():
    notes: list[str] = []
    args = megatron_args(_plan(activation_checkpointing="full"), V2_LITE, memory=MemoryRecipe(recompute_norms_mla_up=True),
                         notes=notes)
    ns = parse(args, V2_LITE)
    assert ns.recompute_granularity == "full" and ns.recompute_modules is None
    assert any("full recompute" in n for n in notes)


def test_bf16_moments_are_the_precision_aware_optimizer_with_fp32_masters_and_grads():
    ns = parse(megatron_args(_plan(), V2_LITE, memory=MemoryRecipe(optimizer_moments_bf16=True)), V2_LITE)
    assert ns.use_precision_aware_optimizer and ns.exp_avg_dtype == "bf16" and ns.exp_avg_sq_dtype == "bf16"
    assert ns.main_grads_dtype == "fp32" and ns.main_params_dtype == "fp32"  # the recipe keeps them in FP32


@pytest.mark.parametrize("update, why", [({"sharding": "none"}, "distributed optimizer"),
                                         ({"optimizer": "sgd"}, "only supported with adam"),
                                         ({"precision": "fp32"}, "allowed: bf16, fp16 or fp8")])
def test_bf16_moments_refused_where_megatron_core_asserts(update, why):
    with pytest.raises(PlanError) as e:
        megatron_args(_plan(**update), V2_LITE, memory=MemoryRecipe(optimizer_moments_bf16=True))
    assert e.value.field == "optimizer_moments_bf16" and why in str(e.value)


def _chosen(plan: ExecutionPlan, memory: MemoryRecipe, model=V2_LITE) -> Chosen:
    system = resolve_system(Scenario(cluster="dgx-h100", gpus=plan.gpus))
    return Chosen(plan=plan, model_ref=model.name, model=model, system=system, memory=memory)


def test_fp8_cache_is_refused_by_megatron_and_bad_input_on_a_bf16_plan():
    with pytest.raises(PlanError) as e:
        export("megatron", _chosen(_plan(precision="fp8"), MemoryRecipe(fp8_activation_cache=True)))
    assert e.value.field == "fp8_activation_cache" and "Megatron-LM" in str(e.value)
    with pytest.raises(PlanError) as e:  # memory_recipe.check_scenario: the one check of the switch
        export("megatron", _chosen(_plan(precision="bf16"), MemoryRecipe(fp8_activation_cache=True)))
    assert "needs fp8 plans" in str(e.value)


@pytest.mark.parametrize("fmt, sharding", [("deepspeed", "zero1"), ("fsdp", "fsdp_full_shard"),
                                           ("accelerate", "zero2"), ("torchrun", "zero1")])
@pytest.mark.parametrize("switch", ["recompute_norms_mla_up", "optimizer_moments_bf16"])
def test_formats_without_a_key_refuse_each_switch(fmt, sharding, switch):
    llama = resolve_model("llama2-7b")
    plan = _plan(ep=1, stack="fsdp" if sharding.startswith("fsdp") else "generic", sharding=sharding)
    with pytest.raises(PlanError) as e:
        export(fmt, _chosen(plan, MemoryRecipe(**{switch: True}), llama))
    assert e.value.field == switch and "cannot write it" in str(e.value)
    export(fmt, _chosen(plan, MemoryRecipe(), llama))  # the same plan without the switch exports


def test_deepspeed_takes_the_exported_json_and_has_bf16_moments_only_with_bf16_masters(tmp_path):
    """The refusal's reason, checked on DeepSpeed itself: its bf16_optimizer_states asserts BF16 masters."""
    from tests.exports.test_export_deepspeed import run_validator

    llama = resolve_model("llama2-7b")
    config = json.loads(export("deepspeed", _chosen(_plan(ep=1, stack="generic"), MemoryRecipe(), llama)).files[0].content)
    moments = {**config, "bf16": {**config["bf16"], "bf16_optimizer_states": True}}
    result = run_validator(tmp_path, [{"name": "exported", "dp": 8, "config": config},
                                      {"name": "bf16 moments", "dp": 8, "config": moments}])
    assert [f[0] for f in result["failures"]] == ["bf16 moments"]
    assert "requires bf16_master_weights_and_grads" in result["failures"][0][2]


PINNED = ["--model", "deepseek-v2-lite", "--cluster", "dgx-h100", "--gpus", "8", "--tp", "1", "--pp", "1", "--ep", "8",
          "--micro-batch", "1", "--grad-accum", "4", "--sharding", "zero1", "--activation-checkpointing", "none",
          "--seq-len", "4096", "--stack", "megatron", "--precision", "bf16"]


def test_cli_writes_the_switches_into_the_megatron_args(tmp_path):
    out = tmp_path / "args.sh"
    res = runner.invoke(app, ["export", "megatron", *PINNED, "--recompute-norms-mla-up", "--optimizer-moments-bf16",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert "    --recompute-modules layernorm mla_up_proj\n" in text
    assert "    --use-precision-aware-optimizer\n" in text and "    --exp-avg-sq-dtype bf16\n" in text


@pytest.mark.parametrize("fmt, flags, field", [
    ("megatron", ["--fp8-activation-cache"], "fp8_activation_cache"),  # bf16 pinned: check_scenario's refusal
    ("deepspeed", ["--recompute-norms-mla-up"], "recompute_norms_mla_up"),
])
def test_cli_refusals_are_one_line_exit_2(fmt, flags, field):
    pinned = PINNED if fmt == "megatron" else ["--model", "llama2-7b", "--cluster", "dgx-h100", "--gpus", "8",
                                               "--stack", "generic", "--sharding", "zero1", "--tp", "1", "--pp", "1"]
    res = runner.invoke(app, ["export", fmt, *pinned, *flags])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}:"), res.stderr
