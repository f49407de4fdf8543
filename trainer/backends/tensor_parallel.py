"""Tensor parallelism with PyTorch's DTensor API (Megatron-style, Shoeybi et al. 2019), plus
sequence parallelism for the norms (Korthikanti et al. 2022), composed with FSDP2 over the
data-parallel part of a 2-D (dp, tp) mesh, as torchtitan composes them.

Per block: q/k/v and the MLP's up (and gate) are column-parallel, the attention output and the
MLP's down projection row-parallel with their output reduce-scattered over the sequence; the
norms run sequence-parallel on those shards. The token and position embeddings are split by
rows (vocab / positions); the output layer multiplies the gathered final norm output by the
vocab-sharded (tied or own) weight, and the loss is computed on vocab-sharded logits
(`loss_parallel`), so no rank ever holds the full logits.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_module
from torch.distributed.tensor.parallel import (ColwiseParallel, ParallelStyle, PrepareModuleInput,
                                               PrepareModuleOutput, RowwiseParallel, SequenceParallel,
                                               loss_parallel, parallelize_module)

from trainer.backends.base import DTYPES, Engine, make_optimizer
from trainer.backends.fsdp import fully_shard_model
from trainer.backends.loss_scale import ModelParallelScaler
from trainer.backends.mesh import ParallelMesh, gather_on_rank0, rank_memory
from trainer.backends.tp_parallel_block import parallelize_parallel_block
from trainer.checkpointing import apply_checkpointing
from trainer.model import loss_fn


class _Replicated(ParallelStyle):
    """A norm without sequence parallelism: replicated weights on the full (replicated) stream."""

    def __init__(self, use_local_output: bool):
        super().__init__()
        self.use_local_output = use_local_output

    def _apply(self, module: nn.Module, device_mesh) -> nn.Module:
        def to_dtensor(_mod, inputs, mesh):
            return tuple(DTensor.from_local(a, mesh, (Replicate(),), run_check=False) for a in inputs)

        def out(_mod, outputs, _mesh):
            return outputs.to_local() if self.use_local_output else outputs

        return distribute_module(module, device_mesh, input_fn=to_dtensor, output_fn=out)


def _block_plan(block: nn.Module, sequence_parallel: bool) -> dict:
    """A sequential block: attention and MLP each gather their input and reduce their output."""
    if sequence_parallel:
        norm, gathered = SequenceParallel, PrepareModuleInput(input_layouts=(Shard(1),),
                                                               desired_input_layouts=(Replicate(),))
        reduced = RowwiseParallel(output_layouts=Shard(1))
    else:  # the norm hands attention / MLP one replicated DTensor: one all-reduce of its gradient
        norm, gathered, reduced = (lambda: _Replicated(use_local_output=False)), None, RowwiseParallel()
    plan = {"norm1": norm(), "attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(),
            "attn.v": ColwiseParallel(), "attn.o": reduced,
            "norm2": norm(), "mlp.up": ColwiseParallel(), "mlp.down": reduced}
    if gathered is not None:
        plan |= {"attn": gathered, "mlp": gathered}
    if block.mlp.swiglu:
        plan["mlp.gate"] = ColwiseParallel()
    if getattr(block, "post_attn_norm", None) is not None:  # Gemma 2/3: on attention's / the MLP's reduced output
        post = (lambda: SequenceParallel(use_local_output=True)) if sequence_parallel else \
            (lambda: _Replicated(use_local_output=True))
        plan |= {"post_attn_norm": post(), "post_mlp_norm": post()}
    return plan | qk_norm_plan(block.attn)


def qk_norm_plan(attn: nn.Module) -> dict:
    """Per-head q/k norms (Gemma 3, Qwen3): one weight shared by every head, and this rank holds some of the heads
    (dim 1 of (B, heads, S, head_dim)). Left plain, each rank stepped its copy on its own heads' gradient: the
    replicas drifted apart without a word. As a replicated DTensor on a head-sharded input, its gradient is the
    sum over every rank's heads (torch SequenceParallel: Replicate() weights, Shard(dim) input; the dim may be any)."""
    if getattr(attn, "qk_norm", "none") != "per_head":
        return {}
    return {f"attn.{n}": SequenceParallel(sequence_dim=1, use_local_output=True) for n in ("q_norm", "k_norm")}


def apply_tensor_parallel(model: nn.Module, tp_mesh, sequence_parallel: bool = True) -> None:
    """Split a GPT, or a pipeline stage holding some of its parts, over `tp_mesh` in place.

    With sequence parallelism the residual stream between blocks stays a plain tensor holding
    this rank's sequence shard (B, S/t, H); each sequential block's attention and MLP all-gather
    it and reduce-scatter their output, a parallel block does one pair
    (trainer/backends/tp_parallel_block.py). Without it the stream is replicated and the
    reductions are all-reduces.
    """
    t = tp_mesh.size()
    sp = sequence_parallel
    plan: dict = {}
    stream = Shard(1) if sp else Replicate()
    if getattr(model, "embed", None) is not None:  # the first stage's input, or the tied head
        plan["embed"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=stream)
    if getattr(model, "pos", None) is not None:  # (S, H) table rows -> this rank's positions
        plan["pos"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0) if sp else Replicate())
    if getattr(model, "embed_norm", None) is not None:
        plan["embed_norm"] = SequenceParallel(use_local_output=True) if sp else _Replicated(use_local_output=True)
    if getattr(model, "head", None) is not None:  # weight rows split by vocab (Shard(0))
        plan["head"] = ColwiseParallel()
    if getattr(model, "norm", None) is not None:
        # its output must be a replicated DTensor: logits = x @ W^T with W vocab-sharded -> Shard(-1)
        plan["norm"] = SequenceParallel() if sp else _Replicated(use_local_output=False)
    parallelize_module(model, tp_mesh, plan)
    if sp and getattr(model, "norm", None) is not None:
        parallelize_module(model.norm, tp_mesh, PrepareModuleOutput(
            output_layouts=Shard(1), desired_output_layouts=Replicate(), use_local_output=False))
    for block in model.blocks:
        if getattr(block, "parallel", False):
            parallelize_parallel_block(block, tp_mesh, sp)
            continue
        parallelize_module(block, tp_mesh, _block_plan(block, sp))
        block.attn.n_heads //= t  # the local heads of this rank
        block.attn.kv_heads //= t


def align_grad_placements(params) -> None:
    """Give each DTensor gradient its parameter's placement (a local slice, no communication).

    The row-parallel embedding's backward returns a replicated weight gradient: left so, every
    rank would hold (and step on) the full table's gradient instead of its shard.
    """
    for p in params:
        g = p.grad
        if g is not None and hasattr(g, "placements") and g.placements != p.placements:
            p.grad = g.redistribute(placements=p.placements)


def parallel_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of vocab-sharded logits (a DTensor) or of plain logits."""
    ctx = loss_parallel() if hasattr(logits, "placements") else contextlib.nullcontext()
    with ctx:
        return loss_fn(logits, targets)


class TensorParallelEngine(Engine):
    """tp > 1, pp = 1: DTensor tensor parallelism, then FSDP2 over dp (fsdp_*), or dp = 1."""

    name = "tensor_parallel"

    def __init__(self, cfg, model, device):
        super().__init__(cfg, model, device)
        self.mesh = ParallelMesh.build(cfg, device.type)
        self.dp, self.dp_rank = self.mesh.dp, self.mesh.dp_rank
        if cfg.plan.precision == "bf16_pure":
            model.to(DTYPES["bf16_pure"])
        model.to(device)
        apply_tensor_parallel(model, self.mesh.tp_mesh, cfg.plan.sequence_parallel)
        apply_checkpointing(model, cfg.plan.activation_checkpointing)
        self.fsdp = cfg.plan.sharding.startswith("fsdp")
        if self.fsdp:
            fully_shard_model(cfg, model, model.blocks, self.mesh.dp_mesh())
        self.module = model
        self.optimizer = make_optimizer(cfg, model.parameters())
        # fp16: one overflow decision for every rank (a tp rank holds a slice of each gradient)
        self.scaler = ModelParallelScaler(cfg.run.loss_scale) if cfg.plan.precision == "fp16" else None

    def autocast(self):
        return contextlib.nullcontext() if self.fsdp else super().autocast()

    def forward_loss(self, x, y, last=True):
        if self.fsdp:
            self.module.set_requires_gradient_sync(last)
        with self.autocast():
            return parallel_loss(self.module(x), y)

    def backward(self, loss, last):
        with loss_parallel():  # the loss's backward must run under the same context
            super().backward(loss, last)
        if last:
            align_grad_placements(self.module.parameters())

    def gather_rank_stats(self, state, saved_bytes, warmup_steps):
        return gather_on_rank0(rank_memory(state, saved_bytes) | self.mesh.coords() | self.scaling_stats())

    def parallel_stats(self, per_rank):
        from trainer.result import ParallelStats, RankStats

        return ParallelStats(tp=self.mesh.tp, pp=1, vpp=1, dp=self.mesh.dp, dp_replicate=self.mesh.hybrid_replicate,
                             sequence_parallel=self.cfg.plan.sequence_parallel, ranks=[RankStats(**r) for r in per_rank or []])
