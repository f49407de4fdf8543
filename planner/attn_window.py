"""Sliding-window (local) attention and local/global layer mixes: Mistral-7B-v0.1, StarCoder2,
Phi-3 (a window on every layer), Gemma 2 (local and global layers alternating), Gemma 3 (5 local : 1
global), Qwen2 with use_sliding_window, Cohere2 and any config with `layer_types`.

A windowed causal layer lets query i (1-based) see the keys i-w+1 .. i: min(i, w) keys (transformers'
sliding-window mask `kv_idx > q_idx - sliding_window`; FlashAttention-2's `window_size=(w-1, 0)`;
Longformer's local attention, Beltagy et al. 2020, arXiv 2004.05150, sec. 3.1, without its global
tokens). Over a sequence of s tokens that is exactly

    K(s, w) = sum_{i=1..s} min(i, w) = m(m+1)/2 + (s-m) w,   m = min(s, w)

scores (a full causal layer: K(s, s) = s(s+1)/2). A chunked layer (Llama 4's chunked attention,
transformers' chunked mask: query i sees key j where j <= i and both fall in the same block of w
tokens) computes a causal block per chunk:

    K_chunk(s, w) = q w(w+1)/2 + r(r+1)/2,   q = s // w, r = s - q w

(~w/2 keys per query where s >> w: a sliding window of w/2 in FLOPs, with its own kernel length w).

FLOPs (planner/flops.py's convention). The planner counts attention as Megatron-LM and PaLM do: the
full s x s product (4 s q_dim per token forward), i.e. the causal kernel's executed work x 2s/(s+1).
A windowed layer keeps that convention on the FLOPs its kernel executes: `effective_len` =
2 K(s, w) / (s+1) keys per token (= s exactly when w >= s, ~2w when w << s), so the model FLOPs
of MFU count what a windowed kernel (FlashAttention-2 / cuDNN with a window) executes, x 2 as for
causal layers, and 6N + attention stays continuous at w = s. A model's mean over its layers is
`mean_keys`; `attention_core_forward_flops_per_token` uses it.

Kernel time. The fused kernel's efficiency curve (planner/attention_kernel.py, measured by sequence
length on causal FlashAttention-2) is read at each layer kind's effective length: a windowed
kernel walks ~2w/2 = w key blocks per query block, as a causal kernel of length 2w does, so the
curve at min(s, 2K/(s+1)) is the kernel of the same inner-loop length. Local and global layers
are timed separately and averaged over the layers (`fused_s`).

Eager attention (Hugging Face `eager_attention_forward`): it materialises the full s x s scores,
adds the sliding-window mask and soft-maxes every row (transformers masking_utils builds the full
4-D mask), so its FLOPs, the element-wise traffic and the saved probabilities stay those of full
attention (`unwindowed`). Flash attention keeps no s-sized tensor: memory is unchanged either way.

Context parallelism. Ring (p2p): Transformer Engine's sliding-window p2p CP
(transformer_engine/pytorch/attention/dot_product_attention/ ..., `AttnFuncWithCPAndKVP2PSWA`,
2026) splits the sequence into 2N chunks, and each rank fetches only the halo of min(w, a L) keys
before each of its two chunks, K/V forward and dK/dV back in backward: 2 transfers of <= 2w tokens
instead of the ring's 3 (N-1) chunks of s/N; it is used while w <= (N-1) s/(2N) and falls back to
all-gather above (modelled as the full ring term). Ulysses and all-gather CP move the same bytes
with or without a window; the hierarchical a2a+p2p keeps the full ring term (not modelled finer).
"""

from __future__ import annotations

import re

import numpy as np

from planner.errors import PlanError
from planner.model import ModelSpec


def keys_per_sequence(seq_len, window, chunked: bool = False) -> np.ndarray:
    """K(s, w): scores a windowed (or, `chunked`, a block-local) causal layer computes over one sequence
    (exact sums)."""
    s = np.asarray(seq_len, dtype=np.float64)
    w = float(window)
    if chunked:
        q = np.floor(s / w)
        r = s - q * w
        return q * w * (w + 1.0) / 2.0 + r * (r + 1.0) / 2.0
    m = np.minimum(s, w)
    return m * (m + 1.0) / 2.0 + (s - m) * w


def effective_len(seq_len, window, chunked: bool = False) -> np.ndarray:
    """Keys per token in the planner's full-causal convention: s where w >= s, 2K(s,w)/(s+1) below."""
    s = np.asarray(seq_len, dtype=np.float64)
    return np.where(float(window) >= s, s, 2.0 * keys_per_sequence(s, window, chunked) / (s + 1.0))


def local_layers(spec: ModelSpec) -> int:
    """Layers that run the window (all of them when the spec does not say)."""
    if spec.attn_window is None:
        return 0
    return spec.n_layers if spec.attn_local_layers is None else spec.attn_local_layers


def local_layer_mask(spec: ModelSpec) -> np.ndarray:
    """True for each layer that runs the window (what a trainer builds; the planner's terms read only the count).
    The spec keeps a count: placed as the families the readers know place them, `p - 1` local layers then a global
    one in every period p (Gemma 2 p=2, Gemma 3 p=6, Cohere2 / Llama 4 p=4: planner/hf_context.py, hf_llama4.py),
    the smallest p that gives the count; else the first `local_layers` layers."""
    n, local = spec.n_layers, local_layers(spec)
    i = np.arange(n)
    if local in (0, n):
        return np.full(n, local == n)
    period = next((p for p in range(2, n + 1) if local_of_ratio(n, p - 1, 1) == local), None)
    return (i + 1) % period != 0 if period else i < local


def local_share(spec: ModelSpec) -> float:
    return local_layers(spec) / spec.n_layers


def mix(spec: ModelSpec, seq_len) -> list[tuple[float, np.ndarray]]:
    """(share of the layers, effective length) of each attention kind of the model."""
    s = np.asarray(seq_len, dtype=np.float64)
    if spec.attn_window is None:
        return [(1.0, s)]
    share = local_share(spec)
    kinds = [(share, effective_len(s, spec.attn_window, spec.attn_chunked)), (1.0 - share, s)]
    return [(f, length) for f, length in kinds if f > 0.0]


def mean_keys(spec: ModelSpec, seq_len) -> np.ndarray:
    """Keys per token averaged over the layers (the planner's FLOPs convention); seq_len itself
    for a model without a window."""
    if spec.attn_window is None:
        return np.asarray(seq_len, dtype=np.float64)
    return sum(f * length for f, length in mix(spec, seq_len))


def fused_s(spec: ModelSpec, seq_len, attn_ft, peak16, eff_of) -> np.ndarray:
    """Seconds per token of the fused causal kernel (half of the conventional FLOPs `attn_ft`),
    each attention kind at the efficiency `eff_of(length)` of its effective length."""
    if spec.attn_window is None:
        return 0.5 * attn_ft / (peak16 * eff_of(seq_len))
    mean = mean_keys(spec, seq_len)
    return sum(f * 0.5 * attn_ft * (length / mean) / (peak16 * eff_of(length)) for f, length in mix(spec, seq_len))


def unwindowed(spec: ModelSpec) -> ModelSpec:
    """The same model with full causal attention (what eager attention computes and keeps)."""
    if spec.attn_window is None:
        return spec
    return spec.model_copy(update={"attn_window": None, "attn_local_layers": None, "attn_chunked": False})


def ring_factor(spec: ModelSpec, seq_len, cp) -> np.ndarray:
    """Share of the full ring's K/V bytes a windowed model's ring CP sends (1 without a window):
    windowed layers send 2 x 2w tokens (halo K/V forward, dK/dV backward) instead of 3 (N-1) s/N,
    while w <= (N-1) s / (2N) (Transformer Engine's halo exchange), the full ring above."""
    n = np.asarray(cp, dtype=np.float64)
    if spec.attn_window is None or spec.attn_chunked:  # chunked: no halo exchange is known; the full ring
        return np.ones(np.shape(n))
    s = np.asarray(seq_len, dtype=np.float64)
    w = float(spec.attn_window)
    full = 3.0 * np.maximum(n - 1.0, 1.0) * s / n
    halo = np.where(w <= (n - 1.0) * s / (2.0 * n), 4.0 * w / full, 1.0)
    share = local_share(spec)
    return share * np.minimum(halo, 1.0) + (1.0 - share)


def describe(spec: ModelSpec) -> str:
    if spec.attn_window is None:
        return ""
    k = local_layers(spec)
    kind = "chunked attention" if spec.attn_chunked else "window"
    return f", {kind} {spec.attn_window}" + ("" if k == spec.n_layers else f" on {k}/{spec.n_layers} layers")


# ---- a runs file's row: an `attn_window` / `sliding_window` column, or its notes ------------------
_NOTE = re.compile(r"(?:sliding[\s_-]*window|local[\s_-]*attention|\bSWA\b|attention[\s_-]*window)"
                   r"(?:[\s_-]*(?:attention|size|of|=|:))*\s*(\d[\d,]*)\s*([kK])?\b", re.I)
_CELL = re.compile(r"(\d[\d,]*)\s*([kK])?(?:\s*tokens?)?")
_CHUNK_NOTE = re.compile(r"(?:chunked[\s_-]*(?:local[\s_-]*)?attention|attention[\s_-]*chunk)"
                         r"(?:[\s_-]*(?:size|of|=|:))*\s*(\d[\d,]*)\s*([kK])?\b", re.I)
_FULL = ("none", "no", "full", "0", "-", "n/a")
_LOCAL_LAYERS = re.compile(r"(\d+)\s*(?:local|sliding|windowed)\s*(?:layers?)?\s*(?::|to|/)\s*(\d+)\s*global", re.I)


def stated_in_row(row) -> tuple[int | None, int | None]:
    """(window, (local, global) layer ratio) a run row states: the `attn_window` or `sliding_window`
    column (4096, 4k; none/0: full attention, window 0), or notes such as "sliding window 4096",
    "SWA 4k", "5 local : 1 global"; (None, None) where nothing says."""
    from planner.run_text import column

    key = next((k for k in ("attn_window", "sliding_window") if column(row, k)), None)
    window = None
    if key is not None:
        cell = column(row, key)
        m = _CELL.fullmatch(cell)
        if cell.lower() in _FULL:
            window = 0
        elif not m:
            raise PlanError(key, f"row {row.get('id')}: {cell!r} is not a window in tokens (e.g. 4096, 4k; "
                            f"none for full attention)")
        else:
            window = int(m.group(1).replace(",", "")) * (1024 if m.group(2) else 1)
    text = row.get("notes") or ""
    if window is None:
        m = _NOTE.search(text)
        if m:
            window = int(m.group(1).replace(",", "")) * (1024 if m.group(2) else 1)
    ratio = _LOCAL_LAYERS.search(text)
    if window is None or not ratio:
        return window, None
    local, glob = int(ratio.group(1)), int(ratio.group(2))
    return window, (local, glob)


def local_of_ratio(n_layers: int, local: int, glob: int) -> int:
    """Local layers of an n-layer model with `local` windowed layers before each `glob` global ones
    (Gemma 3's 5:1: layer i is global where (i+1) % 6 == 0)."""
    period = local + glob
    return sum(1 for i in range(n_layers) if i % period < local)


def chunk_in_row(row) -> int | None:
    """The chunk a row states for chunked local attention (Llama 4): an `attention_chunk_size` column, or notes
    such as "chunked attention 8192" / "attention chunk size 8k"; None where nothing says."""
    from planner.run_text import column

    cell = column(row, "attention_chunk_size")
    if cell:
        m = _CELL.fullmatch(cell)
        if not m:
            raise PlanError("attention_chunk_size", f"row {row.get('id')}: {cell!r} is not a chunk in tokens "
                            "(e.g. 8192, 8k)")
        return int(m.group(1).replace(",", "")) * (1024 if m.group(2) else 1)
    m = _CHUNK_NOTE.search(row.get("notes") or "")
    return int(m.group(1).replace(",", "")) * (1024 if m.group(2) else 1) if m else None


def apply_row(row, spec: ModelSpec, notes: list[str]) -> ModelSpec:
    """The row's model with the window it states (a preset's own window where the row says nothing). On a
    chunked-attention model (Llama 4) a stated window is its chunk, as `--attn-window` is; a stated chunk
    makes the local layers chunked."""
    chunk = chunk_in_row(row)
    window, ratio = stated_in_row(row)
    if chunk is not None or (spec.attn_chunked and window):
        size = chunk or window
        layers = spec.attn_local_layers if spec.attn_chunked else None
        layers = layers if ratio is None else local_of_ratio(spec.n_layers, *ratio)
        if spec.attn_chunked and (size, layers) == (spec.attn_window, spec.attn_local_layers):
            return spec
        return _restated(spec, size, layers, True, notes)
    if window is None:
        return spec
    if window == 0:  # the row says full attention
        if spec.attn_window is not None:
            notes.append("full causal attention as stated (no sliding window)")
        return unwindowed(spec)
    layers = None if ratio is None else local_of_ratio(spec.n_layers, *ratio)
    if window == spec.attn_window and layers == spec.attn_local_layers:
        return spec
    return _restated(spec, window, layers, False, notes)


def _restated(spec: ModelSpec, size: int, layers: int | None, chunked: bool, notes: list[str]) -> ModelSpec:
    """`spec` with the local attention a row states (a window, or chunks of `size`), said in `notes`."""
    kind = "chunked attention" if chunked else "sliding-window attention"
    notes.append(f"{kind} {size} as stated" + ("" if layers is None else f" on {layers} of {spec.n_layers} layers"))
    fields = {**spec.model_dump(), "published_params": None, "attn_window": size, "attn_local_layers": layers,
              "attn_chunked": chunked}
    return ModelSpec(**fields)
