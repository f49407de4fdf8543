"""Software stacks as catalog data: catalog/stacks/<id>.toml -> `StackProfile`.

A stack (Megatron-LM, Megatron-DeepSpeed, Hugging Face + DeepSpeed, PyTorch FSDP, torchtitan,
the bundled trainer) runs the same plan at a different speed: its kernels reach a different
share of the GPU's peak, it fuses element-wise work or not, it pays Python/hook overhead per
module, and it hides more or less of its collectives behind compute. A profile holds those
numbers, the features the stack supports, and how they were fitted (sources, method, the
cross-validated error). `validation/fit_profiles.py` and `plan calibrate` write them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SHARDINGS = ("none", "zero1", "zero2", "zero3", "fsdp_full_shard", "fsdp_shard_grad_op", "fsdp_hybrid")


class SourceError(BaseModel):
    """Cross-validated error of a profile on one source (a table of one origin)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    source: str
    rows: int = Field(ge=0)
    mape_pct: float = Field(ge=0)
    bias_pct: float


class StackProfile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    name: str
    description: str = ""
    # --- what the stack can run -------------------------------------------------------
    shardings: list[str] = Field(default_factory=lambda: list(SHARDINGS))
    tensor_parallel: bool = True
    pipeline_parallel: bool = True
    context_parallel: bool = False
    # the context-parallel implementations it runs with cp > 1 (planner/context_parallel.py): ring,
    # ulysses, allgather, a2a+p2p
    cp_impls: list[Literal["ring", "ulysses", "allgather", "a2a+p2p"]] = Field(default_factory=lambda: ["ring"])
    fp8: bool = False
    offload: bool = False
    compile: bool = False
    async_tp: bool = False
    fp8_allgather: bool = False  # FSDP all-gathers the float8 weights (torchao)
    cudnn_attention: bool = False  # fused attention = cuDNN's where the GPU has a curve (planner/attention_kernel.py)
    activation_offload: bool = False  # DeepSpeed checkpointing API: partition_activations + cpu_checkpointing
    # --- time multipliers on the analytic model's parts (1 = the model as written) ------
    gemm_time_factor: float = Field(default=1.0, gt=0)
    attention_time_factor: float = Field(default=1.0, gt=0)
    elementwise_time_factor: float = Field(default=1.0, gt=0)
    layer_overhead_us: float = Field(default=0.0, ge=0, description="per block and micro batch, fwd+bwd")
    # Host/launch time a parameter-sharding wrapper pays per wrapped unit (a block) and micro batch, on top of
    # layer_overhead_us, only where parameters are sharded and gathered unit by unit (FSDP, ZeRO-3:
    # planner/shard_units.py): pre/post-forward and backward hooks, the flat parameter's all-gather launch with
    # its copy-in/copy-out, stream waits, the per-unit reduce-scatter launch (Zhao et al., "PyTorch FSDP",
    # VLDB 2023 sec. 3-4). FSDP2's per-parameter sharding drops the flat-parameter copies (torchtitan docs,
    # fsdp2.md), so FSDP1 stacks pay more. Fitted (planner/profile_fit.py).
    unit_overhead_us: float = Field(default=0.0, ge=0,
                                    description="per parameter-sharded unit (FSDP / ZeRO-3) and micro batch, fwd+bwd")
    # Host microseconds per kernel launch when launches are synchronous (CUDA_LAUNCH_BLOCKING=1;
    # planner/launch_sync.py). Prior: BigScience's on/off test (tr11-176B-ml chronicles-prequel,
    # "dealing with JZ hanging": 200B, 80 layers, TP8 PP10 MBS1 GBS512) measured 97.20 TFLOPs async
    # and 91.04 synchronous on 80 A100 (+3.6 ms per block and micro batch, ~46 us for each of its ~78
    # launches) and no difference on 160 (84.44 / 84.59): 25 us, about the mean. Independently ~20 us
    # from a PyTorch element-wise op's call to its kernel's start on a V100 (NVIDIA Nsight Systems
    # user guide, PyTorch example), which a blocking launch adds in full.
    sync_launch_us: float = Field(default=25.0, ge=0, description="per kernel launch, synchronous launches only")
    comm_time_factor: float = Field(default=1.0, gt=0)
    optimizer_time_factor: float = Field(default=1.0, gt=0)
    # Fixed seconds per optimizer step, paid once whatever the grad accumulation (fitted by
    # planner/profile_fit.py): the trainer's step (HF Trainer: clip_grad_norm_, lr scheduler, zero_grad;
    # DeepSpeed engine.step: fp32 grad buffers, overflow check, the ZeRO partition copies). Seed 003's
    # HF + DeepSpeed BLOOM-7b1 rows on 8 A100: ~1.8-2.5 s per step at grad_accum 1 against ~1.0 s per
    # 1024-token micro batch at grad_accum 64-256 (shared/seeds/003: 258 vs 147 days per 100B tokens).
    step_overhead_s: float = Field(default=0.0, ge=0, description="per optimizer step")
    # --- overlap of collectives with the compute they can hide behind (fractions) ------
    # One physical quantity: the share of the compute beside a collective that hides it. A concurrent NCCL
    # collective slows the compute beside it 18.9% on average (40% at most; GPT/Llama layers on A100/H100/
    # MI250/MI210, Lee et al. 2025, arXiv 2507.03114), so C seconds of collective beside T >= C of compute end
    # C x 0.189/1.189 after it: max(C - o T, 0) gives the same at the balance C = T with o = 1/1.189 = 0.84.
    # `generic` (a framework without data) takes 0.84 for every bucketed/prefetched data-parallel collective
    # (DDP, ZeRO-1/2 reduce-scatter and parameter all-gather, FSDP); stacks with data keep their own values.
    # Leave-one-stack-out, megatron held out: 0.8-0.9 -> 0.84 moves its MAPE 0.1 point, all of them at 1.0
    # only 0.3: the overlap priors do not decide it (validation/worst_rows.md, round 28).
    overlap_ddp: float = Field(default=0.90, ge=0, le=1)
    overlap_zero12: float = Field(default=0.80, ge=0, le=1)
    # ZeRO-1's gradient reduction at the accumulation boundary. DeepSpeed (HF + DeepSpeed,
    # Megatron-DeepSpeed) runs it after backward returns (engine.backward -> allreduce_gradients ->
    # optimizer.reduce_gradients at the boundary, deepspeed/runtime/engine.py): nothing hidden, 0.
    # Megatron's distributed optimizer overlaps it (--overlap-grad-reduce).
    overlap_zero1: float = Field(default=0.80, ge=0, le=1)
    # ZeRO-1/2's all-gather of the updated parameters: the share of the next step's first forward it hides
    # behind (planner/param_gather.py). DeepSpeed gathers inside optimizer.step(): 0 (the default).
    # Megatron-Core's --overlap-param-gather hides it behind the forward, bucket by bucket: 0.84 = 1/1.189,
    # the forward net of its slowdown under a concurrent collective (compute 18.9% slower on average, 40%
    # at most, GPT/Llama layers on A100/H100/MI250/MI210: Lee et al. 2025, arXiv 2507.03114). `generic`
    # takes 0.84 too: its overlap_zero1 (0.8) already assumes a ZeRO-1 that overlaps its collectives.
    overlap_param_gather: float = Field(default=0.0, ge=0, le=1)
    # The stack's own data-parallel bucket (parameters), at least grad_bucket_params_per_rank x dp: Megatron-Core
    # max(40M, 1M x dp) (megatron/core/distributed/distributed_data_parallel.py: "larger DP sizes need larger
    # buckets to ensure collectives do not become latency-bound"; planner/comm.py charges a ring's n - 1 latency
    # steps, planner/grad_buckets.py). 0: PyTorch DDP's ddp_bucket_mib and the plan's DeepSpeed bucket knobs.
    grad_bucket_params: float = Field(default=0.0, ge=0, description="0: the plan's bucket knobs")
    grad_bucket_params_per_rank: float = Field(default=0.0, ge=0)
    # ZeRO-3 parameter fetches hide behind at most this share of a pass's compute (planner/zero3.py).
    # DeepSpeed before mid-2021 hid nothing: every fetch all-gather synchronised the device (DeepSpeed
    # PR #1188: "the async version is not async at all, because each all_gather calls
    # torch.cuda.synchronize()"; issue #1069) and the prefetch trace was off by one (PR #1170, "significant
    # zero-3 slowdown compared to zero-2"). Megatron-DeepSpeed's ZeRO-3 rows (seed 002, May 2021,
    # DeepSpeedExamples Megatron-LM-v1.1.5-ZeRO3) ran that code: its profile sets 0. DeepSpeed since 0.6
    # (PR #1453, 2022: PartitionedParameterCoordinator) prefetches the next submodule's parameters during
    # the current one's compute (at least one parameter beyond stage3_prefetch_bucket_size): a fetch
    # shorter than the compute beside it is hidden whole, so the hf profile sets 1.
    # A run that states an older DeepSpeed gets 0 whatever its stack (planner/deepspeed_era.py).
    overlap_zero3: float = Field(default=0.60, ge=0, le=1)
    overlap_fsdp: float = Field(default=0.85, ge=0, le=1)
    overlap_tp: float = Field(default=0.0, ge=0, le=1)
    # Async TP: the share of the TP collectives' time it saves at most (exposed >= (1 - share) x TP time, however
    # long the GEMMs beside it). Overlapped collectives slow the compute beside them 18.9% on average and
    # overlapped runs are only 10.2% faster than sequential ones (Lee et al. 2025, arXiv 2507.03114): with the
    # collective beside the compute, saved 0.102 x 1.189 C of M = (1.102 x 1.189 - 1) C, i.e. 0.39 of it;
    # `generic` takes 0.4. A fused kernel can hide up to 96% (Flux, Chang et al. 2024, arXiv 2406.06858).
    overlap_async_tp: float = Field(default=0.6, ge=0, le=1)
    # Async TP hides each collective behind its own adjacent matmul only (PyTorch micro-pipeline TP:
    # fused all-gather-matmul / matmul-reduce-scatter, torch/_inductor/fx_passes/micro_pipeline_tp.py;
    # the backward's dX reduce-scatters are not fused): planner/async_tp.py. False: Transformer Engine userbuffers
    # (Megatron-Core --tp-comm-overlap): every all-gather/reduce-scatter decomposed with its GEMM, ring-exchange,
    # pipelined or bulk per TE's default ub config (planner/tp_overlap.py).
    async_tp_fused_pairs: bool = Field(
        default=False, description="async TP as PyTorch's micro-pipelined fused matmul+collective pairs")
    # Gradient bucket of a DDP all-reduce (sharding none), MiB: one NCCL call per bucket, whose busbw
    # planner/busbw_curve.py reads at that size. PyTorch DDP: bucket_cap_mb, default 25
    # (torch.nn.parallel.DistributedDataParallel). DeepSpeed's engine without ZeRO: 5e8-element buckets
    # (deepspeed/runtime/engine.py MEMORY_OPT_ALLREDUCE_SIZE = 500000000; 953.7 MiB of 16-bit gradients).
    ddp_bucket_mib: float = Field(default=25.0, gt=0, description="DDP gradient bucket, MiB")
    # torch DDP's `gradient_as_bucket_view` (default False): without it the Reducer keeps every gradient twice, in
    # param.grad and in its flat buckets ("When set to True, gradients will be views pointing to different offsets of
    # allreduce communication buckets. This can reduce peak memory usage, where the saved memory size will be equal to
    # the total gradients size", torch/nn/parallel/distributed.py, torch 2.13). planner/comm_buffers.py
    # ddp_bucket_copy_bytes counts the copy where false. Each profile's `source` cites its framework: the bundled
    # trainer passes True (trainer/backends/ddp.py); HF Trainer / accelerate, Composer (llm-foundry) and torchtitan's
    # replicate() keep torch's default; Megatron-Core's own DDP and DeepSpeed's engine are no torch DDP (no resident
    # copy: true). Default false: an unknown script runs torch's default.
    ddp_bucket_view: bool = Field(
        default=False, description="torch DDP keeps gradients as views of its all-reduce buckets (gradient_as_bucket_view"
                                   "=True) or the stack runs no torch DDP; false: a second, flat copy of the gradients")
    overlap_cp: float = Field(default=0.8, ge=0, le=1)
    # Share of the backward that hides the gradients' copies to the host (offload): they run on DMA
    # copy engines from a side stream as buckets are reduced (DeepSpeed overlap_comm's reduction
    # stream; FSDP's post-backward stream), so only the last bucket is exposed, as for DDP's
    # bucketed all-reduce (overlap_ddp); "each gradient transfer can be overlapped with the
    # backpropagation on the remainder of the backward graph" (Ren et al. ATC'21 sec. 4.1). With
    # fp32 host gradients (planner/offload_time.py) 0.9 puts ZeRO-Offload's Fig. 14 ratio (PyTorch /
    # ZeRO-Offload, 1B, batch 1-8: 1.08) at +7% where 0.5 gave +20% (validation/offload_check.py).
    overlap_host: float = Field(default=0.9, ge=0, le=1)
    # OpenMP threads of DeepSpeed's CPU Adam per rank (planner/cpu_optimizer.py). 0: the rank's share
    # of the node's cores (DeepSpeed's own launcher leaves OMP_NUM_THREADS unset); 1: launched by
    # torch.distributed.launch / torchrun without OMP_NUM_THREADS, which set it to 1 per process.
    cpu_optimizer_threads_per_rank: float = Field(default=0.0, ge=0, description="0: the node's share")
    # --- fused kernels, fp8 ------------------------------------------------------------
    compile_elementwise_factor: float = Field(default=0.6, gt=0, le=1)
    fp8_cast_passes: float = Field(default=1.0, ge=0, description="x the fp8 recipe's quantisation traffic "
                                   "(catalog/fp8_recipes; 1: its kernels as documented)")
    # --- memory: the caching allocator ---------------------------------------------------
    allocator_transient_factor: float = Field(default=1.0, ge=0, description="x the largest transient buffer kept cached")
    allocator_fraction: float = Field(default=0.03, ge=0, lt=1, description="share of HBM lost to fragmentation")
    loss_saved_bytes_per_logit: float = Field(
        default=4.0, ge=0, le=8, description="bytes per logit the loss keeps for backward (4: fp32 softmax)")
    loss_grad_bytes_per_logit: float = Field(
        default=4.0, ge=0, le=8, description="bytes per logit of the logits' gradient buffer (0: written in place)")
    eager_softmax_fp32: bool = Field(
        default=False, description="eager attention's softmax runs in fp32 and keeps its fp32 output next to the "
                                   "16-bit probabilities (Hugging Face: F.softmax(..., dtype=torch.float32).to(dtype))")
    # SwiGLU MLP tensors (s*b*ffn/t each) a block keeps for backward. Autograd on
    # down(silu(gate(x)) * up(x)) keeps 4: silu's input (gate's output), the mul's two operands (silu's
    # output, up's output) and down's input (the product): Hugging Face LlamaMLP, torchtitan FeedForward
    # `w2(F.silu(w1(x)) * w3(x))`, llm-foundry MPTGLU, Megatron-DeepSpeed's swiglu (`F.silu(x[0]) * x[1]` on
    # chunks of one fc1 output) and the bundled trainer. Megatron-Core's fused kernel keeps 3: SwiGLUFunction
    # saves only its input, the fc1 output [gate; up] (2), recomputing silu in backward, and linear_fc2 its
    # output (1) (megatron/core/fusions/fused_bias_swiglu.py, `ctx.save_for_backward(input)`; used by
    # transformer/mlp.py when config.bias_activation_fusion, which Megatron-LM's `--no-bias-swiglu-fusion`
    # (store_false, "available only when using megatron-core") leaves on, as NeMo 24.07's launcher configs
    # do: base_configs/llama3_8b.yaml `activation: fast-swiglu`, `bias_activation_fusion: true`).
    swiglu_saved_sbf: float = Field(
        default=4.0, ge=2, le=4,
        description="SwiGLU MLP tensors (s*b*ffn) a block keeps for backward (4: autograd on silu(gate)*up; "
                    "3: Megatron-Core's fused bias_swiglu keeps only its input)")
    pipeline_outputs_kept: float = Field(
        default=0.0, ge=0, le=4,
        description="stage outputs (s*b*h) the pipeline engine keeps per micro batch in flight until its backward "
                    "(DeepSpeed's PipelineEngine: 1; Megatron-LM frees them after the send: 0)")
    moe_expert_outputs_kept: float = Field(
        default=1.0, ge=0, le=1,
        description="MoE: the routed experts' outputs kept for the routing probabilities' gradient (1: the probs "
                    "scale the expert output, e.g. Hugging Face's routing_weights * expert(x); 0: Megatron-Core "
                    "applies them inside the activation, GroupedMLP/TEGroupedMLP activation_func_with_probs -> "
                    "weighted_bias_swiglu_impl, which saves only its input and the probs)")
    # Megatron-Core's own DDP / distributed optimizer (arguments.py: bf16 sets
    # accumulate_allreduce_grads_in_fp32; docs/source/api-guide/dist_optimizer.md: bf16 params, fp32
    # grads, 6 + 12/d bytes a parameter) and DeepSeek-V3 (arXiv 2412.19437 sec. 3.3.3: gradients "used
    # for batch size accumulation are still retained in FP32"). Off in catalog/stacks/megatron.toml: that
    # profile also stands for NeMo 24.07's runs (Apex's distributed Adam), whose GPT3-20B at tp 2 (fp8,
    # 10B parameters a GPU) ran on 80 GB where 4 B of fp32 grads a parameter cannot fit.
    main_grads_fp32: bool = Field(
        default=False,
        description="bf16/fp8 training keeps an fp32 main-gradient buffer for every parameter of the stage, unsharded "
                    "(DDP and the distributed optimizer, which reduce-scatters in place into it and steps on its shard)")
    # torchtitan's JobConfig: mixed_precision_reduce: Literal["float32"] = "float32" ("torch dtype to use for
    # reductions when applying mixed precision via FSDP"); the bundled trainer's FSDP2 takes
    # MixedPrecisionPolicy(reduce_dtype=float32) from planner/exports/fsdp_settings.py under mixed precision
    fsdp_reduce_fp32: bool = Field(
        default=False,
        description="FSDP reduce-scatters gradients in fp32 (4 bytes each on the wire) under bf16/fp8 compute, "
                    "not in the compute dtype; a plan's grad_reduce_dtype overrides it")
    # --- how it was fitted ---------------------------------------------------------------
    fit_method: str = "prior (not fitted)"
    fit_sources: list[str] = Field(default_factory=list)
    cv_mape_pct: float | None = Field(default=None, ge=0, description="CV MAPE of tokens/s (fit_method says which: catalog profiles leave one origin out)")
    cv_by_source: list[SourceError] = Field(default_factory=list)
    source: str = ""

    def supports(self, sharding: str) -> bool:
        return sharding in self.shardings


def profile_to_toml(p: StackProfile, comment: str = "") -> str:
    """The profile as a catalog/stacks/<id>.toml file (what the loader reads back); `comment`: more
    header lines (e.g. what its cv_mape_pct measures)."""
    lines = [f"# Stack profile: {p.name}. Written by `plan calibrate` or validation/fit_profiles.py;",
             "# the priors (all but the fitted factors and cv_* fields) may be edited by hand."]
    lines += [f"# {line}" for line in comment.splitlines()] + [""]
    data = p.model_dump(exclude={"id", "cv_by_source"})
    lines += [f"{k} = {_toml_value(v)}" for k, v in data.items() if v is not None]
    for row in p.cv_by_source:
        lines += ["", "[[cv_by_source]]"] + [f"{k} = {_toml_value(v)}" for k, v in row.model_dump().items()]
    return "\n".join(lines) + "\n"


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(round(v, 4))
    if isinstance(v, int):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'
