"""Tensor parallelism of a parallel attention + MLP block (GPT-J, GPT-NeoX, PaLM, Falcon):
y = x + attn(n1(x)) + mlp(n2(x)), one TP collective pair per block instead of two.

The block input is gathered once (sequence parallel: one all-gather of the (B, S/t, H) shard;
otherwise a replicated tensor whose gradient is all-reduced once), both norms run on it
replicated, the shared normed input feeds the column-parallel q/k/v and MLP input projections,
and the row-parallel outputs of attention and MLP stay partial sums (`Partial`) that are added
locally and reduced ONCE (a reduce-scatter back to the sequence shard, or one all-reduce): in
backward the same pair runs the other way (all-gather of dY, one reduce-scatter / all-reduce of
dX summed over q, k, v, up and gate). GPT-NeoX-20B (Black et al. 2022, arXiv 2204.06745,
sec. 3.1) and planner/parallel_block.tp_calls_per_pass count exactly this.

The model's Block stays free of parallelism: as FSDP2's `fully_shard` does, the block's class
is swapped for a subclass whose forward places the collectives (parameter names unchanged).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_module
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


class TensorParallelBlock(nn.Module):
    """Mixin placed before a parallel Block's class; `tp_mesh` and `tp_sequence_parallel` are set
    on the instance by `parallelize_parallel_block`."""

    tp_mesh = None
    tp_sequence_parallel = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stream = (Shard(1),) if self.tp_sequence_parallel else (Replicate(),)
        inp = DTensor.from_local(x, self.tp_mesh, stream, run_check=False)
        if self.norm2 is None:  # one norm: normalize the shard, gather its output once
            y1 = y2 = self.norm1(inp).redistribute(placements=(Replicate(),))
        else:  # two norms read the same input: gather it once, normalize it replicated
            full = inp.redistribute(placements=(Replicate(),))
            y1, y2 = self.norm1(full), self.norm2(full)
        out = self.attn(y1) + self.mlp(y2)  # Partial + Partial: one reduction
        return x + out.redistribute(placements=stream).to_local()


def _partial_rowwise() -> RowwiseParallel:
    # the row-parallel output stays a partial sum: attention's and the MLP's are added first
    return RowwiseParallel(output_layouts=Partial(), use_local_output=False)


def parallelize_parallel_block(block: nn.Module, tp_mesh, sequence_parallel: bool) -> None:
    """Split a parallel Block over `tp_mesh` in place (heads and MLP columns; norms replicated)."""
    if not getattr(block, "parallel", False):
        raise ValueError("parallelize_parallel_block needs a block with spec.parallel_block")
    if getattr(block, "post_attn_norm", None) is not None:
        raise ValueError("a parallel block with post-norms is not implemented by the bundled trainer")
    if getattr(block.attn, "qk_norm", "none") == "full":
        raise ValueError("full-width q/k norms with tensor parallelism are not implemented by the bundled trainer")
    from trainer.backends.tensor_parallel import qk_norm_plan

    plan = {"attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
            "attn.o": _partial_rowwise(), "mlp.up": ColwiseParallel(), "mlp.down": _partial_rowwise()}
    plan |= qk_norm_plan(block.attn)
    if block.mlp.swiglu:
        plan["mlp.gate"] = ColwiseParallel()
    parallelize_module(block, tp_mesh, plan)
    for name in ("norm1", "norm2"):  # replicated weights; they read the gathered block input
        if getattr(block, name, None) is not None:
            distribute_module(getattr(block, name), tp_mesh)
    t = tp_mesh.size()
    block.attn.n_heads //= t  # the local heads of this rank
    block.attn.kv_heads //= t
    cls = type(block)
    block.__class__ = type(f"TensorParallel{cls.__name__}", (TensorParallelBlock, cls), {})
    block.tp_mesh, block.tp_sequence_parallel = tp_mesh, sequence_parallel
