"""fp8 scaling recipes as catalog data: catalog/fp8_recipes/<id>.toml -> `FP8Recipe`.

An fp8 training recipe (how the scale of each GEMM operand is chosen) sets two costs that the
planner's step time needs (planner/fp8.py):
- the speed of its scaled GEMM kernels, as a share of the 16-bit GEMM efficiency at the same
  size (the fp8 GEMM then runs at that share of the fp8 peak);
- the HBM traffic of its quantisation kernels (amax, scale, cast, transposed copies), in bytes
  per element of each GEMM operand of a linear: its input, its weight, the gradient of its
  output (the three operands of the three GEMMs of a linear's forward and backward);
and whether the tensor-parallel all-gather of a linear's input carries fp8 (the cast happens
once per module on the sequence-parallel shard) or the 16-bit input is gathered and each linear
casts the whole gathered input itself, and whether the backward all-gather of a row-parallel
output gradient does; and what the casts cost where a norm or activation kernel writes fp8 itself
(Transformer Engine's fused modules).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class FP8Recipe(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    name: str
    gemm_efficiency: float = Field(
        gt=0, le=1, description="fp8 GEMM share of the 16-bit GEMM efficiency at the same size (at the fp8 peak)")
    input_bytes_per_element: float = Field(ge=0, description="quantisation HBM bytes per element of a linear's input")
    weight_bytes_per_element: float = Field(ge=0, description="quantisation HBM bytes per weight element, per cast")
    grad_output_bytes_per_element: float = Field(
        ge=0, description="quantisation HBM bytes per element of the gradient of a linear's output")
    output_rescale_bytes_per_element: float = Field(
        default=0.0, ge=0, description="bytes per element of a backward GEMM output rescaled by a separate kernel")
    weight_cast_per_step: bool = Field(
        default=False, description="fp8 weights cast once per optimizer step and reused by every micro batch")
    tp_fp8_allgather: bool = Field(
        default=False, description="the TP all-gather of a linear's input carries fp8, cast once per module")
    producer_fused_bytes_per_element: float | None = Field(
        default=None, ge=0, description="bytes per element of the casts a norm or activation kernel does itself, "
        "writing fp8 (the inputs of qkv, up and down, the output gradient of up); None: no such fused kernels")
    tp_fp8_grad_allgather: bool = Field(
        default=False, description="the backward TP all-gather of a row-parallel linear's output gradient carries fp8")
    saved_input_bytes: float | None = Field(
        default=None, gt=0, description="bytes per element a linear keeps of its input for backward (TE: its fp8 "
        "cast, 1); None: the 16-bit input (planner/fp8_saved.py)")
    source: str


__all__ = ["FP8Recipe"]
