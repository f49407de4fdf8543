"""The routed experts of one MoE layer as stacked weights, run as one grouped GEMM per projection or as a loop.

Weights (E, out, in) per projection, as nn.Linear's (out, in) stacked over the E experts (torchtitan's GroupedExperts
and transformers' fused Mixtral / Qwen3-MoE experts store them stacked too); biases (E, out). The parameter count is
E times one Mlp's (planner/moe.py routed_expert_params). A sharding wrapper sees one module (this) holding every
expert: DeepSpeed ZeRO-3 gathers its weights when this module runs, FSDP2 with the block.

Two ways to run the rows of x sorted by expert (`counts[e]` rows for expert e, in expert order):
- grouped: torch._grouped_mm(x (T, in), W^T (E, in, out), offs = cumsum(counts) int32), one kernel per projection
  (ATen Blas.cpp _grouped_mm_cuda: bf16 operands, CUDA sm90 and later, each matrix's leading stride 16-byte aligned,
  i.e. in/out multiples of 8 elements in bf16: torch/_meta_registrations.py _meta_grouped_mm_common). Selected by
  `grouped_ok`: a CUDA tensor in bf16 on compute capability >= 9.0, aligned widths.
- loop: one F.linear per expert on its slice (every expert runs, on 0 rows when none chose it: a zero gradient, so
  every parameter takes part in every backward). Everywhere else (CPU, fp32/fp16, older GPUs).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# torch >= 2.8 has the op (its CPU kernel runs too, used by the tests; the trainer takes it on CUDA only)
HAS_GROUPED_MM = hasattr(torch, "_grouped_mm")


def grouped_ok(device: torch.device, dtype: torch.dtype, widths: tuple[int, ...]) -> bool:
    """The grouped GEMM serves these experts: NVIDIA CUDA sm90+, bf16 (the CUDA kernel's only unscaled dtype), every
    width a multiple of 8 (16-byte rows)."""
    if not (HAS_GROUPED_MM and device.type == "cuda" and dtype == torch.bfloat16) or torch.version.hip:
        return False  # (ROCm reports its gfx9 GPUs as capability 9.x: not the sm90 this names)
    return torch.cuda.get_device_capability(device) >= (9, 0) and all(w % 8 == 0 for w in widths)


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype x's GEMMs run in: autocast's (DDP's bf16 runs fp32 weights and an fp32 residual stream under it)
    or x's own."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


class Experts(nn.Module):
    """E experts of the model's MLP form (SwiGLU: down(silu(gate x) * up x), else down(gelu(up x)))."""

    def __init__(self, n: int, hidden: int, width: int, swiglu: bool, bias: bool):
        super().__init__()
        self.n, self.swiglu = n, swiglu
        names = (("gate", width, hidden),) if swiglu else ()
        names += (("up", width, hidden), ("down", hidden, width))
        for name, rows, cols in names:
            # nn.Linear's weight per expert, normal(0, 0.02) as trainer/model.py _init; biases zero
            self.register_parameter(name, nn.Parameter(torch.empty(n, rows, cols).normal_(std=0.02)))
            self.register_parameter(f"{name}_bias", nn.Parameter(torch.zeros(n, rows)) if bias else None)
        self.force_grouped: bool | None = None  # tests: True runs the grouped GEMM wherever the op has a kernel

    def use_grouped(self, x: torch.Tensor) -> bool:
        if self.force_grouped is not None:
            return self.force_grouped
        return grouped_ok(x.device, compute_dtype(x), (self.up.shape[1], self.up.shape[2]))

    def one(self, e: int, x: torch.Tensor, split: dict | None = None) -> torch.Tensor:
        """Expert `e` on x (..., hidden); `split`: the parameters unbound per expert (`_per_expert`)."""
        split = split or self._per_expert()

        def lin(name, t):
            b = split[f"{name}_bias"]
            return F.linear(t, split[name][e], None if b is None else b[e])

        h = F.silu(lin("gate", x)) * lin("up", x) if self.swiglu else F.gelu(lin("up", x))
        return lin("down", h)

    def _per_expert(self) -> dict:
        """Each stacked parameter as its E slices, by one unbind (its backward stacks the E gradients into one tensor;
        indexing w[e] per expert would build a zero-filled full-size gradient per expert)."""
        return {name: None if p is None else p.unbind(0) for name, p in self._parameters.items()}

    def forward(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """x (T, hidden): rows sorted by expert, `counts` (E,) rows per expert -> (T, hidden)."""
        if not self.use_grouped(x):
            split = self._per_expert()
            pieces = x.split(counts.tolist())
            return torch.cat([self.one(e, piece, split) for e, piece in enumerate(pieces)])
        x = x.to(compute_dtype(x))  # under autocast F.linear would cast; _grouped_mm takes what it is given
        offs = counts.cumsum(0).to(torch.int32)
        row_expert = torch.repeat_interleave(torch.arange(self.n, device=x.device), counts, output_size=x.shape[0])

        def lin(name, t):
            w, b = getattr(self, name), getattr(self, f"{name}_bias")
            y = torch._grouped_mm(t, w.to(t.dtype).transpose(-2, -1), offs=offs)
            return y if b is None else y + b.to(y.dtype)[row_expert]

        h = F.silu(lin("gate", x)) * lin("up", x) if self.swiglu else F.gelu(lin("up", x))
        return lin("down", h)
