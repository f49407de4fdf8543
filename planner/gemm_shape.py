"""GEMM shape effects: tile and wave quantization (pure, vectorised over candidate plans).

NVIDIA "Matrix Multiplication Background" User's Guide (DU-09799-001, 2023): cuBLAS computes a
GEMM's M x N output in tiles, one thread block each (sec. 2.3: 256x128 and 128x256 are the most
efficient tiles on A100; 128x128 and smaller ones are picked where they waste less);
- tile quantization (sec. 3.1): a dimension that is not a multiple of the tile still costs the
  whole last tile, so the useful share is dim / (ceil(dim / tile) * tile);
- wave quantization (sec. 3.2): with one large tile per SM, the tiles run in waves of `sm_count`
  (108 on A100) and the last partial wave leaves SMs idle: tiles / (ceil(tiles / SMs) * SMs).
The K loop advances in steps of 128 bytes on A100/H100 (sec. 2.2: dimensions that are multiples of
128 bytes run best): a K that is not a multiple wastes part of its last step (the same rounding).
Anthony et al. 2024, "The Case for Co-Designing Model Architectures with Hardware" (arXiv
2401.14489) measure these on transformer layers: b*s, h/t, h/a (head dim) and v/t should be
divisible by 64 and the number of output tiles matched to the SMs (sec. IV-V).

A linear layer runs three GEMMs per training step: forward (M=tokens, N=out, K=in), input
gradient (M=tokens, N=in, K=out) and weight gradient (M=out, N=in, K=tokens) (Megatron column /
row parallel shapes with the tp split). Their equal FLOPs run at the harmonic mean of their shape
efficiencies. The eager attention core's batched GEMMs (K or N = head dim) only pay for a head
dim that is not a multiple of 16 bytes.

Every factor is a share in (0, 1] multiplying the GEMM-size efficiency curve of the GPU; a GPU
without `sm_count` in the catalog gets 1 (no shape effect modelled).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from planner.model import ModelSpec


# Split-K: cuBLAS may cut K into slices computed by separate thread blocks (and reduced after)
# when M x N alone gives too few tiles; a slice keeps at least this many K elements.
SPLIT_K = (1, 2, 4, 8)
SPLIT_K_MIN_K = 4096
# Share of the aligned speed of a batched GEMM whose head dim is not a multiple of 16 bytes (no
# 16-byte vector loads; cuBLAS >= 11 still uses Tensor Cores, "less efficiently": NVIDIA guide
# sec. 2.2). ASSUMED value (the guide gives no number for A100); BLOOM prequel, head dim 108
# (13824 / 128 heads): 99.8 vs 133.9 TFLOPs at 64 heads (chronicles-prequel.md, 'NHEADs comparison').
UNALIGNED_BMM_FACTOR = 0.5


@dataclass(frozen=True)
class GemmShapeData:
    """What the shape model needs of a GPU (catalog: sm_count, gemm_tiles, gemm_k_step_bytes)."""

    sm_count: int
    tiles: tuple[tuple[int, int, float], ...]  # (tile_m, tile_n, throughput relative to the best tile)
    k_step_bytes: int

    @classmethod
    def of(cls, gpu) -> "GemmShapeData | None":
        if not getattr(gpu, "sm_count", None) or not getattr(gpu, "gemm_tiles", None):
            return None
        tiles = tuple((t.m, t.n, t.relative_throughput) for t in gpu.gemm_tiles)
        return cls(sm_count=gpu.sm_count, tiles=tiles, k_step_bytes=gpu.gemm_k_step_bytes)


def tile_quantization(dim, tile) -> np.ndarray:
    """Useful share of the tiles covering `dim`: dim / (ceil(dim / tile) * tile)."""
    d = np.asarray(dim, dtype=np.float64)
    return d / (np.ceil(d / tile) * tile)


def wave_quantization(tiles, sm_count: int) -> np.ndarray:
    """Busy share of the SMs over the waves of `tiles` thread blocks, one per SM at a time:
    (tiles / SMs) / ceil(tiles / SMs)."""
    waves = np.asarray(tiles, dtype=np.float64) / sm_count
    return waves / np.ceil(waves)


def gemm_efficiency(m, n, k, shape: GemmShapeData | None, batch=1, elem_bytes: float = 2.0) -> np.ndarray:
    """Shape share of one (batched) GEMM: the best tile of the GPU's list (cuBLAS's heuristic
    picks among them) for tile x wave quantization of M x N, times the rounding of K."""
    if shape is None:
        return np.ones(np.broadcast(np.asarray(m), np.asarray(n), np.asarray(k)).shape)
    args = [np.asarray(a) for a in (m, n, k, batch, elem_bytes)]
    if all(a.size == 1 for a in args):  # one plan (validate, the profile fit): the same few shapes, over and over
        one = _one_gemm_efficiency(*(a.reshape(-1)[0].item() for a in args), shape)
        return np.full(np.broadcast(*args).shape, one)
    return _gemm_efficiency(m, n, k, shape, batch, elem_bytes)


@functools.lru_cache(maxsize=65536)
def _one_gemm_efficiency(m, n, k, batch, elem_bytes, shape: GemmShapeData) -> float:
    return float(_gemm_efficiency(m, n, k, shape, batch, elem_bytes))


def _gemm_efficiency(m, n, k, shape: GemmShapeData, batch, elem_bytes) -> np.ndarray:
    best = 0.0
    kk = np.asarray(k, dtype=np.float64)
    for tm, tn, rel in shape.tiles:
        tiles = np.asarray(batch, dtype=np.float64) * np.ceil(np.asarray(m) / tm) * np.ceil(np.asarray(n) / tn)
        tq = rel * tile_quantization(m, tm) * tile_quantization(n, tn)
        for split in SPLIT_K:
            ok = (kk / split >= SPLIT_K_MIN_K) | (split == 1)
            eff = np.where(ok, tq * wave_quantization(tiles * split, shape.sm_count), 0.0)
            best = np.maximum(best, eff)
    k_step = np.maximum(shape.k_step_bytes / np.asarray(elem_bytes, dtype=np.float64), 1.0)
    return best * tile_quantization(k, k_step)


def harmonic(effs: list[np.ndarray], weights: list[float] | None = None) -> np.ndarray:
    """Efficiency of GEMMs of equal FLOPs (or `weights` shares) run one after another."""
    w = weights or [1.0] * len(effs)
    return sum(w) / sum(wi / e for wi, e in zip(w, effs))


def linear_efficiency(tokens, n_out, k_in, shape: GemmShapeData | None, elem_bytes: float = 2.0) -> np.ndarray:
    """Forward, input-gradient and weight-gradient GEMMs of a linear layer of one GPU."""
    fwd = gemm_efficiency(tokens, n_out, k_in, shape, elem_bytes=elem_bytes)
    dgrad = gemm_efficiency(tokens, k_in, n_out, shape, elem_bytes=elem_bytes)
    wgrad = gemm_efficiency(n_out, k_in, tokens, shape, elem_bytes=elem_bytes)
    return harmonic([fwd, dgrad, wgrad])


def block_linear_dims(spec: ModelSpec, tp) -> list[tuple[np.ndarray, np.ndarray]]:
    """(N, K) on one GPU of each linear of a block, in planner.flops.block_gemms order (qkv, o,
    up, down): column-parallel layers split N, row-parallel ones K (Shoeybi et al. 2019)."""
    h, q, kv, f = spec.hidden, spec.q_dim, spec.kv_dim, spec.ffn
    up = f * (3 if spec.mlp == "swiglu" else 2) - f
    t = np.asarray(tp, dtype=np.float64)
    dims = [((q + 2 * kv) / t, np.full(np.shape(t), float(h))), (np.full(np.shape(t), float(h)), q / t),
            (up / t, np.full(np.shape(t), float(h))), (np.full(np.shape(t), float(h)), f / t)]
    if spec.kv_lora_rank is not None:  # multi-head latent attention: its largest input projection, o_proj
        from planner import mla

        dims[:2] = [mla.input_projection_dims(spec, t),
                    (np.full(np.shape(t), float(h)), mla.output_projection_dims(spec)[1] / t)]
    return dims


def block_linear_efficiencies(spec: ModelSpec, tokens, tp, shape: GemmShapeData | None,
                              elem_bytes: float = 2.0) -> list[np.ndarray]:
    """Shape share of each linear of a block (tokens = micro_batch * seq_len / cp, the M)."""
    return [linear_efficiency(tokens, n, k, shape, elem_bytes) for n, k in block_linear_dims(spec, tp)]


def logits_efficiency(spec: ModelSpec, tokens, tp, shape: GemmShapeData | None, elem_bytes: float = 2.0):
    """The output layer: N = padded vocabulary / tp (vocab-parallel), K = hidden."""
    t = np.asarray(tp, dtype=np.float64)
    return linear_efficiency(tokens, np.ceil(spec.vocab_padded / t), np.full(np.shape(t), float(spec.hidden)),
                             shape, elem_bytes)


def attention_core_efficiency(spec: ModelSpec, shape: GemmShapeData | None, elem_bytes=2.0) -> np.ndarray:
    """Batched GEMMs of the eager (materialised) attention core, K or N = head dim: a head dim that
    is not a multiple of 16 bytes runs at UNALIGNED_BMM_FACTOR (Anthony et al. 2024 sec. V: h/a
    should be divisible by 8, better 64). Their tile and wave quantization is not modelled: cuBLAS's
    batched kernels and narrow tiles make it shape-by-shape, and the BLOOM 'NHEADs comparison'
    rows do not follow it."""
    eb = np.asarray(elem_bytes, dtype=np.float64)
    if shape is None:
        return np.ones(np.shape(eb))
    aligned = np.mod(spec.head_dim * eb, 16.0) == 0
    return np.where(aligned, 1.0, UNALIGNED_BMM_FACTOR)


# Candidates above this many share few GEMM shapes (tokens x tp x dtype): each distinct one is computed once.
DISTINCT_MIN = 4096


def plan_factors(spec: ModelSpec, layout, gpu) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Shape shares of one plan's block linears (flops.block_gemms order), eager attention core
    and output layer, for `layout` (planner.layout.Layout) on `gpu` (catalog GPU)."""
    from planner.memory import compute_dtype_bytes

    shape = GemmShapeData.of(gpu)
    tokens = layout.micro_batch * layout.seq_len / layout.cp
    eb = compute_dtype_bytes(layout)
    attn = attention_core_efficiency(spec, shape, eb)
    cols = np.broadcast_arrays(np.asarray(tokens, dtype=np.float64), np.asarray(layout.tp, dtype=np.float64),
                               np.asarray(eb, dtype=np.float64))
    if shape is None or cols[0].ndim != 1 or cols[0].size < DISTINCT_MIN:
        linears = block_linear_efficiencies(spec, tokens, layout.tp, shape, eb)
        return linears, attn, logits_efficiency(spec, tokens, layout.tp, shape, eb)
    # the same elementwise formulas over the distinct (tokens, tp, bytes) rows, then spread back
    distinct, inverse = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    t, tp, b = distinct[:, 0], distinct[:, 1], distinct[:, 2]
    linears = [e[inverse] for e in block_linear_efficiencies(spec, t, tp, shape, b)]
    return linears, attn, logits_efficiency(spec, t, tp, shape, b)[inverse]
