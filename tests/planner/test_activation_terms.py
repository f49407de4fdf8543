"""Per-op selective AC as torchtitan saves it (planner/activation_terms.py), counted by hand."""

import numpy as np
import pytest

from planner import memory
from planner.activation_terms import op_sac_block_bytes
from planner.layout import Layout
from planner.model import ModelSpec
from planner.scenario import ExecutionPlan

LLAMA8B = ModelSpec(name="llama3-8b", n_layers=32, hidden=4096, n_heads=32, n_kv_heads=8, ffn_hidden=14336,
                    vocab=128256, max_positions=8192, mlp="swiglu", norm="rmsnorm", position="rope",
                    tied_embeddings=False, bias=False)


def _op(spec, **kw):
    return float(op_sac_block_bytes(spec, Layout.from_plan(ExecutionPlan(activation_checkpointing="op", **kw)))[0])


def test_llama_block_keeps_input_odd_matmuls_and_attention_output():
    s, b = 8192, 2
    # per token, bf16: block input, wq (h), wv (kv), w1 (ffn), w2 (h), SDPA output (h); fp32 lse per head
    by_hand = s * b * ((4096 + 4096 + 1024 + 14336 + 4096 + 4096) * 2 + 4 * 32)
    assert _op(LLAMA8B, seq_len=s, micro_batch=b, precision="bf16") == pytest.approx(by_hand)


def test_gelu_mlp_saves_fc1_only_and_tensor_parallel_splits_with_sequence_parallelism():
    gpt = ModelSpec(name="gpt", n_layers=24, hidden=2048, n_heads=16, vocab=50304, max_positions=2048)
    s = 2048
    by_hand = s * ((2048 + 2048 + 2048 + 4 * 2048 + 2048) * 2 + 4 * 16)  # input, wq, wv, fc1, attn out
    assert _op(gpt, seq_len=s) == pytest.approx(by_hand)
    split = _op(gpt, seq_len=s, tp=4, dp=1, sequence_parallel=True)
    assert split == pytest.approx(by_hand / 4)


def test_op_sac_sits_between_no_recompute_and_full_recompute():
    kw = dict(seq_len=8192, micro_batch=1, precision="bf16")
    acts = {ck: float(memory.activation_bytes(LLAMA8B, Layout.from_plan(
        ExecutionPlan(activation_checkpointing=ck, **kw)))[0]) for ck in ("none", "op", "full")}
    assert acts["full"] < acts["op"] < acts["none"]
    assert np.isfinite(list(acts.values())).all()


def test_deepspeed_pipeline_keeps_one_stage_output_per_micro_batch_in_flight():
    from planner.activation_terms import pipeline_outputs_bytes
    from planner.settings import Settings
    from planner.system import System
    from hardware.catalog import load_catalog

    gpt = ModelSpec(name="gpt", n_layers=24, hidden=2048, n_heads=16, vocab=50304, max_positions=2048)
    plan = ExecutionPlan(tp=2, pp=4, dp=1, micro_batch=2, grad_accum=8, seq_len=2048, precision="bf16")
    lay = Layout.from_plan(plan)
    one_output = 2048 * 2 * 2048 * 2  # s * b * h, bf16, replicated over tp without sequence parallelism
    assert pipeline_outputs_bytes(gpt, lay, 1.0)[0] == pytest.approx(4 * one_output)  # pp micro batches
    few = Layout.from_plan(plan.model_copy(update={"grad_accum": 2}))
    assert pipeline_outputs_bytes(gpt, few, 1.0)[0] == pytest.approx(2 * one_output)
    flat = Layout.from_plan(plan.model_copy(update={"pp": 1, "dp": 4}))
    assert pipeline_outputs_bytes(gpt, flat, 1.0)[0] == 0.0
    # the catalog's Megatron-DeepSpeed profile keeps them, Megatron-LM's does not
    cat = load_catalog()
    sys_ = System(gpu=cat.gpus["a100-80gb"], gpus=8, gpus_per_node=8, host_ram_gib=1024, host_to_gpu_gbps=256,
                  intranode_gbps=2400, internode_gbps=1600)
    acts = {st: float(memory.memory_arrays(gpt, Layout.from_plan(plan.model_copy(update={"stack": st})), sys_,
                                           Settings())["activations_bytes"][0])
            for st in ("megatron", "megatron_deepspeed")}
    assert acts["megatron_deepspeed"] - acts["megatron"] == pytest.approx(4 * one_output)
