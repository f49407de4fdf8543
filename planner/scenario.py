"""The execution-plan vocabulary: knobs, `Scenario` (pinned knobs, blanks = search),
`ExecutionPlan` (every knob resolved) and `Estimate` (a plan with its breakdowns).

The knob names here are the CLI flag names, the JSON/CSV column names, the trainer's flags and
the tuner's Optuna parameter names: one vocabulary everywhere.

Adding a knob: declare it once, as an `ExecutionPlan` field with its bounds and description.
`Scenario` gets it as a blank-able column, `Layout` as an array (planner/layout.py), `plan
estimate/export/train` and `python -m trainer` as a flag (planner/fields.py), POST /estimate in
its schema; then write the math that uses it (search, memory, throughput) and, where the
bundled trainer cannot run it, a rule in trainer/config.py `validate_plan`.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, computed_field, create_model

from planner import bounds as B
from planner.units import Count, IntCount

Sharding = Literal[
    "none", "zero1", "zero2", "zero3", "fsdp_full_shard", "fsdp_shard_grad_op", "fsdp_hybrid"
]
Offload = Literal["none", "optimizer", "optimizer+params"]
# selective: Megatron's (recompute the attention core, Korthikanti et al. 2022 sec. 5);
# op: per-op selective AC (torchtitan `selective_ac_option="op"`: every other matmul output saved);
# blocks: a fraction `checkpoint_fraction` of whole blocks fully recomputed (torchtitan's
# `selective_ac_option=k`, fms-fsdp's `selective_checkpointing`); full: every block.
Checkpointing = Literal["none", "selective", "op", "blocks", "full"]
# fp8: the block GEMMs in fp8 with bf16 everywhere else (Transformer Engine, torchao float8;
# Micikevicius et al. 2022 "FP8 formats for deep learning").
Precision = Literal["fp32", "fp16", "bf16", "bf16_pure", "fp8"]
# How fp8 scales are chosen (catalog/fp8_recipes/<id>.toml: GEMM speed, quantisation traffic):
# tensorwise (torchao default, dynamic per-tensor), rowwise (torchao, per-row), delayed
# (Transformer Engine DelayedScaling from the amax history: Megatron-Core/NeMo).
FP8RecipeName = Literal["tensorwise", "rowwise", "delayed"]
Optimizer = Literal["adamw", "adafactor", "sgd"]
# The dtype of the data-parallel gradient reduction and of the gradient buffer it reduces (planner/main_grads.py):
# default = the stack profile's (main_grads_fp32); fp32 = Megatron-LM's bf16 default
# (accumulate_allreduce_grads_in_fp32), DeepSpeed communication_data_type fp32, FSDP2 reduce_dtype float32;
# bf16 = the 16-bit compute dtype (Megatron-LM --grad-reduce-in-bf16; fp16 under --precision fp16).
GradReduceDtype = Literal["default", "fp32", "bf16"]
# Attention core: flash = the stack's fused kernel (FlashAttention-2, or cuDNN's where the stack profile says
# cudnn_attention); flash2 / cudnn name the kernel; triton = FlashAttention in Triton (Dao's pre-FA2
# flash_attn_triton.py, llm-foundry's attn_impl='triton'); eager = scores materialised (planner/attention_kernel.py).
Attention = Literal["flash", "eager", "flash2", "cudnn", "triton"]
# The software stack that runs the plan: its efficiency profile lives in catalog/stacks/<id>.toml.
# How context parallelism moves the sequence (planner/context_parallel.py): ring (K/V chunks passed
# around, Liu et al. 2023; Megatron cp_comm_type p2p, torch rotate_method alltoall), ulysses (all-to-all
# of q/k/v and the output, heads split over cp; DeepSpeed-Ulysses, Jacobs et al. 2023; Megatron a2a),
# allgather (K/V all-gathered; Llama 3 sec. 3.3.2, torch rotate_method allgather), a2a+p2p (all-to-all
# inside a node, ring across nodes; Megatron hierarchical CP).
ContextParallelImpl = Literal["ring", "ulysses", "allgather", "a2a+p2p"]
Stack = Literal["megatron", "megatron_deepspeed", "hf", "fsdp", "torchtitan", "bundled", "generic"]

SHARDINGS: tuple[str, ...] = Sharding.__args__  # type: ignore[attr-defined]
OFFLOADS: tuple[str, ...] = Offload.__args__  # type: ignore[attr-defined]
CHECKPOINTINGS: tuple[str, ...] = Checkpointing.__args__  # type: ignore[attr-defined]
PRECISIONS: tuple[str, ...] = Precision.__args__  # type: ignore[attr-defined]
FP8_RECIPES: tuple[str, ...] = FP8RecipeName.__args__  # type: ignore[attr-defined]
OPTIMIZERS: tuple[str, ...] = Optimizer.__args__  # type: ignore[attr-defined]
ATTENTIONS: tuple[str, ...] = Attention.__args__  # type: ignore[attr-defined]
GRAD_REDUCE_DTYPES: tuple[str, ...] = GradReduceDtype.__args__  # type: ignore[attr-defined]
STACKS: tuple[str, ...] = Stack.__args__  # type: ignore[attr-defined]
CP_IMPLS: tuple[str, ...] = ContextParallelImpl.__args__  # type: ignore[attr-defined]

# The knobs of an execution plan, in the order the output shows them.
PLAN_KNOBS: tuple[str, ...] = (
    "stack", "tp", "pp", "vpp", "first_stage_layers", "last_stage_layers", "embedding_in_split", "loss_in_split",
    "cp", "cp_impl", "ep", "etp", "dp", "sequence_parallel", "sharding", "offload",
    "activation_checkpointing", "checkpoint_fraction", "activation_offload", "precision", "fp8_recipe",
    "grad_reduce_dtype", "optimizer", "attention",
    "compile", "async_tp", "zeropp_qwz", "zeropp_hpz_partition_size", "zeropp_qgz",
    "micro_batch", "grad_accum", "global_batch",
)


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ExecutionPlan(Frozen):
    """Every knob resolved: how one training step is laid out on the GPUs.

    Each field's description is its help text everywhere (CLI flags, the trainer's flags, the
    scenario columns, the service schema): a knob is declared here once (see planner/fields.py).
    """

    stack: Stack = Field(default="megatron", description="Software stack that runs the plan (its efficiency "
                         "profile: catalog/stacks/<id>.toml)")
    tp: Annotated[int, B.TP] = Field(default=1, gt=0, description="Tensor-parallel degree (each block's matrices split over tp GPUs)")
    pp: Annotated[int, B.PP] = Field(default=1, gt=0, description="Pipeline stages (need not divide n_layers: "
                    "the heaviest stage sets the pace)")
    vpp: Annotated[int, B.VPP] = Field(default=1, gt=0, description="Virtual pipeline stages per GPU (interleaved 1F1B)")
    # an uneven pipeline, Megatron-Core's spellings (planner/stage_split.py)
    first_stage_layers: Annotated[int, B.STAGE_LAYERS] = Field(default=0, ge=0, description="Blocks on the first pipeline stage "
                                    "(Megatron-Core --decoder-first-pipeline-num-layers; 0: an even split)")
    last_stage_layers: Annotated[int, B.STAGE_LAYERS] = Field(default=0, ge=0, description="Blocks on the last pipeline stage "
                                   "(--decoder-last-pipeline-num-layers; 0: an even split)")
    embedding_in_split: bool = Field(default=False, description="The embedding takes one block's place in the "
                                     "pipeline split: the first virtual stage runs one block less "
                                     "(--account-for-embedding-in-pipeline-split)")
    loss_in_split: bool = Field(default=False, description="The output layer and loss take one block's place: the "
                                "last virtual stage runs one block less (--account-for-loss-in-pipeline-split)")
    cp: Annotated[int, B.CP] = Field(default=1, gt=0, description="Context-parallel degree: the sequence split over cp GPUs "
                    "(ring attention unless --cp-impl says otherwise)")
    cp_impl: ContextParallelImpl = Field(default="ring", description="Context-parallel communication: ring (K/V "
                                         "chunks passed on), ulysses (all-to-all, heads split over cp), allgather "
                                         "(K/V all-gathered), a2a+p2p (all-to-all in a node, ring across nodes)")
    # mixture of experts (planner/moe_parallel.py): Megatron-Core's MoE parallel folding (Liu et al. 2025,
    # arXiv 2504.14960): the experts' own tp x cp x dp ranks re-split as etp x ep x expert-data-parallel
    ep: Annotated[int, B.EP] = Field(default=1, gt=0, description="Expert-parallel degree (mixture of experts): each "
                    "MoE layer's routed experts split over ep GPUs, tokens sent to them by all-to-all "
                    "(Megatron-Core --expert-model-parallel-size)")
    etp: Annotated[int, B.ETP] = Field(default=1, gt=0, description="Expert tensor parallel: each expert's matrices split "
                     "over etp GPUs (Megatron-Core --expert-tensor-parallel-size, whose default is tp; the "
                     "planner tries 1 and tp)")
    dp: int = Field(default=1, gt=0, description="Data-parallel replicas: GPUs / (tp x pp x cp)")
    sequence_parallel: bool = Field(default=False, description="Sequence parallelism: norms and dropout split over "
                                    "the tensor-parallel group")
    sharding: Sharding = Field(default="none", description="Sharding of optimizer states, gradients and parameters "
                               "(DeepSpeed ZeRO stages, FSDP modes)")
    offload: Offload = Field(default="none", description="What moves to host memory (DeepSpeed/FSDP CPU offload)")
    activation_checkpointing: Checkpointing = Field(
        default="none", description="Recomputation in backward: selective (attention core), op (every other matmul "
        "output saved), blocks (--checkpoint-fraction of the blocks), full (every block)")
    checkpoint_fraction: Annotated[float, B.CHECKPOINT_FRACTION] = Field(default=1.0, gt=0, description="Share of blocks recomputed with "
                                       "--activation-checkpointing blocks (the planner's guess: 0.5)")
    activation_offload: bool = Field(default=False, description="DeepSpeed activation checkpointing with "
                                     "partition_activations and cpu_checkpointing: the checkpointed block inputs, "
                                     "split over the TP group, wait in host memory (copied over the host link)")
    precision: Precision = Field(default="bf16", description="Number format (bf16_pure: no fp32 master weights; "
                                 "fp8: block GEMMs in fp8, H100-class GPUs)")
    fp8_recipe: FP8RecipeName = Field(default="tensorwise", description="fp8 scaling recipe with --precision fp8: "
                                  "tensorwise (dynamic per tensor), rowwise (per row, torchao), delayed (amax "
                                  "history, Transformer Engine)")
    grad_reduce_dtype: GradReduceDtype = Field(
        default="default", description="Gradient buffer and data-parallel reduction dtype: fp32 (Megatron-LM's bf16 "
        "default, --accumulate-allreduce-grads-in-fp32), bf16 (the 16-bit compute dtype: --grad-reduce-in-bf16) or "
        "default (the stack profile's main_grads_fp32)")
    optimizer: Optimizer = Field(default="adamw", description="Optimizer (its states per parameter)")
    attention: Attention = Field(default="flash", description="flash (the stack's fused kernel), flash2 (FlashAttention-2), "
                                 "cudnn (cuDNN fused attention), triton (pre-FA2 FlashAttention in Triton) or eager "
                                 "(scores materialised)")
    compile: bool = Field(default=False, description="torch.compile (fused element-wise kernels)")
    async_tp: bool = Field(default=False, description="TP collectives overlapped with the GEMMs "
                           "(async TP / tp-comm-overlap)")
    # ZeRO++ (Wang et al. 2023, arXiv 2306.10209): DeepSpeed ZeRO-3 with lighter collectives
    # (planner/zeropp.py)
    zeropp_qwz: bool = Field(default=False, description="ZeRO++ qwZ: ZeRO-3 weight all-gathers in block-quantized "
                             "int8 (DeepSpeed zero_quantized_weights)")
    zeropp_hpz_partition_size: Annotated[int, B.HPZ] = Field(default=1, ge=1, description="ZeRO++ hpZ: a secondary 16-bit "
                                           "copy of the weights partitioned over this many GPUs (a node), so later "
                                           "gathers stay inside it; 1: off (DeepSpeed zero_hpz_partition_size)")
    zeropp_qgz: bool = Field(default=False, description="ZeRO++ qgZ: gradients reduced by a hierarchical int4 "
                             "all-to-all instead of the reduce-scatter (DeepSpeed zero_quantized_gradients)")
    micro_batch: Annotated[int, B.MICRO_BATCH] = Field(default=1, gt=0, description="Sequences per GPU per forward/backward")
    grad_accum: Annotated[int, B.GRAD_ACCUM] = Field(default=1, gt=0, description="Micro batches accumulated per optimizer step")
    seq_len: Annotated[int, B.SEQ_LEN] = Field(default=2048, gt=0, description="Tokens per sequence")
    # DeepSpeed / FSDP communication buffers (elements), chosen by the planner
    reduce_bucket_elems: IntCount = Field(default=500_000_000, gt=0, description="DeepSpeed reduce bucket (elements)")
    allgather_bucket_elems: IntCount = Field(default=500_000_000, gt=0,
                                             description="DeepSpeed all-gather bucket (elements)")
    stage3_prefetch_elems: IntCount = Field(default=50_000_000, ge=0,
                                            description="ZeRO-3 parameter prefetch bucket (elements)")
    stage3_max_live_params: IntCount = Field(default=1_000_000_000, ge=0,
                                             description="ZeRO-3 parameters kept gathered at most (elements)")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step."""
        return self.micro_batch * self.grad_accum * self.dp


class MemoryBreakdown(Frozen):
    """Bytes per GPU (and host bytes per node) of one plan, each term from planner/memory.py."""

    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    comm_buffers_bytes: float
    runtime_bytes: float
    fragmentation_bytes: float
    total_bytes: float
    capacity_bytes: float
    required_bytes: float | None = Field(
        default=None, description="bytes alive at once at the peak: what must fit once the caching allocator "
                                  "has flushed its cache (planner/memory_required.py); total_bytes is the reserved peak")
    host_bytes_per_node: float
    host_capacity_bytes_per_node: float

    @property
    def headroom_bytes(self) -> float:
        """Capacity left over what must fit (the reserved peak where that is not known)."""
        return self.capacity_bytes - (self.total_bytes if self.required_bytes is None else self.required_bytes)

    @computed_field(description="what must fit is within the memory model's error (planner/memory_required.py "
                                "MEMORY_ERROR_PCT) of the capacity: the plan may not fit")
    @property
    def tight(self) -> bool:
        from planner.memory_required import is_tight

        need = self.total_bytes if self.required_bytes is None else self.required_bytes
        return bool(is_tight(need, self.capacity_bytes))


class StepTimeBreakdown(Frozen):
    """Seconds per optimizer step and its parts (filled by planner/throughput.py)."""

    step_time_s: float
    compute_s: float
    comm_exposed_s: float
    bubble_s: float
    offload_s: float
    bottleneck: str
    # part of compute_s: host time of synchronous kernel launches (CUDA_LAUNCH_BLOCKING=1 jobs)
    launch_sync_s: float = 0.0
    # parts of comm_exposed_s, each what its compute does not hide: data-parallel gradient reduction and
    # parameter gathers (the inter-node network once dp spans nodes), tensor-parallel collectives (usually
    # NVLink), the context-parallel ring and pipeline point-to-point sends
    dp_comm_s: float | None = None
    tp_comm_s: float | None = None
    cp_comm_s: float | None = None
    pp_comm_s: float | None = None
    # mixture of experts (planner/moe_time.py; None for a dense model): part of compute_s, the grouped expert
    # GEMMs and routers beyond the active view's dense MLP; part of comm_exposed_s, the expert-parallel
    # all-to-alls (dispatch + combine) and the expert gradients' reduction over the expert-data-parallel group
    moe_compute_s: float | None = None
    moe_a2a_s: float | None = None
    moe_expert_grad_s: float | None = None


class Performance(Frozen):
    """Speed and time-to-train of one plan (filled by planner/throughput.py)."""

    tokens_per_s: float
    tokens_per_s_per_gpu: float
    samples_per_s: float
    model_tflops_per_gpu: float
    hw_tflops_per_gpu: float
    mfu: float
    hfu: float
    # is the network the bottleneck (planner/network_need.py): the least inter-node line rate per node (a
    # busbw where the system's was measured) at which the step is within 1% of an unlimited network's (0: no
    # network in the step), and the share of the step the network costs at the nodes' bandwidth; None where
    # not assessed
    network_gbps_needed: float | None = None
    network_share: float | None = None
    # the stack profile's cross-validated error of tokens/s (catalog/stacks/<stack>.toml)
    expected_error_pct: float | None = None
    days: float | None = None
    gpu_hours: float | None = None
    cost: float | None = None


class Estimate(Frozen):
    """One plan and what the analytic model says of it."""

    plan: ExecutionPlan
    memory: MemoryBreakdown
    time: StepTimeBreakdown | None = None
    performance: Performance | None = None
    fits: bool
    reason: str = ""


# ExecutionPlan fields a scenario cannot pin: derived from the GPU count, or chosen by the planner
NOT_PINNED: tuple[str, ...] = (
    "dp", "reduce_bucket_elems", "allgather_bucket_elems", "stage3_prefetch_elems", "stage3_max_live_params")


class _ModelAndSystem(Frozen):
    # model: a preset id, a bare size ("7b"), or a path to a Hugging Face config.json ...
    model: str | None = Field(default=None, description="Preset id, size (7b, 52b), path to a HF config.json, "
                              "or hub id (org/name)")
    # ... or the architecture columns
    n_layers: int | None = Field(default=None, gt=0, description="Transformer blocks (instead of --model)")
    hidden: int | None = Field(default=None, gt=0, description="Hidden size")
    n_heads: int | None = Field(default=None, gt=0, description="Attention heads")
    n_kv_heads: int | None = Field(default=None, gt=0, description="Key/value heads (GQA; default n_heads)")
    ffn_hidden: int | None = Field(default=None, gt=0, description="MLP hidden size")
    vocab: int | None = Field(default=None, gt=0, description="Vocabulary size")
    mlp: Literal["gelu", "swiglu"] | None = Field(
        default=None, description="MLP form: gelu (GPT block, 2 matrices) or swiglu (3 matrices; a model given "
        "by its columns then gets the LLaMA block: RMSNorm, RoPE, untied embeddings, no biases)")
    parallel_block: bool | None = Field(
        default=None, description="Attention and MLP in parallel on the block input (GPT-J, GPT-NeoX, Falcon, "
        "PaLM): one TP all-reduce per block and pass instead of two; default: the model's own block")
    attn_window: Annotated[int, Field(ge=0), B.ATTN_WINDOW] | None = Field(
        default=None, description="Sliding-window attention: keys each query sees (Mistral "
        "4096; on a chunked-attention model, Llama 4: the chunk; 0: full causal attention); default: the model's own "
        "(config.json sliding_window, attention_chunk_size)")
    attn_local_layers: Annotated[int, Field(ge=0), B.ATTN_LAYERS] | None = Field(
        default=None, description="Layers that use attn_window (Gemma 2: half, Gemma 3: 5 of 6; "
        "the others full causal); default: the model's own, or all layers")
    # mixture of experts (planner/moe.py): the ModelSpec fields of the same names
    moe_experts: int | None = Field(default=None, ge=0, description="Routed experts per MoE layer (0: dense)")
    moe_top_k: int | None = Field(default=None, ge=0, description="Routed experts each token runs")
    moe_ffn_hidden: int | None = Field(default=None, gt=0, description="One routed expert's MLP hidden size "
                                       "(default: ffn_hidden)")
    moe_shared_experts: int | None = Field(default=None, ge=0, description="Shared (always-on) experts per MoE layer")
    moe_shared_ffn_hidden: int | None = Field(default=None, gt=0, description="One shared expert's MLP hidden "
                                              "size (default: moe_ffn_hidden)")
    moe_layer_freq: int | None = Field(default=None, gt=0, description="Every k-th layer is MoE (Qwen2-MoE "
                                       "decoder_sparse_step)")
    moe_first_dense_layers: int | None = Field(default=None, ge=0, description="The first k layers stay dense "
                                               "(DeepSeek first_k_dense_replace)")
    # system
    gpu: str | None = Field(default=None, description="GPU catalog id (plan catalog list)")
    gpus: Annotated[int, Field(gt=0), B.GPUS] | None = Field(default=None, description="GPU count")
    gpus_per_node: Annotated[int, Field(gt=0), B.GPUS_PER_NODE] | None = Field(default=None, description="GPUs per node (default: the cluster's)")
    cluster: str | None = Field(default=None, description="Cluster catalog id (default: with --gpu, the first "
                                   "cluster of that GPU; else dgx-a100)")
    internode_gbps: Annotated[float, Field(ge=0.001), B.INTERNODE_GBPS] | None = Field(default=None, description="Inter-node bandwidth per node (Gbit/s; at least 1 Mbit/s)")


# Where a blank Scenario cell's value comes from, when it is not the planner's search (the help says it)
_BLANK_MEANS = {"seq_len": "Tokens per sequence (default: the context the model was pretrained at, else its maximum positions)"}


def _pinned(name: str) -> tuple[object, object]:
    """An ExecutionPlan field as a Scenario column: the same type, bounds and description, blank by default."""
    f = ExecutionPlan.model_fields[name]
    kind = Annotated[f.annotation, *f.metadata] if f.metadata else f.annotation
    return Optional[kind], Field(default=None, description=_BLANK_MEANS.get(name, f.description))


_PinnedKnobs = create_model(
    "_PinnedKnobs", __base__=_ModelAndSystem, __module__=__name__,
    **{name: _pinned(name) for name in ExecutionPlan.model_fields if name not in NOT_PINNED})  # type: ignore[call-overload]


class Scenario(_PinnedKnobs):  # type: ignore[misc, valid-type]
    """One row of the scenario interface: the model, the system and the pinned knobs.

    `None` (an empty cell) means "the planner chooses". Field names are the public column
    names of `plan estimate --scenarios` and the CLI flag names. The execution-plan knobs are
    those of `ExecutionPlan` (but NOT_PINNED), with their types, bounds and descriptions.
    """

    model_config = ConfigDict(allow_inf_nan=False)  # an inf or NaN input is bad input, not a NaN plan

    global_batch: Annotated[int, Field(gt=0), B.GLOBAL_BATCH] | None = Field(default=None, description="Sequences per optimizer step")
    global_batch_tokens: Annotated[IntCount, Field(gt=0), B.GLOBAL_BATCH_TOKENS] | None = Field(default=None, description="Tokens per optimizer step (e.g. 4M)")
    # what to train, and what it costs
    tokens: Annotated[Count, Field(gt=0), B.TOKENS] | None = Field(default=None, description="Tokens to train (e.g. 100B): gives days, "
                                 "GPU-hours and cost (export: the steps and the time limit)")
    price_per_gpu_hour: Annotated[float, Field(ge=0), B.PRICE] | None = Field(default=None, description="Price of one GPU-hour (for the cost)")
