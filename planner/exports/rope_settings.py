"""RoPE scaling (YaRN, Llama 3's rule) and learnable attention sinks as Megatron-LM flags, and a note where
Megatron-LM has no flag for them (the feature is said, not dropped).

Checked in a 2025 Megatron-LM megatron/training/arguments.py (the one with --softmax-type; stored index file id
253976787, as planner/exports/megatron_args.py's window flags):
- --softmax-type {vanilla, off-by-one, learnable} (_add_network_size_args: "Supports both a fixed offset and
  learnable offset"): learnable is gpt-oss's per-head sink logit (transformers GptOssAttention.sinks).
- --use-rope-scaling ("Apply rope scaling as used in llama3.x") and --rope-scaling-factor (float, default 8.0),
  _add_network_size_args. Megatron-Core fixes the rest of the rule: low_freq_factor 1, high_freq_factor 4 and
  an original context of 8192 (NVIDIA/Megatron-LM@00caa53af30912914981c86f39db123961678bbd
  megatron/core/models/common/embeddings/rotary_pos_embedding.py RotaryEmbedding._apply_scaling), Llama 3.1's.
- --rope-type {rope, yarn} (_add_training_args: "MLA takes yarn by default, and common attention takes rope by
  default") and _add_mla_args' --rotary-scaling-factor (default 1.0), --mscale (default 1.0) and
  --mscale-all-dim (default 0.0): YaRN for multi-latent attention, with DeepSeek's two attention scales.
- --rotary-base (type=int, default 10000: "Base to use for rotary positional embeddings", _add_network_size_args):
  written for every RoPE model (ModelSpec.rope_theta), else Megatron trains a Llama 3 (500000) or Qwen (1e6) export
  with base 10000. An integer only: a
  fractional base (StarCoder2-3B's 999999.44) is rounded, with a note.
- --attention-backend (AttnBackend: flash, fused, unfused, local, auto; default auto), _add_network_size_args.

Learnable sinks and the attention kernel: Megatron-Core hands --softmax-type to Transformer Engine's DotProductAttention
(NVIDIA/Megatron-LM@004fe2f1fc4934056b4c30e83b75a9f97f02f3d1 megatron/core/extensions/transformer_engine.py
TEDotProductAttention: asserts TE >= 2.8.0 for a softmax_type other than vanilla), and TE's backend filter
(NVIDIA/TransformerEngine@002a3e573f49cb0345955745206084e289d0f346 transformer_engine/pytorch/attention/
dot_product_attention/utils.py get_attention_backend, "Filter: Softmax type") disables FlashAttention for it: without
context parallelism FusedAttention (cuDNN) or UnfusedDotProductAttention run it, with context parallelism
FusedAttention only and only with cp_comm_type a2a (not p2p, allgather, a2a+p2p). So a sink model's fused-kernel plan
is written --attention-backend fused (planner/exports/attention_backend.py); FlashAttention-2 / Triton plans and cp_impl other
than ulysses are refused.
- --position-embedding-type's choices are learned_absolute, rope, mrope, relative and none: no YaRN for
  standard attention from the command line (Megatron-Core's GPTModel takes position_embedding_type 'yarn' from
  a Python model provider).
"""

from __future__ import annotations

from planner.errors import PlanError
from planner.model import ModelSpec
from planner.scenario import ExecutionPlan

LLAMA3_ORIGINAL = 8192  # Megatron-Core's fixed original context of the llama3 rule (module header)


def _num(x: float) -> str:
    return f"{x:g}"


def megatron_args(model: ModelSpec, notes: list[str] | None = None) -> list[str]:
    """The sink, RoPE base and RoPE-scaling flags of `model` (none for learned positions without sinks); what has no
    flag, a note."""
    args = ["--softmax-type", "learnable"] if model.attn_sinks else []
    note = None
    if model.position == "rope" and model.rope_theta is not None:
        base = round(model.rope_theta)
        args += ["--rotary-base", str(base)]
        if base != model.rope_theta and notes is not None:
            notes.append(f"RoPE: {model.name}'s base theta {model.rope_theta:g} written as --rotary-base {base} "
                         "(Megatron-LM's flag takes an integer)")
    if model.rope_scaling == "llama3":
        args += ["--use-rope-scaling", "--rope-scaling-factor", _num(model.rope_scaling_factor)]
        if model.train_seq_len not in (None, LLAMA3_ORIGINAL):
            note = (f"RoPE: {model.name}'s llama3 scaling starts from {model.train_seq_len:,} positions; Megatron-Core's "
                    f"--use-rope-scaling fixes {LLAMA3_ORIGINAL:,} (and frequency factors 1 and 4): check the "
                    "rotary frequencies against the checkpoint")
    elif model.rope_scaling == "yarn" and model.kv_lora_rank is not None:
        args += ["--rope-type", "yarn", "--rotary-scaling-factor", _num(model.rope_scaling_factor)]
        if model.yarn_mscale is not None:
            args += ["--mscale", _num(model.yarn_mscale)]
        if model.yarn_mscale_all_dim is not None:
            args += ["--mscale-all-dim", _num(model.yarn_mscale_all_dim)]
        note = (f"RoPE: YaRN x{_num(model.rope_scaling_factor)} as {model.name}'s config.json (its released "
                "checkpoint); DeepSeek pre-trained at 4K with plain RoPE and applied YaRN after (DeepSeek-V3 report, "
                "arXiv 2412.19437, sec. 4.3): for such a run drop --rotary-scaling-factor, --mscale and --mscale-all-dim")
    elif model.rope_scaling == "yarn":
        note = (f"RoPE: {model.name}'s YaRN (x{_num(model.rope_scaling_factor)} from "
                f"{model.train_seq_len or model.max_positions:,} positions) has no Megatron-LM flag for standard "
                "attention (--position-embedding-type allows learned_absolute, rope, mrope, relative, none; --rope-type "
                "yarn serves multi-latent attention): written as plain RoPE; Megatron-Core's GPTModel builds it with "
                "position_embedding_type 'yarn' from a Python model provider (e.g. Megatron-Bridge)")
    if note is not None and notes is not None:
        notes.append(note)
    return args


_SINK_KERNELS = ("flash", "cudnn", "eager")  # plan.attention values TE runs learnable sinks with (module header)


def megatron_refusal(plan: ExecutionPlan, model: ModelSpec) -> PlanError | None:
    """Why Megatron-Core / Transformer Engine cannot run `model`'s learnable sinks as `plan` has them (None: it can)."""
    if not model.attn_sinks:
        return None
    if plan.attention not in _SINK_KERNELS:
        return PlanError("attention", f"{model.name}'s learnable attention sinks (--softmax-type learnable) do not run in "
                         f"{plan.attention}: Transformer Engine disables FlashAttention for them (allowed: "
                         f"{', '.join(_SINK_KERNELS)})")
    if plan.cp > 1 and plan.cp_impl != "ulysses":
        return PlanError("cp_impl", f"{plan.cp_impl}: with context parallelism Transformer Engine runs {model.name}'s "
                         "learnable attention sinks in FusedAttention with cp_comm_type a2a only (allowed: ulysses)")
    return None

