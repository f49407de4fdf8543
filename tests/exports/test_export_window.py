"""Sliding-window models in the exports: Megatron-LM gets --window-size (and the local/global
period as --window-attn-skip-freq); the bundled trainer's launchers export it (trainer/local_attention.py builds
the window); the other formats carry no model shape."""

from __future__ import annotations

import pytest

from planner.exports.bundle import Chosen, export
from planner.exports.megatron_args import megatron_args, model_refusal
from planner.model import LLAMA_BLOCK, ModelSpec
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from tests.exports.test_export_megatron import check_flags, values

PLAN = ExecutionPlan(tp=2, dp=4, sharding="zero1", micro_batch=1, grad_accum=8, seq_len=8192)
# Gemma-2-9B-like shape with a LLaMA block (Megatron builds no Gemma post-norms): 42 layers, 21 local
GEMMA2_LIKE = ModelSpec(name="gemma2-like", n_layers=42, hidden=3584, n_heads=16, n_kv_heads=8, attn_head_dim=256,
                        ffn_hidden=14336, vocab=256000, attn_window=4096, attn_local_layers=21, **LLAMA_BLOCK)


def test_mistral_window_on_every_layer():
    args = megatron_args(PLAN, resolve_model("mistral-7b"))
    check_flags(args)
    assert values(args, "--window-size") == ["4095,0"]  # keys i-4095 .. i: 4096 keys
    assert "--window-attn-skip-freq" not in args


@pytest.mark.parametrize("local,freq", [(21, "2"), (35, "6")])
def test_local_global_period(local, freq):
    """Megatron: layer l (1-based) is global where l % N == 0; Gemma 2 alternates (N 2), Gemma 3's
    5:1 over 42 layers leaves 35 local (N 6)."""
    args = megatron_args(PLAN, GEMMA2_LIKE.model_copy(update={"attn_local_layers": local}))
    check_flags(args)
    assert values(args, "--window-attn-skip-freq") == [freq]


def test_a_local_count_without_a_period_is_refused():
    why = model_refusal(GEMMA2_LIKE.model_copy(update={"attn_local_layers": 31}))  # 11 global: no N
    assert why is not None and why.field == "attn_local_layers"


def test_no_window_writes_no_window_flag():
    assert "--window-size" not in megatron_args(PLAN, resolve_model("llama2-7b"))


@pytest.mark.parametrize("fmt", ["torchrun", "slurm"])
def test_the_bundled_trainer_runs_a_window(fmt):
    plan = ExecutionPlan(dp=8, sharding="zero1", micro_batch=1, grad_accum=8, seq_len=8192)
    system = resolve_system(Scenario(cluster="dgx-h100", gpus=8))
    out = export(fmt, Chosen(plan=plan, model_ref="mistral-7b", system=system, step_time_s=1.0, tokens=1e9))
    assert "--model mistral-7b" in out.files[0].content
    export("deepspeed", Chosen(plan=plan, model_ref="mistral-7b", system=system))  # no model shape: fine
