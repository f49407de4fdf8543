"""RoPE scaling and attention sinks in the Megatron-LM export (planner/exports/rope_settings.py): written where
Megatron-LM's arguments.py has the flag (each in MEGATRON_FLAG_SOURCES with where it was checked), a note where it
has none. Before this, YaRN, Llama 3's scaling and gpt-oss's sinks were dropped without a word; the RoPE base
(--rotary-base) and the sinks' attention kernel came later."""

import json

import pytest

from planner.errors import PlanError
from planner.exports.megatron_args import megatron_args
from planner.hf_config import load_hf_config
from planner.presets import resolve_model
from planner.scenario import ExecutionPlan
from tests.exports.test_export_megatron import CHOICES, MEGATRON_FLAG_SOURCES, values
from tests.planner.test_hf_moe import _gpt_oss

ROPE_FLAGS = ("--softmax-type", "--use-rope-scaling", "--rope-scaling-factor", "--rope-type", "--rotary-scaling-factor",
              "--mscale", "--mscale-all-dim")


def _export(preset: str, **kw) -> tuple[list[str], list[str]]:
    plan = ExecutionPlan(**{"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1, "grad_accum": 1, "seq_len": 4096,
                            "sharding": "zero1", "stack": "megatron", **kw})
    notes: list[str] = []
    return megatron_args(plan, resolve_model(preset), notes=notes), notes


def _rope_flags(args: list[str]) -> list[str]:
    written = [a for a in args if a in ROPE_FLAGS]
    for flag in written:
        assert flag in MEGATRON_FLAG_SOURCES, flag
        if flag in CHOICES:
            assert set(values(args, flag)) <= CHOICES[flag], (flag, values(args, flag))
    return written


def test_gpt_oss_writes_its_learnable_sinks_and_says_its_yarn_has_no_flag():
    args, notes = _export("gpt-oss-20b", ep=8)
    assert _rope_flags(args) == ["--softmax-type"] and values(args, "--softmax-type") == ["learnable"]
    assert values(args, "--position-embedding-type") == ["rope"]
    yarn = [n for n in notes if n.startswith("RoPE:")]
    assert len(yarn) == 1 and "YaRN (x32 from 4,096 positions) has no Megatron-LM flag" in yarn[0]


@pytest.mark.parametrize("preset, mscale", [("deepseek-v3", "1"), ("deepseek-v2-lite", "0.707")])
def test_deepseek_mla_writes_yarn_with_its_attention_scales(preset, mscale):
    args, notes = _export(preset, ep=8)
    assert _rope_flags(args) == ["--rope-type", "--rotary-scaling-factor", "--mscale", "--mscale-all-dim"]
    assert values(args, "--rope-type") == ["yarn"] and values(args, "--rotary-scaling-factor") == ["40"]
    # Megatron's defaults (mscale 1.0, mscale_all_dim 0.0) are not DeepSeek's: both written
    assert values(args, "--mscale") == [mscale] and values(args, "--mscale-all-dim") == [mscale]
    assert any("sec. 4.3" in n for n in notes)


def test_llama3_405b_writes_megatrons_llama3_rule_and_plain_models_write_none():
    args, notes = _export("llama3-405b", tp=8, dp=1)
    assert _rope_flags(args) == ["--use-rope-scaling", "--rope-scaling-factor"]
    assert values(args, "--rope-scaling-factor") == ["8"]
    assert not [n for n in notes if n.startswith("RoPE:")]  # original 8192, Megatron-Core's fixed one
    plain, plain_notes = _export("llama2-7b")
    assert _rope_flags(plain) == [] and not [n for n in plain_notes if n.startswith("RoPE:")]


def test_the_config_reader_takes_rope_scaling_and_gpt_oss_sinks(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_gpt_oss(24, 32)))
    spec = load_hf_config(path)
    assert (spec.rope_scaling, spec.rope_scaling_factor, spec.attn_sinks) == ("yarn", 32.0, True)
    preset = resolve_model("gpt-oss-20b")
    assert (preset.rope_scaling, preset.rope_scaling_factor, preset.attn_sinks) == ("yarn", 32.0, True)
    bad = {**_gpt_oss(24, 32), "rope_scaling": {"rope_type": "yarn", "factor": "x32"}}
    path.write_text(json.dumps(bad))
    with pytest.raises(Exception, match="rope_scaling.factor"):
        load_hf_config(path)


@pytest.mark.parametrize("preset, base", [("llama3-8b", "500000"), ("llama3-405b", "500000"),
                                          ("mixtral-8x7b", "1000000"), ("gpt-oss-20b", "150000"),
                                          ("deepseek-v3", "10000"), ("llama2-7b", "10000")])
def test_every_rope_model_writes_its_rotary_base(preset, base):
    """Megatron-LM's --rotary-base defaults to 10000 (arguments.py, MEGATRON_FLAG_SOURCES): without the flag a
    Llama 3 or Qwen3 export trains with the wrong base."""
    args, _ = _export(preset, ep=8 if resolve_model(preset).moe_experts else 1)
    assert values(args, "--rotary-base") == [base]
    assert "--rotary-base" in MEGATRON_FLAG_SOURCES


def test_learned_positions_write_no_base_and_a_fractional_base_is_rounded_with_a_note(tmp_path):
    args, _ = _export("gpt2-xl", seq_len=1024)
    assert "--rotary-base" not in args
    model = load_hf_config("tests/fixtures/hf_configs/starcoder2-3b.json")  # rope_theta 999999.4420358813
    plan = ExecutionPlan(tp=1, pp=1, dp=8, micro_batch=1, grad_accum=1, seq_len=4096, stack="megatron")
    notes: list[str] = []
    args = megatron_args(plan, model, notes=notes)
    assert values(args, "--rotary-base") == ["999999"]
    assert any("--rotary-base 999999" in n and "integer" in n for n in notes)


def test_gpt_oss_sinks_run_in_te_fused_attention_not_flash_attention():
    """Transformer Engine disables FlashAttention for softmax_type learnable (its get_attention_backend, cited in
    planner/exports/rope_settings.py): the sink model's fused-kernel plan asks for cuDNN FusedAttention."""
    args, _ = _export("gpt-oss-20b", ep=8)
    assert values(args, "--attention-backend") == ["fused"] and "--use-flash-attn" not in args
    assert set(values(args, "--attention-backend")) <= CHOICES["--attention-backend"]
    eager, _ = _export("gpt-oss-20b", ep=8, attention="eager")  # TE's unfused attention runs sinks too
    assert values(eager, "--attention-backend") == ["unfused"] and "--use-flash-attn" not in eager
    plain, _ = _export("llama3-8b")  # no sinks, no GPU given: TE's own pick (planner/exports/attention_backend.py)
    assert values(plain, "--attention-backend") == ["auto"] and "--use-flash-attn" not in plain
    # Ulysses is TE's a2a, the one context parallelism that runs sinks
    cp, _ = _export("gpt-oss-20b", ep=4, dp=4, cp=2, cp_impl="ulysses")
    assert values(cp, "--cp-comm-type") == ["a2a"] and values(cp, "--attention-backend") == ["fused"]


@pytest.mark.parametrize("kw, field", [({"attention": "flash2"}, "attention"), ({"attention": "triton"}, "attention"),
                                       ({"cp": 2, "dp": 4, "ep": 4, "cp_impl": "ring"}, "cp_impl"),
                                       ({"cp": 2, "dp": 4, "ep": 4, "cp_impl": "allgather"}, "cp_impl")])
def test_gpt_oss_sinks_refuse_kernels_and_context_parallelism_te_cannot_run(kw, field):
    with pytest.raises(PlanError) as e:
        _export("gpt-oss-20b", **{"ep": 8, **kw})
    assert e.value.field == field and "allowed:" in str(e.value)
