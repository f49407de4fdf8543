"""A plan as Megatron-LM / Megatron-Core `pretrain_gpt.py` arguments: the model shape, the
parallel layout (tp/pp, interleaving, the uneven split, context and sequence parallelism), the
distributed optimizer, the batch, recompute and precision. Data, tokenizer and learning-rate
arguments stay the user's own.

Every flag was checked against Megatron-LM's megatron/training/arguments.py (the list the tests
hold, MEGATRON_FLAG_SOURCES in tests/exports/test_export_megatron.py):
- --window-size (tuple_type "left,right") and --window-attn-skip-freq ("An integer N: ... one full
  attention layer after (N-1) SWA layers") of `_add_network_size_args` in a 2025 Megatron-LM
  arguments.py (the one with --softmax-type and _add_kitchen_quantization_arguments);
- NVIDIA/Megatron-LM@307dcf37f03d44da131ba21999278abe4112d2ad (2024, every flag an explicit
  `add_argument`): the model shape, --normalization, --swiglu, --fp8-format (choices e4m3|hybrid),
  tp/pp/cp sizes, --sequence-parallel, --use-distributed-optimizer, --overlap-grad-reduce,
  --overlap-param-gather, --recompute-granularity/-method/-num-layers, --tp-comm-overlap,
  the batch;
- Anai-Guo/Megatron-LM@38d7226546e40591cf82c23f41d38796978f5129 (a 2026 fork of main):
  --num-virtual-stages-per-pipeline-rank, --decoder-first/last-pipeline-num-layers, --cp-comm-type;
  the TransformerConfig-derived flags (--account-for-*-in-pipeline-split,
  --hierarchical-context-parallel-sizes) are the dataclass fields spelled with dashes.

Mixture-of-experts flags: planner/exports/moe_settings.py (checked in the same file, `_add_moe_args`); RoPE
base and scaling, attention sinks and the attention kernel they need: planner/exports/rope_settings.py; the attention
kernel (--attention-backend, the one the plan was timed with): planner/exports/attention_backend.py.

Megatron's validate_args asserts --tp-comm-overlap needs --sequence-parallel and
--overlap-param-gather needs --use-distributed-optimizer and --overlap-grad-reduce (same file).
"""

from __future__ import annotations

from hardware.models import GPU
from hardware.stacks import StackProfile
from planner import grad_dtype
from planner.errors import PlanError
from planner.exports import attention_backend, memory_settings, mla_settings, moe_settings, rope_settings
from planner.exports.cp_settings import megatron_args as cp_args
from planner.memory_recipe import MemoryRecipe
from planner.model import ModelSpec
from planner.moe_options import MoeOptions
from planner.scenario import ExecutionPlan

STACKS = ("megatron", "generic")
_RECOMPUTE = {"none": [], "selective": ["--recompute-granularity", "selective"],
              "full": ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]}
# fp8: Transformer Engine's hybrid format (e4m3 forward, e5m2 gradients) on top of bf16
_PRECISION = {"bf16": ["--bf16"], "fp16": ["--fp16"], "fp32": [], "fp8": ["--bf16", "--fp8-format", "hybrid"]}
_OPTIMIZER = {"adamw": [], "sgd": ["--optimizer", "sgd"]}  # Megatron's adam is AdamW (decoupled decay)


def refusal(plan: ExecutionPlan) -> PlanError | None:
    """Why Megatron-LM cannot run `plan` as planned (None: it can)."""
    if plan.stack not in STACKS:
        return PlanError("stack", f"{plan.stack} plans are not Megatron-LM runs (allowed: {', '.join(STACKS)})")
    if plan.sharding not in ("none", "zero1"):
        return PlanError("sharding", f"{plan.sharding} is not Megatron-LM's (allowed: none, zero1 as "
                         "--use-distributed-optimizer)")
    if plan.offload != "none":
        return PlanError("offload", f"{plan.offload}: Megatron-LM keeps the optimizer on the GPU here (allowed: none)")
    if plan.activation_offload:
        return PlanError("activation_offload", "is DeepSpeed's (partition_activations + cpu_checkpointing); "
                         "Megatron-LM has no such flag (allowed: false)")
    if plan.activation_checkpointing not in _RECOMPUTE:
        return PlanError("activation_checkpointing", f"{plan.activation_checkpointing} has no Megatron-LM flag "
                         f"(allowed: {', '.join(_RECOMPUTE)})")
    if plan.precision not in _PRECISION:
        return PlanError("precision", f"{plan.precision} has no Megatron-LM flag (allowed: {', '.join(_PRECISION)})")
    if plan.optimizer not in _OPTIMIZER:
        return PlanError("optimizer", f"{plan.optimizer} is not a Megatron-LM optimizer (allowed: {', '.join(_OPTIMIZER)})")
    if plan.compile:
        return PlanError("compile", "Megatron-LM does not torch.compile the model (allowed: false)")
    if (why := moe_settings.megatron_plan_refusal(plan)) is not None:
        return why
    if plan.async_tp and not plan.sequence_parallel:
        return PlanError("async_tp", "--tp-comm-overlap needs --sequence-parallel in Megatron-LM "
                         "(allowed: async_tp with sequence_parallel)")
    return None


def model_refusal(model: ModelSpec) -> PlanError | None:
    """Why Megatron-LM's GPT model cannot build `model` (None: it can)."""
    if model.parallel_block:
        return PlanError("parallel_block", f"{model.name}: Megatron-LM's GPT layer is sequential "
                         "(attention then MLP); no flag builds a parallel block")
    if model.norm == "nonparametric" or model.norms_per_layer != 2 or model.qk_norm != "none" or model.embedding_norm:
        return PlanError("norm", f"{model.name}: Megatron-LM flags build two LayerNorm/RMSNorm per layer, "
                         "no extra, post, q/k or embedding norms")
    if model.position in ("alibi", "none"):
        what = "ALiBi" if model.position == "alibi" else "GPT flag for no position encoding"
        return PlanError("position", f"{model.name}: Megatron-LM has no {what} (allowed: learned, rope)")
    if model.attn_chunked:
        return PlanError("attn_chunked", f"{model.name}: Megatron-LM has no chunked local attention (allowed: "
                         "a sliding window, --window-size)")
    if model.attn_window is not None and _skip_freq(model) is None:
        return PlanError("attn_local_layers", f"{model.name}: {model.attn_local_layers} local layers of "
                         f"{model.n_layers} is no --window-attn-skip-freq N (one global layer after N-1 local "
                         "ones); allowed: all layers local, or such a period")
    return None


def _skip_freq(model: ModelSpec) -> int | None:
    """Megatron's --window-attn-skip-freq N: layer l (1-based) is global where l % N == 0 (0: all
    local), matching the model's count of local layers (Gemma 2: 2, Gemma 3: 6); None: no period does."""
    if model.attn_local_layers is None or model.attn_local_layers == model.n_layers:
        return 0
    n = model.n_layers
    return next((p for p in range(1, n + 1) if sum(1 for layer in range(1, n + 1) if layer % p) ==
                 model.attn_local_layers), None)


def window_args(model: ModelSpec) -> list[str]:
    """Sliding-window attention: --window-size "w-1,0" (keys i-w+1 .. i: FlashAttention's window_size
    (left, right), the w keys of Hugging Face's sliding_window) and the local/global period."""
    if model.attn_window is None:
        return []
    args = ["--window-size", f"{model.attn_window - 1},0"]
    freq = _skip_freq(model)
    return args + (["--window-attn-skip-freq", str(freq)] if freq else [])


def model_args(model: ModelSpec, seq_len: int) -> list[str]:
    """The model shape: a GPT block, or a LLaMA block with its flags."""
    args = ["--num-layers", str(model.n_layers), "--hidden-size", str(model.hidden),
            "--num-attention-heads", str(model.n_heads), "--ffn-hidden-size", str(model.ffn)]
    if model.attn_head_dim is not None:
        args += ["--kv-channels", str(model.head_dim)]
    if model.kv_heads != model.n_heads:
        args += ["--group-query-attention", "--num-query-groups", str(model.kv_heads)]
    args += ["--seq-length", str(seq_len), "--max-position-embeddings", str(max(seq_len, model.max_positions)),
             "--make-vocab-size-divisible-by", str(model.vocab_multiple)]
    if model.position == "rope":
        args += ["--position-embedding-type", "rope"]
    if model.norm == "rmsnorm":
        args += ["--normalization", "RMSNorm"]
    if model.mlp == "swiglu":
        args.append("--swiglu")
    if not model.tied_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if not model.bias:
        args.append("--disable-bias-linear")
        if model.qkv_bias:
            args.append("--add-qkv-bias")
    return args + window_args(model)


def parallel_args(plan: ExecutionPlan, gpus_per_node: int) -> list[str]:
    """The layout: tp/pp, interleaving, the uneven split, cp, sequence parallelism and the
    data-parallel overlaps."""
    args = ["--tensor-model-parallel-size", str(plan.tp), "--pipeline-model-parallel-size", str(plan.pp)]
    if plan.vpp > 1:  # Megatron-Core's spelling that also takes uneven splits
        args += ["--num-virtual-stages-per-pipeline-rank", str(plan.vpp)]
    if plan.first_stage_layers:
        args += ["--decoder-first-pipeline-num-layers", str(plan.first_stage_layers)]
    if plan.last_stage_layers:
        args += ["--decoder-last-pipeline-num-layers", str(plan.last_stage_layers)]
    if plan.embedding_in_split:
        args.append("--account-for-embedding-in-pipeline-split")
    if plan.loss_in_split:
        args.append("--account-for-loss-in-pipeline-split")
    args += cp_args(plan, gpus_per_node)
    if plan.sequence_parallel:
        args.append("--sequence-parallel")
    if plan.async_tp:
        args.append("--tp-comm-overlap")
    if plan.dp > 1:
        args.append("--overlap-grad-reduce")
    if plan.sharding == "zero1":
        args += ["--use-distributed-optimizer", "--overlap-param-gather"]
        if plan.dp == 1:  # --overlap-param-gather asserts --overlap-grad-reduce
            args.append("--overlap-grad-reduce")
    return args


def megatron_args(plan: ExecutionPlan, model: ModelSpec, gpus_per_node: int = 8, *, moe: MoeOptions | None = None,
                  notes: list[str] | None = None, memory: MemoryRecipe | None = None,
                  profile: StackProfile | None = None, gpu: GPU | None = None) -> list[str]:
    """The arguments, one flag and its values after the other (`gpu`: the one the plan was timed on, which picks
    the attention kernel; `profile`: plan.stack's, None: the built-in catalog's). A plan or model Megatron-LM cannot
    run is a PlanError naming the field; the MoE routing and overlap flags as planned (planner/exports/moe_settings.py,
    moe_routing.py); the memory-saving switches (planner/exports/memory_settings.py)."""
    for why in (refusal(plan), model_refusal(model), moe_settings.megatron_model_refusal(plan, model),
                rope_settings.megatron_refusal(plan, model), attention_backend.megatron_refusal(plan)):
        if why is not None:
            raise why
    recompute, optimizer = memory_settings.megatron_args(plan, model, memory or MemoryRecipe(), notes)
    args = (model_args(model, plan.seq_len) + rope_settings.megatron_args(model, notes) + mla_settings.megatron_args(model)
            + parallel_args(plan, gpus_per_node)
            + moe_settings.megatron_args(plan, model, moe, gpus_per_node, notes))
    args += ["--micro-batch-size", str(plan.micro_batch), "--global-batch-size", str(plan.global_batch)]
    args += (recompute or _RECOMPUTE[plan.activation_checkpointing]) + _PRECISION[plan.precision] + _OPTIMIZER[plan.optimizer]
    args += optimizer + grad_reduce_args(plan, profile)
    if notes is not None and (note := grad_reduce_note(plan, profile)) is not None:
        notes.append(note)
    # the kernel the plan was timed with (Megatron has no Triton FlashAttention: flash-attn's CUDA one); sinks: cuDNN's
    return args + attention_backend.megatron_args(plan, model, profile or grad_dtype.profile_of(plan), gpu, notes)


def grad_reduce_args(plan: ExecutionPlan, profile: StackProfile | None = None) -> list[str]:
    """The dtype the plan's gradients are reduced in (planner/grad_dtype.py: its grad_reduce_dtype, "default" resolved
    by the stack profile `profile` as its timing counts it) as Megatron-LM flags. validate_args of
    NVIDIA/Megatron-LM@000c4ac24f61159c138b0975def722c65245983c megatron/training/arguments.py: under --bf16,
    accumulate_allreduce_grads_in_fp32 is turned on unless --grad-reduce-in-bf16; under --fp16 it stays off
    unless --accumulate-allreduce-grads-in-fp32 is given. An fp32 plan's gradients are fp32 (no flag)."""
    if plan.precision == "fp32":
        return []
    if _dtype(plan, profile) == "fp32":
        return ["--accumulate-allreduce-grads-in-fp32"]
    return ["--grad-reduce-in-bf16"] if plan.precision in ("bf16", "fp8") else []


def _dtype(plan: ExecutionPlan, profile: StackProfile | None) -> str:
    return plan.grad_reduce_dtype if plan.grad_reduce_dtype != "default" else grad_dtype.reduce_dtype(plan, profile)


def grad_reduce_note(plan: ExecutionPlan, profile: StackProfile | None = None) -> str | None:
    """Which dtype a default grad_reduce_dtype was resolved to (the plan's stack profile) and the flag written for it:
    without a flag Megatron-LM under --bf16 reduces in fp32, which is not what every plan was timed with."""
    if plan.grad_reduce_dtype != "default" or plan.precision == "fp32":
        return None
    flags, dtype = grad_reduce_args(plan, profile), _dtype(plan, profile)
    how = f"written as {flags[0]}" if flags else "Megatron-LM's own default for this precision, no flag"
    # an fp32 reduction holds Megatron-Core's fp32 main-gradient buffer, and the plan's memory counts it
    # (planner/main_grads.py resident_fp32; a stack without Core's DDP: torch DDP's fp32 gradients, amp_ddp)
    held = "; memory counts the fp32 main-gradient buffer it fills (4 bytes a parameter)" if dtype == "fp32" else ""
    return (f"gradients: reduced in {dtype} as the plan was timed (grad_reduce_dtype default, stack "
            f"profile {plan.stack}): {how}{held}; plan with --grad-reduce-dtype fp32|bf16 to choose")


def flag_lines(args: list[str]) -> list[str]:
    """One flag with its values per line."""
    lines: list[str] = []
    for a in args:
        if a.startswith("--") or not lines:
            lines.append(a)
        else:
            lines[-1] += f" {a}"
    return lines


def args_script(args: list[str], *, header: list[str], nproc_per_node: int, nodes: int) -> str:
    """A bash file defining MEGATRON_ARGS, one flag per line, and the launch line it goes into."""
    body = "\n".join(f"    {line}" for line in flag_lines(args))
    comments = "\n".join(f"# {h}" for h in header)
    return (f"#!/bin/bash\n{comments}\n# source this file, then add the data, tokenizer and learning-rate arguments:\n"
            f"#   torchrun --nproc-per-node {nproc_per_node} --nnodes {nodes} pretrain_gpt.py \"${{MEGATRON_ARGS[@]}}\" ...\n"
            f"MEGATRON_ARGS=(\n{body}\n)\n")
