"""State-space (Mamba-1 / Mamba-2) layers and hybrid layer stacks: exact parameters, forward FLOPs,
saved activations and HBM traffic per token, and the per-layer shares the dense terms run on.

A hybrid stack is `ModelSpec.layer_pattern`, one character per layer as Nemotron-H's
hybrid_override_pattern (NVIDIA Megatron-LM megatron/core/ssm/mamba_hybrid_layer_allocation.py): `M` a
Mamba mixer, `*` an attention mixer, `-` an MLP (an MoE MLP where the moe fields put one), each layer
x + mixer(norm(x)) with its own pre-norm. Jamba's 32 layers of (mixer, MLP) are its 64 sub-layers
("M-M-M-M-*-M-M-M-" x 4, MoE on every 4th: moe_layer_freq 4); pure Mamba is "MMM...M". A model
without a pattern is the dense transformer block of the other fields (unchanged).

Mamba-1 mixer (Gu & Dao 2023, arXiv 2312.00752, sec. 3.4 Fig. 3; mamba_ssm/modules/mamba_simple.py):
in_proj h -> 2 d_inner (x, z); depthwise conv1d over d_inner (kernel k, bias); x_proj d_inner -> R + 2N
(dt, B, C; R = dt_rank); dt_proj R -> d_inner (bias); A_log d_inner x N; D d_inner; out_proj d_inner -> h.
Mamba-2 mixer (Dao & Gu 2024, arXiv 2405.21060, sec. 7.1 Fig. 6; mamba_ssm/modules/mamba2.py):
in_proj h -> 2 d_inner + 2 G N + H (z, x, B, C, dt); conv1d over d_inner + 2 G N (bias); dt_bias, A_log,
D per head (H = d_inner / head_dim); gated RMSNorm over d_inner; out_proj d_inner -> h.

FLOPs (model FLOPs of MFU, planner/flops.py's conventions): the projections as GEMMs (2 per
multiply-add); the depthwise conv 2 k per channel; Mamba-2's SSD chunked algorithm (Dao & Gu 2024
sec. 6, chunk Q = 256, mamba_ssm's chunk_size) as its matmuls: per chunk C B^T (Q x Q x N per group),
the masked Q x Q x P product per head, the chunk states B^T X and the state-to-output C h (Q x N x P
per head each), = 2 Q (G N + d_inner) + 4 N d_inner per token. Mamba-1's selective scan is
element-wise and memory-bound (Gu & Dao 2023 sec. 3.3.2: the hardware-aware scan keeps the expanded
state in SRAM and reads/writes only its inputs and output): no GEMM FLOPs, timed as bytes moved.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from planner.model import ModelSpec

KINDS = {"M": "mamba", "*": "attention", "-": "mlp"}
SSD_CHUNK = 256  # Mamba-2's chunk size (mamba_ssm Mamba2(chunk_size=256); Dao & Gu 2024 sec. 6)
SSM_FIELDS = ("ssm_version", "ssm_state_size", "ssm_inner", "ssm_conv_kernel", "ssm_head_dim", "ssm_groups",
              "ssm_dt_rank", "ssm_dt_bc_norms")
_DEFAULT = {"ssm_dt_bc_norms": False}


# ---- the pattern ---------------------------------------------------------------------------------
def is_hybrid(spec: "ModelSpec") -> bool:
    return spec.layer_pattern is not None


def count(spec: "ModelSpec", kind: str) -> int:
    return spec.layer_pattern.count(kind) if is_hybrid(spec) else 0


def mlp_mask(spec: "ModelSpec") -> np.ndarray:
    """True for each layer with an MLP (every layer of a dense model)."""
    if not is_hybrid(spec):
        return np.ones(spec.n_layers, dtype=bool)
    return np.array([c == "-" for c in spec.layer_pattern])


def shares(spec: "ModelSpec") -> tuple[float, float, float]:
    """(attention, MLP, Mamba) share of the layers; a dense block has attention and MLP in each: (1, 1, 0)."""
    if not is_hybrid(spec):
        return 1.0, 1.0, 0.0
    n = spec.n_layers
    return count(spec, "*") / n, count(spec, "-") / n, count(spec, "M") / n


def attention_share(spec: "ModelSpec") -> float:
    return shares(spec)[0]


def mlp_share(spec: "ModelSpec") -> float:
    return shares(spec)[1]


def check_spec(spec: "ModelSpec") -> None:
    """One-line errors naming the field (ModelSpec's validator raises them as ValueError)."""
    if not is_hybrid(spec):
        given = [k for k in SSM_FIELDS if getattr(spec, k) != _DEFAULT.get(k)]
        if given:
            raise ValueError(f"{given[0]} needs layer_pattern (one character per layer: M Mamba, * attention, - MLP)")
        return
    p = spec.layer_pattern
    bad = sorted(set(p) - set(KINDS))
    if bad:
        raise ValueError(f"layer_pattern: {bad[0]!r} is not a layer kind (allowed: M Mamba, * attention, - MLP)")
    if len(p) != spec.n_layers:
        raise ValueError(f"layer_pattern has {len(p)} layers, n_layers is {spec.n_layers}")
    if spec.parallel_block:
        raise ValueError("parallel_block with layer_pattern is not modelled (each pattern layer is one pre-norm block)")
    if "M" in p and (spec.ssm_version is None or spec.ssm_state_size is None):
        raise ValueError("layer_pattern with Mamba layers (M) needs ssm_version (1 or 2) and ssm_state_size")
    if "M" not in p and spec.ssm_version is not None:
        raise ValueError("ssm_version without a Mamba layer (M) in layer_pattern")
    if spec.ssm_version == 2:
        if inner(spec) % head_dim(spec):
            raise ValueError(f"ssm_inner ({inner(spec)}) must be divisible by ssm_head_dim ({head_dim(spec)})")
        if heads(spec) % groups(spec):
            raise ValueError(f"the {heads(spec)} Mamba-2 heads must be divisible by ssm_groups ({groups(spec)})")
    from planner import moe

    if moe.is_moe(spec) and not all(p[i] == "-" for i in np.flatnonzero(moe.moe_layer_mask(spec))):
        raise ValueError("moe_layer_freq / moe_first_dense_layers put an MoE MLP on a layer that is not an MLP (-) "
                         "in layer_pattern")


# ---- Mamba shapes (defaults: mamba_ssm's Mamba / Mamba2 constructors) -----------------------------
def inner(spec: "ModelSpec") -> int:
    return spec.ssm_inner or 2 * spec.hidden  # d_inner = expand x d_model, expand 2


def conv_kernel(spec: "ModelSpec") -> int:
    return spec.ssm_conv_kernel or 4


def head_dim(spec: "ModelSpec") -> int:
    return spec.ssm_head_dim or 64  # Mamba2(headdim=64)


def heads(spec: "ModelSpec") -> int:
    return inner(spec) // head_dim(spec) if spec.ssm_version == 2 else 0


def groups(spec: "ModelSpec") -> int:
    return spec.ssm_groups or 1  # Mamba2(ngroups=1)


def dt_rank(spec: "ModelSpec") -> int:
    return spec.ssm_dt_rank or math.ceil(spec.hidden / 16)  # Mamba(dt_rank="auto") = ceil(d_model / 16)


def in_proj_width(spec: "ModelSpec") -> int:
    d, n = inner(spec), spec.ssm_state_size
    if spec.ssm_version == 1:
        return 2 * d  # x, z (Gu & Dao 2023 Fig. 3)
    return 2 * d + 2 * groups(spec) * n + heads(spec)  # z, x, B, C, dt (Dao & Gu 2024 sec. 7.1)


def conv_channels(spec: "ModelSpec") -> int:
    d = inner(spec)
    return d if spec.ssm_version == 1 else d + 2 * groups(spec) * spec.ssm_state_size  # conv over x (, B, C)


def mixer_params(spec: "ModelSpec") -> int:
    """One Mamba mixer's parameters (its layer's pre-norm excluded)."""
    h, d, n, k = spec.hidden, inner(spec), spec.ssm_state_size, conv_kernel(spec)
    c = conv_channels(spec)
    proj = h * in_proj_width(spec) + d * h  # in_proj, out_proj (no bias: Mamba(bias=False))
    conv = c * k + c  # depthwise conv1d weight and bias (conv_bias=True)
    if spec.ssm_version == 1:
        r = dt_rank(spec)
        norms = (r + 2 * n) if spec.ssm_dt_bc_norms else 0  # Jamba's dt/B/C RMSNorms (JambaMambaMixer)
        return proj + conv + d * (r + 2 * n) + (r * d + d) + d * n + d + norms  # x_proj, dt_proj, A_log, D
    return proj + conv + 3 * heads(spec) + d  # dt_bias, A_log, D per head; gated RMSNorm over d_inner


# ---- per-layer parameters of a pattern ------------------------------------------------------------
def _norm_params(spec: "ModelSpec") -> int:
    return sum(math.prod(s) for s in spec._norm_shapes())


def _mlp_params(spec: "ModelSpec") -> int:
    from planner import moe

    return moe.mlp_params(spec, spec.ffn)


def _attention_params(spec: "ModelSpec") -> int:
    """The transformer block's attention (q, k, v, o, their biases, q/k norms): its block less MLP and norms."""
    block = sum(math.prod(s) for s in spec.layer_param_shapes())
    return block - _mlp_params(spec) - spec.norms_per_layer * _norm_params(spec)


def kind_params(spec: "ModelSpec") -> dict[str, int]:
    """Parameters of one layer of each kind, its pre-norm included (an MoE layer counted dense here)."""
    norm = _norm_params(spec)
    out = {"*": _attention_params(spec) + norm, "-": _mlp_params(spec) + norm}
    if spec.ssm_version is not None:
        out["M"] = mixer_params(spec) + norm
    return out


def layers_params(spec: "ModelSpec") -> int:
    """Every layer of the pattern (MoE layers as dense MLPs: planner/moe.py adds the experts)."""
    per = kind_params(spec)
    return sum(per[c] * spec.layer_pattern.count(c) for c in KINDS)


def mean_layer_params(spec: "ModelSpec") -> int:
    return round(layers_params(spec) / spec.n_layers)


def largest_layer_params(spec: "ModelSpec") -> int:
    per = kind_params(spec)
    return max(per[c] for c in set(spec.layer_pattern))


def largest_module_params(spec: "ModelSpec") -> int:
    """Mamba's in_proj is its largest linear (h x in_proj width)."""
    return spec.hidden * in_proj_width(spec) if "M" in spec.layer_pattern else 0


# ---- forward FLOPs per token ----------------------------------------------------------------------
def projection_gemms(spec: "ModelSpec") -> list[tuple[int, int]]:
    """(N, K) of each linear of a Mamba mixer, forward order (in_proj column-parallel, out_proj row-parallel)."""
    h, d = spec.hidden, inner(spec)
    if spec.ssm_version == 1:
        r, n = dt_rank(spec), spec.ssm_state_size
        return [(in_proj_width(spec), h), (r + 2 * n, d), (d, r), (h, d)]  # in, x_proj, dt_proj, out
    return [(in_proj_width(spec), h), (h, d)]


def ssd_forward_flops_per_token(spec: "ModelSpec", seq_len=SSD_CHUNK) -> np.ndarray:
    """Mamba-2's chunked SSD matmuls per token (Dao & Gu 2024 sec. 6; a chunk no longer than the sequence)."""
    q = np.minimum(np.asarray(seq_len, dtype=np.float64), SSD_CHUNK)
    d, n, g = inner(spec), spec.ssm_state_size, groups(spec)
    return 2.0 * q * (g * n + d) + 4.0 * n * d


def mixer_forward_flops_per_token(spec: "ModelSpec", seq_len) -> np.ndarray:
    """One Mamba mixer: its GEMMs, the depthwise conv and (Mamba-2) the SSD matmuls; linear in seq_len."""
    gemm = sum(2.0 * n * k for n, k in projection_gemms(spec))
    conv = 2.0 * conv_channels(spec) * conv_kernel(spec)
    ssd = ssd_forward_flops_per_token(spec, seq_len) if spec.ssm_version == 2 else 0.0
    return gemm + conv + ssd + 0.0 * np.asarray(seq_len, dtype=np.float64)


def layer_forward_flops_per_token(spec: "ModelSpec", seq_len) -> np.ndarray:
    """The forward FLOPs of one layer averaged over the pattern (planner/flops.py's per-block term)."""
    from planner import flops

    h, q, kv, f = spec.hidden, spec.q_dim, spec.kv_dim, spec.ffn
    a, m_share, s_share = shares(spec)
    proj = 2 * h * (q + 2 * kv) + 2 * q * h
    mlp = 2 * h * f * (3 if spec.mlp == "swiglu" else 2)
    mamba = mixer_forward_flops_per_token(spec, seq_len) if s_share else 0.0
    # the attention core already carries the attention share (flops.attention_core_forward_flops_per_token)
    return a * proj + m_share * mlp + s_share * mamba + flops.attention_core_forward_flops_per_token(spec, seq_len)


def model_flops_per_token(spec: "ModelSpec", seq_len) -> np.ndarray:
    """3 x forward of every layer (an MoE model's active MLPs, its routers) and the logits."""
    from planner import flops, moe

    view = moe.dense_view(spec)
    fwd = spec.n_layers * layer_forward_flops_per_token(view, seq_len)
    return 3.0 * (fwd + (moe.router_forward_flops_per_token(spec) if moe.is_moe(spec) else 0.0)
                  + flops.logits_forward_flops_per_token(spec))


# ---- memory traffic and saved activations per token of a Mamba mixer ------------------------------
def hbm_elems_per_token(spec: "ModelSpec") -> float:
    """Elements a mixer's kernels write and read back between in_proj and out_proj, forward: each
    intermediate once written, once read (Mamba-1: xz, the conv output, x_dbl, dt, y; Mamba-2: zxbcdt,
    the conv output xBC, y and the gated norm's output); the expanded N-wide state stays on chip."""
    d, n = inner(spec), spec.ssm_state_size
    if spec.ssm_version == 1:
        widths = 2 * d + d + dt_rank(spec) + 2 * n + d + d
    else:
        widths = in_proj_width(spec) + conv_channels(spec) + 2 * d
    return 2.0 * widths


def saved_elems_per_token(spec: "ModelSpec", tp, sp_div) -> np.ndarray:
    """Elements a Mamba layer keeps for backward per token on one GPU (no s x s term): its input and
    the normed in_proj input (split by tp only with sequence parallelism), and what the fused kernels
    save: Mamba-1 mamba_inner_fn (checkpoint_lvl 1) xz, x_dbl and the scan output (conv output and dt
    recomputed); Mamba-2 mamba_split_conv1d_scan_combined zxbcdt, the scan output and out_proj's input
    (the conv recomputed). Mamba-2 splits heads and groups over tp (Megatron-Core MambaMixer)."""
    d, n = inner(spec), spec.ssm_state_size
    t = np.asarray(tp, dtype=np.float64)
    replicated = 2.0 * spec.hidden / sp_div
    if spec.ssm_version == 1:
        return replicated + (2 * d + dt_rank(spec) + 2 * n + d) / t
    return replicated + (in_proj_width(spec) + 2 * d) / t


def describe(spec: "ModelSpec") -> str:
    if not is_hybrid(spec):
        return ""
    names = {"M": f"Mamba-{spec.ssm_version}", "*": "attention", "-": "MLP"}
    kinds = " + ".join(f"{count(spec, c)} {names[c]}" for c in "M*-" if count(spec, c))
    ssm_shape = (f" (d_state {spec.ssm_state_size}, d_inner {inner(spec)}"
                 + (f", {heads(spec)} heads x {head_dim(spec)}" if spec.ssm_version == 2 else "") + ")"
                 if spec.ssm_version else "")
    return f"; layers: {kinds}{ssm_shape}"
