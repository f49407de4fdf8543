"""Context-parallel implementations (`cp_impl`): what each one sends, holds and hides.

Context parallelism splits a sequence over `cp` GPUs; the block GEMMs see micro_batch * seq_len / cp
tokens on every GPU whatever the implementation. They differ in how attention sees the rest of
the sequence (per GPU and layer; b micro batch, s sequence, h hidden, kv = kv_heads x head_dim,
t tensor-parallel degree, c bytes per element, N = cp):

ring       K/V chunks passed around a ring (Liu et al. 2023 "Ring Attention"; Megatron-Core
           cp_comm_type p2p; torch context_parallel rotate_method "alltoall"): N-1 chunks of
           b s/N 2kv/t received in forward, again with their gradients (dK/dV) in backward:
           3 (N-1) b (s/N) 2kv c / t. With s/N fixed the volume grows with N. Each step hides
           behind the attention of the chunk in hand (the stack's `overlap_cp`).
ulysses    all-to-all of q, k, v before attention and of the output after (Jacobs et al. 2023
           "DeepSpeed Ulysses", arXiv:2309.14509, sec. 3.2; Megatron cp_comm_type a2a): every GPU
           then holds the whole sequence for heads/N heads. Forward sends (N-1)/N of its
           b (s/N)(2h + 2kv) c / t (the paper's 4Nh/P per link for MHA), backward the same:
           constant when s and N grow together. Heads and kv heads (per TP rank) must split
           over N. On the critical path: attention cannot start before its inputs arrive.
allgather  K/V all-gathered before attention, dK/dV reduce-scattered after (Llama 3, Dubey et
           al. 2024 sec. 3.3.2; torch rotate_method "allgather"): 3 collectives of the full
           b s 2kv c / t per layer; "the all-gather communication latency is exposed in the
           critical path" (ibid.), small with GQA. Holds the gathered K/V of one layer.
a2a+p2p    hierarchical (Megatron-Core `--hierarchical-context-parallel-sizes`; Fang & Zhao 2024
           "USP"): all-to-all among the cp ranks of one node (degree a), ring over the N/a
           groups across nodes (chunks of the same b s/N 2kv/t bytes, N/a - 1 steps).

All functions take a Layout (arrays or 0-d) and return arrays. The ring terms are the planner's
model before cp_impl existed, term for term (no dev row uses another implementation).
"""

from __future__ import annotations

import re

import numpy as np

from planner import attn_window, comm, flops
from planner.layout import Layout
from planner.memory import compute_dtype_bytes
from planner.model import ModelSpec
from planner.scenario import CP_IMPLS

IMPL = {name: i for i, name in enumerate(CP_IMPLS)}
RING, ULYSSES, ALLGATHER, HYBRID = IMPL["ring"], IMPL["ulysses"], IMPL["allgather"], IMPL["a2a+p2p"]
# all-to-all calls per layer and pass: q, k, v before attention and the output after (DeepSpeed
# Ulysses `_SeqAllToAll` per tensor; Megatron's a2a CP moves the same four)
A2A_CALLS_PER_PASS = 4.0


def _i(x) -> np.ndarray:
    return np.asarray(x).astype(np.int64)


def inner_degree(layout, gpus_per_node: int) -> np.ndarray:
    """GPUs of a cp group that split the heads by all-to-all: ulysses all cp, a2a+p2p the cp ranks
    that share a node (cp ranks sit tp apart: planner/comm.py rank order), ring/allgather 1."""
    cp, impl = _i(layout.cp), _i(layout.cp_impl)
    in_node = np.gcd(cp, _i(comm.members_per_node(cp, _i(layout.tp), gpus_per_node)))
    return np.select([impl == ULYSSES, impl == HYBRID], [cp, in_node], default=1)


def hybrid_is_distinct(cp: int, tp: int, gpus_per_node: int) -> bool:
    """a2a+p2p differs from ring (no cp rank shares a node) and from ulysses (all of them do)
    only when part of the cp group shares a node: the search skips it otherwise."""
    inner = int(np.gcd(cp, int(comm.members_per_node(cp, tp, gpus_per_node))))
    return 1 < inner < cp


def ring_degree(layout, gpus_per_node: int) -> np.ndarray:
    """GPUs a K/V ring runs over: cp (ring), cp / inner (a2a+p2p), none (ulysses, allgather: 1)."""
    cp, impl = _i(layout.cp), _i(layout.cp_impl)
    return np.where((impl == RING) | (impl == HYBRID), cp // inner_degree(layout, gpus_per_node), 1)


def heads_unsplittable(spec: ModelSpec, layout, gpus_per_node: int) -> np.ndarray:
    """True where an all-to-all implementation cannot split the heads of a TP rank over its
    inner degree (query heads and kv heads per TP rank; kv heads fewer than tp are replicated)."""
    a = inner_degree(layout, gpus_per_node)
    tp = _i(layout.tp)
    heads, kv = spec.n_heads // tp, np.maximum(spec.kv_heads // tp, 1)
    return (a > 1) & ((heads % a != 0) | (kv % a != 0))


def heads_message(spec: ModelSpec, layout, gpus_per_node: int) -> str:
    a = int(np.asarray(inner_degree(layout, gpus_per_node)).reshape(-1)[0])
    tp = int(np.asarray(layout.tp).reshape(-1)[0])
    impl = CP_IMPLS[int(np.asarray(layout.cp_impl).reshape(-1)[0])]
    heads, kv = spec.n_heads // tp, max(spec.kv_heads // tp, 1)
    ok = [d for d in range(1, heads + 1) if heads % d == 0 and kv % d == 0]
    return (f"cp_impl {impl} splits the heads of each tensor-parallel rank over {a} GPUs, but {heads} query heads "
            f"and {kv} kv heads per rank ({spec.n_heads} / {spec.kv_heads} heads, tp {tp}) do not divide by {a} "
            f"(allowed all-to-all degrees: {', '.join(map(str, ok))}; or --cp-impl ring/allgather)")


# ---------------------------------------------------------------- communication

def _passes(layout) -> tuple[np.ndarray, np.ndarray]:
    """Forward passes through attention per step (1 + what recomputation re-runs), backward 1."""
    block, attn_share, _ = flops.recompute_share(layout.activation_checkpointing, layout.checkpoint_fraction)
    return 1.0 + block + attn_share, np.ones(np.shape(block))


def volume_bytes(spec: ModelSpec, layout, gpus_per_node: int) -> dict[str, np.ndarray]:
    """Bytes one GPU sends per layer and micro batch, by mechanism: `ring` (K/V chunks forward, K/V
    and dK/dV backward: 3 per step), `a2a` (q, k, v and output, forward + backward, recompute
    included), `allgather` (the unsharded K/V: all-gather forward and backward, reduce-scatter of
    dK/dV; bytes of the full tensor, the cost model applies (N-1)/N)."""
    c = compute_dtype_bytes(layout)
    tp = np.asarray(layout.tp, dtype=np.float64)
    cp = np.asarray(layout.cp, dtype=np.float64)
    tokens = layout.micro_batch * layout.seq_len / cp
    kv_chunk = c * tokens * 2.0 * spec.kv_dim / tp
    impl = _i(layout.cp_impl)
    r = ring_degree(layout, gpus_per_node)
    a = inner_degree(layout, gpus_per_node).astype(np.float64)
    fwd, bwd = _passes(layout)
    local = c * tokens * (2.0 * spec.hidden + 2.0 * spec.kv_dim) / tp  # q, k, v, output of this GPU
    return {
        # a sliding window sends only the halo it needs (ring cp_impl; planner/attn_window.py)
        "ring": _ring_bytes(spec, layout, r, impl, kv_chunk),
        "a2a": (a - 1.0) / a * local * (fwd + bwd),
        "allgather": (impl == ALLGATHER) * (cp > 1) * (2.0 + fwd) * kv_chunk * cp,
    }


def _ring_bytes(spec: ModelSpec, layout, r, impl, kv_chunk) -> np.ndarray:
    full = 3.0 * (r - 1.0) * kv_chunk
    if spec.attn_window is None:
        return full
    return full * np.where(impl == RING, attn_window.ring_factor(spec, layout.seq_len, r), 1.0)


def all_to_all_s(links: comm.Links, sent_bytes, group, m, calls) -> np.ndarray:
    """All-to-all in a group of `group` GPUs, `m` per node, each sending `sent_bytes` in all: the
    share for the node's own GPUs over NVLink, the rest over the NICs (all the node's GPUs in
    all-to-alls at once share them), both links at once; a group of one costs nothing."""
    g = np.asarray(group, dtype=np.float64)
    m = np.minimum(np.asarray(m, dtype=np.float64), g)
    others = np.maximum(g - 1.0, 1.0)
    intra = sent_bytes * (m - 1.0) / others / links.intra_Bps
    inter_bw = np.minimum(links.intra_Bps, links.inter_node_Bps / links.gpus_per_node)
    inter = sent_bytes * (g - m) / others / inter_bw
    lat = np.where(g > m, comm.INTERNODE_LATENCY_S, comm.INTRANODE_LATENCY_S)
    return (g > 1) * (np.maximum(intra, inter) + calls * lat)


def comm_s(spec: ModelSpec, layout: Layout, links: comm.Links, layers) -> dict[str, np.ndarray]:
    """Seconds per micro batch of each mechanism on the busiest stage (`layers` blocks), before
    overlap: `ring` may hide behind attention, `exposed` (all-to-all, all-gather) may not."""
    gpn = links.gpus_per_node
    vol = volume_bytes(spec, layout, gpn)
    tp = _i(layout.tp)
    a, r = inner_degree(layout, gpn), ring_degree(layout, gpn)
    # ring: cp ranks sit tp apart; in a2a+p2p the ring links the inner groups, tp x inner apart
    m_r = comm.members_per_node(r, tp * a, gpn)
    ring = (r > 1) * layers * (vol["ring"] / comm.group_busbw_Bps(links, r, m_r)
                               + 3.0 * (r - 1.0) * comm.INTRANODE_LATENCY_S)
    fwd, bwd = _passes(layout)
    a2a = layers * all_to_all_s(links, vol["a2a"], a, comm.members_per_node(a, tp, gpn),
                                A2A_CALLS_PER_PASS * (fwd + bwd))
    cp = layout.cp
    group = comm.Group.of(links, cp, comm.members_per_node(cp, tp, gpn))
    gathers = (_i(layout.cp_impl) == ALLGATHER) * (cp > 1) * (2.0 + fwd)
    allgather = layers * group.allgather_s(vol["allgather"], gathers)
    return {"ring": ring, "exposed": a2a + allgather}


def exposed_s(spec: ModelSpec, layout: Layout, links: comm.Links, layers, attn_micro, overlap_cp) -> np.ndarray:
    """Exposed seconds per micro batch: the ring's steps minus what hides behind the attention
    of the chunk in hand (`overlap_cp` x attention time), plus the all-to-alls and all-gathers,
    which attention waits for."""
    return exposed_and_hidden_s(spec, layout, links, layers, attn_micro, overlap_cp)[0]


def exposed_and_hidden_s(spec: ModelSpec, layout: Layout, links: comm.Links, layers, attn_micro, overlap_cp):
    """(`exposed_s`, the ring's seconds hidden behind attention) per micro batch."""
    parts = comm_s(spec, layout, links, layers)
    hidden = np.minimum(parts["ring"], np.maximum(overlap_cp * attn_micro, 0.0))
    return parts["ring"] - hidden + parts["exposed"], hidden


# ---------------------------------------------------------------- memory

def buffer_bytes(spec: ModelSpec, layout, gpus_per_node: int) -> np.ndarray:
    """Transient bytes of one layer's context-parallel exchange beyond the activations the memory
    model keeps (those are the same for every implementation: s/N tokens of every head, or s
    tokens of heads/N): all-to-all staging of q, k, v (the permuted input and the received output),
    the all-gathered K/V and dK/dV (full sequence). Ring's two in-flight chunks are left in the
    fitted allocator model (0 here: ring plans as before)."""
    c = compute_dtype_bytes(layout)
    tp = np.asarray(layout.tp, dtype=np.float64)
    cp = np.asarray(layout.cp, dtype=np.float64)
    tokens = layout.micro_batch * layout.seq_len / cp
    a = inner_degree(layout, gpus_per_node)
    qkv = c * tokens * (spec.hidden + 2.0 * spec.kv_dim) / tp
    full_kv = c * layout.micro_batch * layout.seq_len * 2.0 * spec.kv_dim / tp
    gathered = (_i(layout.cp_impl) == ALLGATHER) & (cp > 1)
    return (a > 1) * 2.0 * qkv + gathered * 2.0 * full_kv


# ---------------------------------------------------------------- runs files

_ULYSSES_PHRASES = (
    r"sequence[\s_-]*parallel\w*\s*\(\s*(?:deepspeed[\s_-]*)?ulysses\s*\)\s*[=:]?\s*(\d+)",
    r"(?:deepspeed[\s_-]*)?ulysses(?:[\s_-]*(?:sequence|context)[\s_-]*parallel\w*)?(?:[\s_-]*(?:size|degree))?"
    r"\s*[=:]?\s*(\d+)\b",
    r"(\d+)[\s-]*way\s+(?:deepspeed[\s_-]*)?ulysses",
    r"ds[\s_-]*sequence[\s_-]*parallel[\s_-]*size\s*[=:]?\s*(\d+)",
    r"\bsequence_parallel_size\s*[=:]?\s*(\d+)",
)
_ULYSSES_WORDS = r"(?:sequence[\s_-]*parallel\w*\s*)?\(?\s*(?:deepspeed[\s_-]*)?ulysses\s*\)?(?:[\s_-]*(?:sequence|context)[\s_-]*parallel\w*)?"
# a `cp_impl` cell or a cp_comm_type / rotate method in the notes -> the planner's name
SPELLINGS = {"ring": "ring", "p2p": "ring", "ring attention": "ring", "ring-attention": "ring",
             "ulysses": "ulysses", "deepspeed-ulysses": "ulysses", "deepspeed ulysses": "ulysses", "a2a": "ulysses",
             "all-to-all": "ulysses",
             "allgather": "allgather", "all-gather": "allgather", "all_gather": "allgather",
             "a2a+p2p": "a2a+p2p", "hierarchical": "a2a+p2p", "usp": "a2a+p2p"}


def ulysses_degree(text: str) -> int | None:
    """The degree of DeepSpeed-Ulysses sequence parallelism a note states ("sequence parallel
    (DeepSpeed-Ulysses) 8", "Ulysses 8", "8-way Ulysses", "ds-sequence-parallel-size 8",
    "sequence_parallel_size=8"); None where it says none."""
    for pat in _ULYSSES_PHRASES:
        m = re.search(pat, text, re.I)
        if m:
            return int(m.group(1))
    return None


def without_ulysses(text: str) -> str:
    """The notes with their Ulysses phrases removed: DeepSpeed calls Ulysses "sequence parallel",
    which is not Megatron's sequence parallelism (norms and dropout split over the TP group)."""
    for pat in _ULYSSES_PHRASES + (_ULYSSES_WORDS,):
        text = re.sub(pat, " ", text, flags=re.I)
    return text


def impl_of(row, cp: int, notes: list[str]) -> str:
    """The row's cp_impl: a `cp_impl` / `cp_comm_type` column, else the notes ("cp_comm_type a2a",
    "--cp-comm-type a2a+p2p", "Ulysses", "all-gather CP", "rotate_method allgather"); ring where
    nothing says (Megatron's and torchtitan's default ring; noted when cp > 1)."""
    cell = " ".join((row.get(k) or "").strip() for k in ("cp_impl", "cp_comm_type", "context_parallel_impl")).strip()
    if cell:
        key = cell.lower()
        if key not in SPELLINGS:
            from planner.errors import PlanError

            raise PlanError("cp_impl", f"row {row.get('id')}: unknown context-parallel implementation {cell!r} "
                            f"(allowed: {', '.join(sorted(SPELLINGS))})")
        return SPELLINGS[key]
    text = row.get("notes") or ""
    m = re.search(r"cp[\s_-]*comm[\s_-]*type\s*[=:]?\s*[\"']?(a2a\+p2p|a2a|p2p|allgather|all-gather)", text, re.I)
    if m:
        return SPELLINGS[m.group(1).lower()]
    m = re.search(r"rotate[\s_-]*method\s*[=:]?\s*[\"']?(allgather|alltoall)", text, re.I)
    if m:
        return "allgather" if m.group(1).lower() == "allgather" else "ring"
    if re.search(r"hierarchical[\s_-]*(?:context[\s_-]*parallel\w*|CP)", text, re.I):
        return "a2a+p2p"
    if re.search(r"ulysses", text, re.I) or ulysses_degree(text):
        return "ulysses"
    if re.search(r"all[\s_-]*gather[\s_-]*(?:based\s*)?(?:CP|context[\s_-]*parallel\w*)", text, re.I):
        return "allgather"
    if cp > 1 and not re.search(r"ring[\s_-]*attention|\bring\b", text, re.I):
        notes.append("context-parallel implementation not stated: ring (Megatron-Core's and torchtitan's default)")
    return "ring"
