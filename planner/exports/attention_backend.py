"""The attention kernel of a Megatron-LM export: --attention-backend set to the kernel the plan was timed with
(planner/attention_kernel.py), in place of --use-flash-attn.

Why not --use-flash-attn: in Megatron-Core it picks no kernel. NVIDIA/Megatron-LM@000c4ac24f61159c138b0975def722c65245983c
megatron/training/arguments.py (2025) still defines it (_add_training_args, "use FlashAttention implementation of
attention"), but reads it only in validate_args' deterministic-mode assert; core_transformer_config_from_args copies
only TransformerConfig fields, and TransformerConfig has `attention_backend` ("By default we let transformer engine
decide the best backend", default AttnBackend.auto), no use_flash_attn (megatron/core/transformer/transformer_config.py).
The 2024 NVIDIA/Megatron-LM@307dcf37f03d44da131ba21999278abe4112d2ad arguments.py is the same for the flag (the legacy,
non-core model read it) and has no --attention-backend. So a Megatron-Core run given --use-flash-attn runs Transformer
Engine's own pick: FusedAttention (cuDNN) on Hopper+ ("Disabling FlashAttention to give FusedAttention preference on
Hopper+", NVIDIA/TransformerEngine@a0b36d0cd3b7f77991a6e1e2aa75c10d668848e9 transformer_engine/pytorch/attention/
dot_product_attention/utils.py get_attention_backend), FlashAttention before: a FlashAttention-2 plan on an H100 ran
cuDNN, a cuDNN plan on an A100 ran FlashAttention, and an eager plan ran a fused kernel.

--attention-backend {flash, fused, unfused, local, auto} (megatron/core/transformer/enums.py AttnBackend; the 2025
arguments.py _add_network_size_args) goes to TransformerConfig.attention_backend, and Megatron-Core's LanguageModule
(NVIDIA/Megatron-LM@00c2c0adeec16015f386548793c88ef08ff6acec megatron/core/models/common/language_module/
language_module.py _set_attention_backend) turns it into Transformer Engine's switches: flash = NVTE_FLASH_ATTN=1
NVTE_FUSED_ATTN=0 NVTE_UNFUSED_ATTN=0, fused = 0 1 0, unfused = 0 0 1, auto = 1 1 1 (asserting any already set agree).
Those environment variables are how an older Megatron-LM (no --attention-backend) picks the same kernel.

Transformer Engine's filters (the utils.py above) that bear on the choice: its FlashAttention runs flash-attn 3 on
sm90 where that is installed (head_dim <= 128); FlashAttention does not run MLA (head_dim_qk != head_dim_v);
UnfusedDotProductAttention does not run context parallelism.
"""

from __future__ import annotations

from hardware.models import GPU
from hardware.stacks import StackProfile
from planner.attention_kernel import uses_cudnn
from planner.errors import PlanError
from planner.layout import ATTN
from planner.model import ModelSpec
from planner.scenario import ExecutionPlan

# Megatron's AttnBackend name of each kernel the planner times (planner/attention_kernel.py)
BACKEND = {"cudnn": "fused", "fa2": "flash", "eager": "unfused"}
# Transformer Engine's switches each backend sets (language_module.py _set_attention_backend, module header)
NVTE = {"flash": (1, 0, 0), "fused": (0, 1, 0), "unfused": (0, 0, 1), "auto": (1, 1, 1)}


def timed_kernel(plan: ExecutionPlan, profile: StackProfile, gpu: GPU | None) -> str | None:
    """The kernel planner/attention_kernel.py charges `plan`'s attention at: cudnn, fa2 (FlashAttention-2; Triton's
    FlashAttention too, which Megatron has not) or eager. None: the stack's fused kernel on a cudnn_attention stack
    with no GPU given (cuDNN where the GPU has a cuDNN curve, FlashAttention-2 where not)."""
    if plan.attention == "eager":
        return "eager"
    if not uses_cudnn(ATTN[plan.attention], int(profile.cudnn_attention)):
        return "fa2"
    if plan.attention == "cudnn":
        return "cudnn"
    if gpu is None:
        return None
    return "cudnn" if gpu.cudnn_attention_efficiency else "fa2"


def megatron_refusal(plan: ExecutionPlan) -> PlanError | None:
    """An eager plan with context parallelism: Transformer Engine's UnfusedDotProductAttention does not run it."""
    if plan.attention == "eager" and plan.cp > 1:
        return PlanError("attention", f"eager with context parallelism (cp {plan.cp}): Transformer Engine's "
                         "UnfusedDotProductAttention does not run context parallelism (allowed: flash, flash2, cudnn)")
    return None


def backend(plan: ExecutionPlan, model: ModelSpec, profile: StackProfile, gpu: GPU | None,
            notes: list[str] | None = None) -> str:
    """The --attention-backend value that runs the kernel `plan` was timed with on `gpu`; what cannot be matched, a
    note (learnable sinks and MLA run in cuDNN, Triton's FlashAttention as flash-attn's CUDA one)."""
    kernel = timed_kernel(plan, profile, gpu)
    say = notes.append if notes is not None else (lambda _: None)
    if kernel != "eager" and model.attn_sinks:  # TE disables FlashAttention for learnable sinks (rope_settings.py)
        return "fused"
    if kernel in ("fa2", None) and model.kv_lora_rank is not None:
        say(f"attention: {model.name}'s multi-head latent attention (q/k and v head dims differ) runs in Transformer "
            "Engine's cuDNN FusedAttention (--attention-backend fused): its FlashAttention does not run MLA; the plan "
            "timed FlashAttention-2")
        return "fused"
    if kernel is None:
        say("attention: no GPU given: --attention-backend auto lets Transformer Engine pick (cuDNN FusedAttention on "
            "Hopper and later, FlashAttention before), as the planner times a GPU with a cuDNN curve")
        return "auto"
    if plan.attention == "triton":
        say("attention: Megatron-LM has no Triton FlashAttention: --attention-backend flash runs flash-attn's CUDA "
            "kernel, faster than the Triton one the plan timed")
    if kernel == "fa2" and (gpu is None or gpu.cudnn_attention_efficiency):
        say("attention: Transformer Engine's FlashAttention runs flash-attn 3 on sm90 (H100/H200) where it is "
            "installed; the plan timed FlashAttention-2 (keep flash-attn 3 uninstalled to run it)")
    return BACKEND[kernel]


def version_note(value: str) -> str:
    """How an older Megatron-LM without --attention-backend runs the same kernel (module header)."""
    flash, fused, unfused = NVTE[value]
    return (f"--attention-backend {value}: a Megatron-LM without it (e.g. the 2024 307dcf37) rejects the flag; there "
            f"drop it and export NVTE_FLASH_ATTN={flash} NVTE_FUSED_ATTN={fused} NVTE_UNFUSED_ATTN={unfused} "
            "(Transformer Engine's switches; --use-flash-attn picks no Megatron-Core kernel)")


def megatron_args(plan: ExecutionPlan, model: ModelSpec, profile: StackProfile, gpu: GPU | None = None,
                  notes: list[str] | None = None) -> list[str]:
    """--attention-backend and its value (module header), with the older-Megatron note in `notes`."""
    value = backend(plan, model, profile, gpu, notes)
    if notes is not None:
        notes.append(version_note(value))
    return ["--attention-backend", value]
