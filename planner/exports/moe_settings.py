"""A mixture-of-experts plan (ep, etp, the model's experts) in each export format, or a one-line refusal.

Megatron-LM writes it all. Every flag checked in NVIDIA/Megatron-LM megatron/training/arguments.py
(`_add_moe_args`, the 2025 file at commit 000c4ac24f61159c138b0975def722c65245983c):
--expert-model-parallel-size (default 1), --expert-tensor-parallel-size (default None: validate_args sets
it to --tensor-model-parallel-size, so it is always written), --num-experts, --moe-router-topk (default
2), --moe-ffn-hidden-size, --moe-shared-expert-intermediate-size ("Shared expert total ffn hidden size ...
num_shared_experts * ffn_size_of_each_shared_expert"), --moe-layer-freq (an integer N, or a Python list
pattern like "([0]*3+[1]*29)", 1 = MoE layer), --moe-grouped-gemm ("When there are multiple experts per
rank"), --moe-token-dispatcher-type (allgather | alltoall | flex; default allgather, "We recommend using
'alltoall' when applying expert parallelism"), --moe-expert-capacity-factor ("None means no token will be
dropped"), --moe-pad-expert-input-to-capacity, --moe-token-drop-policy. Megatron-Core's
megatron/core/model_parallel_config.py ModelParallelConfig.__post_init__: "When using expert
parallelism and tensor parallelism, sequence parallelism must be used".

The planner models dropless routing with the busiest expert at 1.25 x the mean load and the all-to-all
dispatcher (planner/moe_time.py): alltoall is written, no capacity factor (Megatron-Core's dropless
default); the header names the flags that would cap the load at the planner's 1.25. A planned capacity
factor, node-limited routing (DeepEP's flex dispatcher) or FP8 dispatch: planner/exports/moe_routing.py.

All-to-all overlap (planner/moe_overlap.py; the export's `a2a_overlap` / `shared_overlap`, from
Settings.moe_a2a_overlap / moe_shared_expert_overlap): --overlap-moe-expert-parallel-comm ("Overlap the EP A2A
communication by batch-level overlapping in 1f1b stage") with --delay-wgrad-compute ("Delay the wgrad compute
for batch-level overlapping"), and --moe-shared-expert-overlap ("Enable overlapping between shared expert
computations and dispatcher communications ... Only effective when moe-shared-expert-intermediate-size is
set"), all three in `_add_moe_args` of the same file. Megatron-Core megatron/core/transformer/
transformer_config.py TransformerConfig.__post_init__ asserts for the batch-level overlap: expert parallelism
("only supported with expert model parallelism"), the alltoall/flex dispatcher, no full recomputation ("disable
full recomputation when enabling overlap_moe_expert_parallel_comm"), a bf16/fp16 model, virtual pipeline
stages when pp > 1 ("virtual_pipeline_model_parallel_size must be specified when pipeline_model_parallel_size
> 1"), and not with moe_shared_expert_overlap; delay_wgrad_compute needs the overlap. Such plans are refused
in one line naming the field.

The other formats: a DeepSpeed config has no expert-parallel key (DeepSpeed-MoE takes ep_size in
deepspeed.moe.layer.MoE(...), in the model code), neither have FSDP settings nor accelerate's YAML, and
the bundled trainer (torchrun, slurm) keeps every expert on every rank (trainer/moe.py) and runs an MoE model with
data parallelism and FSDP/ZeRO sharding only, tp and pp 1 (trainer/config.py validate_layout). An MoE model at ep 1
(every expert on every GPU) is what those configs run, with the user's own MoE model code or the bundled trainer's:
exported with a note; ep or etp > 1 is refused, and tp or pp > 1 on the bundled trainer.
"""

from __future__ import annotations

from planner import moe
from planner.errors import PlanError
from planner.exports import moe_routing
from planner.model import ModelSpec
from planner.moe_options import MoeOptions
from planner.scenario import ExecutionPlan

MODEL_CODE_FORMATS = ("deepspeed", "fsdp", "accelerate")


def refusal(fmt: str, plan: ExecutionPlan, model: ModelSpec | None = None) -> PlanError | None:
    """Why `fmt` cannot write the plan's expert settings (None: it can, or there are none)."""
    if fmt == "megatron":
        return megatron_plan_refusal(plan)
    if plan.ep > 1 or plan.etp > 1:
        where = (" (DeepSpeed-MoE takes ep_size in the model code, deepspeed.moe.layer.MoE)" if fmt == "deepspeed"
                 else " (expert parallelism lives in your model code)" if fmt in MODEL_CODE_FORMATS else "")
        article = "an" if fmt[0] in "aeiou" else "a"
        return PlanError("ep", f"ep {plan.ep}, etp {plan.etp}: {article} {fmt} export has no expert-parallel setting"
                         f"{where}; export megatron for --expert-model-parallel-size, or pin --ep 1 --etp 1")
    if model is not None and moe.is_moe(model) and fmt not in MODEL_CODE_FORMATS and (plan.tp > 1 or plan.pp > 1):
        return PlanError("tp" if plan.tp > 1 else "pp", f"tp {plan.tp}, pp {plan.pp}: the bundled trainer runs "
                         f"{model.name}'s experts with data parallelism only (allowed: tp 1, pp 1 with none, fsdp_* or "
                         "zero*); export megatron for tp/pp with experts")
    return None


def note(fmt: str, plan: ExecutionPlan, model: ModelSpec | None) -> str | None:
    if model is None or not moe.is_moe(model) or fmt == "megatron":
        return None
    if fmt not in MODEL_CODE_FORMATS:
        return (f"{model.name} has {model.moe_experts} experts (top-{model.moe_top_k}): the bundled trainer builds "
                "every expert on every GPU (ep 1; trainer/moe.py)")
    return (f"{model.name} has {model.moe_experts} experts (top-{model.moe_top_k}): they live in your model code; "
            f"this plan keeps every expert on every GPU (ep 1)")


def megatron_plan_refusal(plan: ExecutionPlan) -> PlanError | None:
    if plan.ep > 1 and plan.tp > 1 and not plan.sequence_parallel:
        return PlanError("sequence_parallel", "ep > 1 with tp > 1 needs --sequence-parallel in Megatron-Core "
                         "(model_parallel_config.py: 'When using expert parallelism and tensor parallelism, sequence "
                         "parallelism must be used'; allowed: sequence_parallel true)")
    return None


def overlap_refusal(plan: ExecutionPlan, a2a_overlap: bool, shared_overlap: bool) -> PlanError | None:
    """Why Megatron-Core refuses the all-to-all overlap for `plan` (TransformerConfig.__post_init__)."""
    if not a2a_overlap:
        return None
    why = "--overlap-moe-expert-parallel-comm"
    if shared_overlap:
        return PlanError("moe_shared_expert_overlap", f"{why} refuses --moe-shared-expert-overlap ('disable "
                         "moe_shared_expert_overlap when enabling overlap_moe_expert_parallel_comm'); pick one")
    if plan.ep <= 1:
        return PlanError("ep", f"{why} is 'only supported with expert model parallelism' (allowed: ep > 1)")
    if plan.activation_checkpointing == "full":
        return PlanError("activation_checkpointing", f"{why}: 'disable full recomputation when enabling "
                         "overlap_moe_expert_parallel_comm' (allowed: none, selective)")
    if plan.pp > 1 and plan.vpp <= 1:
        return PlanError("vpp", f"{why} at pp {plan.pp}: 'virtual_pipeline_model_parallel_size must be specified when "
                         "pipeline_model_parallel_size > 1' (allowed: vpp > 1)")
    if plan.precision == "fp32":
        return PlanError("precision", f"{why} 'is only supported with bf16 or fp16 model' (allowed: bf16, fp16, fp8)")
    return None


def overlap_args(model: ModelSpec, a2a_overlap: bool, shared_overlap: bool) -> list[str]:
    if a2a_overlap:
        return ["--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"]
    if shared_overlap and model.moe_shared_experts:
        return ["--moe-shared-expert-overlap"]
    return []


def megatron_model_refusal(plan: ExecutionPlan, model: ModelSpec) -> PlanError | None:
    if not moe.is_moe(model):
        if plan.ep > 1 or plan.etp > 1:
            return PlanError("ep", f"ep {plan.ep}, etp {plan.etp}: {model.name} has no experts (allowed: 1)")
        return None
    if model.moe_experts % plan.ep:
        return PlanError("ep", f"{plan.ep} does not divide the {model.moe_experts} experts of {model.name} "
                         "(Megatron-LM validate_args: experts must be a multiple of ep)")
    if plan.etp > 1 and model.bias:
        return PlanError("etp", f"{plan.etp}: Megatron-Core splits experts over etp > 1 only without linear biases "
                         f"({model.name} has them; allowed: 1)")
    return None


def layer_freq(model: ModelSpec) -> str | None:
    """--moe-layer-freq for the model's MoE layers (None: every layer, Megatron's default 1)."""
    mask = [int(m) for m in moe.moe_layer_mask(model)]
    if all(mask):
        return None
    dense = model.moe_first_dense_layers
    if mask == [0] * dense + [1] * (len(mask) - dense):
        return f"([0]*{dense}+[1]*{len(mask) - dense})"
    return "[" + ",".join(str(m) for m in mask) + "]"


def megatron_args(plan: ExecutionPlan, model: ModelSpec, options: MoeOptions | None = None, gpus_per_node: int = 8,
                  notes: list[str] | None = None) -> list[str]:
    """The MoE flags (none for a dense model), with the routing and overlap `options` as planned."""
    if not moe.is_moe(model):
        return []
    options = options or MoeOptions()
    a2a_overlap, shared_overlap = options.moe_a2a_overlap, options.moe_shared_expert_overlap
    if (why := overlap_refusal(plan, a2a_overlap, shared_overlap)) is not None:
        raise why
    args = ["--num-experts", str(model.moe_experts), "--moe-router-topk", str(model.moe_top_k),
            "--moe-ffn-hidden-size", str(moe.expert_ffn(model)),
            "--expert-model-parallel-size", str(plan.ep), "--expert-tensor-parallel-size", str(plan.etp),
            "--moe-token-dispatcher-type", moe_routing.dispatcher(options)]
    args += moe_routing.megatron_args(plan, model, options, gpus_per_node, notes)
    if model.moe_experts // plan.ep > 1:
        args.append("--moe-grouped-gemm")
    if model.moe_shared_experts:
        args += ["--moe-shared-expert-intermediate-size", str(model.moe_shared_experts * moe.shared_ffn(model))]
    freq = layer_freq(model)
    return args + (["--moe-layer-freq", freq] if freq else []) + overlap_args(model, a2a_overlap, shared_overlap)
