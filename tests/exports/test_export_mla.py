"""Multi-head latent attention (DeepSeek-V2/V3) in the Megatron-LM export (planner/exports/mla_settings.py).

Each flag checked in NVIDIA/Megatron-LM megatron/training/arguments.py: --multi-latent-attention
(_add_network_size_args), --q-lora-rank, --kv-lora-rank, --qk-head-dim (the non-RoPE part: "q_head_dim =
qk_head_dim + qk_pos_emb_head_dim"), --qk-pos-emb-head-dim, --v-head-dim (_add_mla_args), --mtp-num-layers.
Before this, a DeepSeek model was exported as standard attention without a word.
"""

from planner.exports.megatron_args import megatron_args
from planner.presets import resolve_model
from planner.scenario import ExecutionPlan
from tests.exports.test_export_megatron import values


def _plan(**kw) -> ExecutionPlan:
    base = dict(tp=2, pp=16, dp=64, ep=64, micro_batch=1, grad_accum=8, seq_len=4096, sharding="zero1",
                stack="megatron", activation_checkpointing="selective", sequence_parallel=True)
    return ExecutionPlan(**{**base, **kw})


def test_deepseek_v3_writes_its_latent_widths():
    model = resolve_model("deepseek-v3")
    args = megatron_args(_plan(), model)
    assert "--multi-latent-attention" in args and "--qk-layernorm" in args
    # the published config.json: q_lora_rank 1536, kv_lora_rank 512, qk_nope 128, qk_rope 64, v 128, 1 MTP layer
    assert values(args, "--q-lora-rank") == ["1536"] and values(args, "--kv-lora-rank") == ["512"]
    assert values(args, "--qk-head-dim") == ["128"] and values(args, "--qk-pos-emb-head-dim") == ["64"]
    assert values(args, "--v-head-dim") == ["128"] and values(args, "--mtp-num-layers") == ["1"]
    # its MoE part rides along: 256 experts, top-8, 3 dense layers first
    assert values(args, "--num-experts") == ["256"] and values(args, "--moe-router-topk") == ["8"]
    assert values(args, "--moe-layer-freq") == ["([0]*3+[1]*58)"]
    flags = [a for a in args if a.startswith("--")]
    assert len(flags) == len(set(flags))


def test_v2_lite_has_no_query_compression_flag():
    # DeepSeek-V2-Lite: q_lora_rank null -> one q projection; Megatron's default --q-lora-rank is None
    args = megatron_args(_plan(tp=1, pp=1, dp=64, ep=64, sequence_parallel=False), resolve_model("deepseek-v2-lite"))
    assert "--multi-latent-attention" in args and "--q-lora-rank" not in args
    assert values(args, "--kv-lora-rank") == ["512"] and "--mtp-num-layers" not in args


def test_standard_attention_writes_no_mla_flag():
    args = megatron_args(_plan(ep=1, pp=4, dp=8, tp=2), resolve_model("llama2-7b"))
    assert not [a for a in args if "lora" in a or "latent" in a or "mtp" in a]
