"""Mamba layers in the step time and the plan rules (pure, vectorised over candidate plans).

planner/throughput.py times a block's GEMMs, attention core and element-wise kernels per token; a
hybrid stack's block terms carry their layer shares (planner/ssm.py `shares`: attention and MLP
GEMMs, attention core), and this module adds the Mamba layers' share:
- GEMMs: in_proj (column-parallel), out_proj (row-parallel) and Mamba-1's x_proj / dt_proj through
  the GEMM model (the GPU's efficiency curve by size x tile/wave quantization, planner/gemm_shape.py);
  Mamba-2's SSD chunked matmuls (Dao & Gu 2024 sec. 6) as one batched kernel at the size curve x
  flops.ATTENTION_CORE_FACTOR (a fused Triton kernel, as fused attention without a measured curve),
  at the 16-bit peak;
- memory-bound kernels: each intermediate between the projections written and read once
  (ssm.hbm_elems_per_token, the selective scan's inputs and output included: Gu & Dao 2023 sec. 3.3.2)
  plus the layer's pre-norm, at the GPU's achieved HBM bandwidth (datasheet x HBM_EFFICIENCY), in the
  element-wise part (x its forward + backward passes there).
The transformer block's element-wise traffic (Korthikanti et al. 2022) is kept for its attention and
MLP halves: (attention share + MLP share) / 2 of a block's.

Tensor parallelism: Megatron-Core's MambaMixer (NVIDIA/Megatron-LM megatron/core/ssm/mamba_mixer.py,
MambaMixer.__init__) splits in_proj column-wise and out_proj row-wise by whole heads and groups:
"nheads must be evenly divisble by tp_size", "ngroups must be evenly divisible by tp_size"; one
all-reduce (or reduce-scatter with sequence parallelism) per layer and direction, as every pattern
layer (planner/parallel_block.py). It is a Mamba-2 mixer: Mamba-1 with tp > 1 has no implementation
verified here and is refused. Context parallelism with Mamba layers is refused (the scan carries its
state along the sequence; not modelled).
"""

from __future__ import annotations

import numpy as np

from planner import flops, gemm_shape, ssm


def _f(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def gemm_s_per_token(spec, layout, gpu, gemm_peak, peak16, pts, elem_bytes) -> np.ndarray:
    """Forward seconds per token and layer (mean over the pattern) of the Mamba layers' GEMMs and SSD."""
    _, _, share = ssm.shares(spec)
    if not share:
        return np.zeros(np.shape(layout.tp))
    t = _f(layout.tp)
    tokens = _f(layout.micro_batch) * layout.seq_len / layout.cp
    shape = gemm_shape.GemmShapeData.of(gpu)
    gemms = ssm.projection_gemms(spec)
    total = 0.0
    for i, (n, k) in enumerate(gemms):
        row = i == len(gemms) - 1  # out_proj: row-parallel (K split); the others column-parallel
        n_gpu, k_gpu = (np.full(np.shape(t), float(n)), k / t) if row else (n / t, np.full(np.shape(t), float(k)))
        per_token = 2.0 * n * k / t
        q = gemm_shape.linear_efficiency(tokens, n_gpu, k_gpu, shape, elem_bytes)
        total = total + per_token / (gemm_peak * flops.efficiency(pts, tokens * per_token / 1e9) * q)
    if spec.ssm_version == 2:
        per_token = ssm.ssd_forward_flops_per_token(spec, layout.seq_len) / t
        eff = flops.efficiency(pts, tokens * per_token / 1e9) * flops.ATTENTION_CORE_FACTOR
        total = total + per_token / (peak16 * eff)
    return share * total


def elementwise_s_per_token(spec, layout, block_elem_s, elem_bytes, hbm_Bps) -> np.ndarray:
    """A block's element-wise seconds per token (throughput.py's) as a hybrid stack's layer mean: the
    transformer halves at their shares, the Mamba layers' memory-bound kernels at theirs."""
    if not ssm.is_hybrid(spec):
        return block_elem_s
    a, f, share = ssm.shares(spec)
    out = block_elem_s * (a + f) / 2.0
    if share:
        t = _f(layout.tp)
        sp_div = np.where(layout.sequence_parallel == 1, t, 1.0)
        elems = 2.0 * spec.hidden / sp_div + ssm.hbm_elems_per_token(spec) / t  # pre-norm in/out + mixer
        out = out + share * elems * elem_bytes / hbm_Bps
    return out


# ---- plan rules (planner/rules.py takes them) ----------------------------------------------------
def _mamba2_tp_bad(k) -> object:
    spec = k.spec
    if spec.ssm_version != 2 or not ssm.count(spec, "M"):
        return False
    return (ssm.heads(spec) % k.tp != 0) | (ssm.groups(spec) % k.tp != 0)


def _has_mamba(spec) -> bool:
    return ssm.count(spec, "M") > 0


RULES = [
    dict(name="ssm_tp_heads", reason="tp does not divide the Mamba-2 heads and groups", field="tp",
         inputs=("tp", "spec"), bad=_mamba2_tp_bad,
         message=lambda k: f"{k.tp} does not divide the {ssm.heads(k.spec)} Mamba-2 heads and {ssm.groups(k.spec)} "
                           f"groups (ssm_groups) of {k.spec.name}: Megatron-Core's MambaMixer splits whole heads and "
                           f"groups (allowed: tp dividing both)"),
    dict(name="ssm_tp_mamba1", reason="tp > 1 with Mamba-1 layers", field="tp", inputs=("tp", "spec"),
         bad=lambda k: (k.tp > 1) & (k.spec.ssm_version == 1) & _has_mamba(k.spec),
         message=lambda k: f"{k.tp} with the Mamba-1 layers of {k.spec.name}: no tensor-parallel Mamba-1 mixer is "
                           "modelled (Megatron-Core's MambaMixer is Mamba-2; allowed: 1)"),
    dict(name="ssm_cp", reason="context parallelism with Mamba layers", field="cp", inputs=("cp", "spec"),
         bad=lambda k: (k.cp > 1) & _has_mamba(k.spec),
         message=lambda k: f"{k.cp} with the Mamba layers of {k.spec.name}: the selective scan carries its state "
                           "along the sequence; context parallelism of SSM layers is not modelled (allowed: 1)"),
]


def has_attention(spec) -> bool:
    """Whether the tp/kv-heads rules apply (a pure Mamba stack has no attention heads to split)."""
    return ssm.attention_share(spec) > 0
