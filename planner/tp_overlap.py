"""Exposed tensor-parallel time under Transformer Engine userbuffers (Megatron-Core `--tp-comm-overlap`).

Megatron-Core's `--tp-comm-overlap` (sequence parallelism required: megatron/training/arguments.py) turns on
TE's userbuffers overlap of every sequence-parallel collective of a block with a GEMM
(TransformerConfig tp_comm_overlap_ag / _rs / tp_comm_bulk_dgrad / tp_comm_bulk_wgrad, all True by default;
tp_comm_overlap_rs_dgrad False). TE's default ub config (transformer_engine/pytorch/module/base.py
`initialize_ub`, TE 1.x) assigns a method to each GEMM:
  ring_exchange  qkv_fprop, fc1_fprop (all-gather -> GEMM), proj_dgrad, fc2_dgrad (all-gather of dY -> dX):
                 the GEMM runs in tp chunks, chunk i on the shard that arrived while chunk i-1 ran (the first
                 chunk is local; P2P copies on the copy engines, use_ce=True);
  pipeline       proj_fprop, fc2_fprop (GEMM -> reduce-scatter), num_splits = 4: each output chunk's
                 reduce-scatter runs while the next chunk's GEMM runs, the last chunk's after the GEMM;
  bulk           qkv_dgrad/fc1_dgrad: the dX reduce-scatter runs whole beside the wgrad GEMM (qkv_wgrad,
                 fc1_wgrad) (the all-gather of the saved input for wgrad beside the dgrad GEMM is not
                 among the collectives the planner counts: Korthikanti et al. 2022 sec. 4.2.2).
Decomposing a collective and its dependent GEMM into n steps exposes max(C - G (1 - 1/n), 0) when the
first step needs no communication (ring all-gather) and max(C - G (1 - 1/n), C / n) when the last step's
communication follows the last GEMM chunk (pipelined reduce-scatter) (Wang et al. ASPLOS 2023, "Overlap
Communication with Dependent Computation via Decomposition in Large Deep Learning Models", sec. 3); bulk
overlap runs both whole side by side: max(C - G, 0). Contention: the pipeline and bulk collectives run as
kernels on num_sm = 16 SMs (initialize_ub default; set_sm_margin 0: the GEMM keeps all SMs and shares them),
so the GEMM beside them loses about 16 / sm_count of its speed while they run; the ring exchange's copies run
on the copy engines (use_ce=True) and take no SM.
"""

from __future__ import annotations

import numpy as np

from planner import flops, parallel_block
from planner.model import ModelSpec

# TE 1.x initialize_ub default num_splits of the `pipeline` method (module/base.py: num_splits=4)
PIPELINE_SPLITS = 4.0
# TE 1.x initialize_ub default num_sm of the `pipeline` and `bulk` methods (the ring exchange uses the copy engines)
COMM_SMS = 16.0
# an H100 SXM's SMs, where the catalog GPU gives no sm_count (NVIDIA H100 Tensor Core GPU Architecture, 2022)
DEFAULT_SM_COUNT = 132.0
RING, PIPELINE, BULK = "ring", "pipeline", "bulk"
# per collective of a sequential block: (forward matmul indices of flops.block_gemms: qkv, o, up, down),
# method in forward (and a recomputed forward), method in backward
SEQUENTIAL = (((0,), RING, BULK), ((1,), PIPELINE, RING), ((2,), RING, BULK), ((3,), PIPELINE, RING))
# a parallel block (or a hybrid stack's layer): one all-gather feeds qkv and up, one reduce-scatter reads o + down
PARALLEL = (((0, 2), RING, BULK), ((1, 3), PIPELINE, RING))


def pair_exposed_s(comm_s, gemm_s, method: str, tp) -> np.ndarray:
    """Exposed seconds of one collective decomposed with its dependent GEMM (Wang et al. ASPLOS 2023)."""
    c = np.asarray(comm_s, dtype=np.float64)
    g = np.asarray(gemm_s, dtype=np.float64)
    if method == BULK:
        return np.maximum(c - g, 0.0)
    n = np.maximum(np.asarray(tp, dtype=np.float64), 1.0) if method == RING else PIPELINE_SPLITS
    floor = 0.0 if method == RING else c / n
    return np.maximum(c - g * (1.0 - 1.0 / n), floor)


def contention(method: str, sm_count) -> float:
    """Share of the hidden collective time the GEMM beside it loses to the collective's SMs."""
    return 0.0 if method == RING else COMM_SMS / float(sm_count or DEFAULT_SM_COUNT)


def exposed_s(spec: ModelSpec, layout, tp_raw, block_gemm_s, layers, block, linear_share, sm_count) -> np.ndarray:
    """Exposed TP seconds per micro batch under TE userbuffers overlap (sequence-parallel plans; others
    keep all of tp_raw: userbuffers overlaps all-gathers and reduce-scatters, not all-reduces).

    tp_raw: the TP collectives' seconds per micro batch; block_gemm_s: the blocks' GEMM seconds per micro
    batch; block/linear_share: the recompute shares of planner.flops.recompute_share; sm_count: the GPU's SMs."""
    tokens = layout.micro_batch * layout.seq_len / layout.cp
    per_op = [ft for ft, _ in flops.block_gemms(spec, tokens, layout.tp)]
    total = np.maximum(sum(per_op), 1e-300)
    passes = 3.0 + block + linear_share
    fwd_gemm = np.asarray(block_gemm_s) / (passes * np.maximum(layers, 1.0))  # one forward of one block
    pairs = PARALLEL if (spec.parallel_block or spec.layer_pattern is not None) else SEQUENTIAL
    # all-gathers + reduce-scatters per block: len(pairs) per pass (parallel_block.tp_calls_per_pass)
    calls = 2.0 * parallel_block.tp_calls_per_block(spec, block)
    c = np.asarray(tp_raw) / (calls * np.maximum(layers, 1.0))
    fwd_passes = 1.0 + np.asarray(block, dtype=np.float64)
    hidden = 0.0
    for ops, fwd, bwd in pairs:
        g = fwd_gemm * sum(per_op[i] for i in ops) / total  # dgrad and wgrad GEMMs: each one forward's FLOPs
        for method, n_passes in ((fwd, fwd_passes), (bwd, 1.0)):
            saved = (c - pair_exposed_s(c, g, method, layout.tp)) * (1.0 - contention(method, sm_count))
            hidden = hidden + n_passes * saved
    saved = layers * hidden * (layout.sequence_parallel == 1)
    return np.clip(np.asarray(tp_raw) - saved, 0.0, np.asarray(tp_raw))
