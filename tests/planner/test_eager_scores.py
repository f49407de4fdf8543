"""Eager attention's saved scores by stack: Hugging Face's fp32 softmax keeps 6 B per score under
bf16 (fp32 output + 16-bit probabilities), Megatron's fused 16-bit softmax 2 B."""

from pathlib import Path

import numpy as np
import pytest

from planner import memory
from planner.layout import Layout
from planner.presets import resolve_model
from planner.runs import load_runs
from planner.scenario import ExecutionPlan
from planner.settings import Settings
from planner.validate import predict
from tests.planner.test_memory import system

DATA = Path(__file__).resolve().parents[2] / "validation" / "data"
BLOOM = resolve_model("bloom-7b1")


def activations(stack: str, precision="bf16") -> float:
    plan = ExecutionPlan(stack=stack, dp=8, sharding="zero1", seq_len=2048, micro_batch=2, precision=precision,
                         attention="eager", activation_checkpointing="none")
    m = memory.memory_arrays(BLOOM, Layout.from_plan(plan), system(gpus=8), Settings())
    return float(np.asarray(m["activations_bytes"]).reshape(-1)[0])


def test_hf_eager_attention_keeps_the_fp32_softmax():
    scores = BLOOM.n_heads * 2 * 2048 * 2048 * BLOOM.n_layers  # per micro batch, every block
    assert activations("hf") - activations("megatron_deepspeed") == pytest.approx(4.0 * scores, rel=1e-6)


def test_fp32_training_keeps_one_copy():
    assert activations("hf", "fp32") == pytest.approx(activations("megatron_deepspeed", "fp32"), rel=1e-9)


def test_seed003_zero2_at_2048_without_recompute_is_flagged():
    # s003-17: "Deepspeed stage 2 + gradacc 256, AdamW, bloom-7b, bs=2, context=2048, 32xA100: crash OOM"
    run = next(r for r in load_runs(DATA / "seed_runs.csv") if r.id == "s003-17")
    p = predict(run, Settings())
    assert run.outcome == "OOM" and p.verdict == "memory", p
