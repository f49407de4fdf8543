"""Exposed tensor-parallel time under PyTorch's async TP (torch._inductor micro-pipeline TP).

torchtitan's async TP (`enable_async_tensor_parallel`, torch.compile + SymmetricMemory) rewrites an
all-gather feeding matmuls into `symm_mem.fused_all_gather_matmul` and a matmul feeding a
reduce-scatter into `symm_mem.fused_matmul_reduce_scatter` (torch/_inductor/fx_passes/
micro_pipeline_tp.py): the collective is split into tp chunks that copy while the matmul of the
previous chunk runs. So a collective hides at most behind *its own* matmul, never behind the
rest of the block: the hidden time is min(collective, adjacent matmul) per fused pair, not a share
of all GEMM time. With sequence parallelism a block's fused pairs are
  forward (and again in a full-recompute forward): all-gather -> wq/wk/wv, wo -> reduce-scatter,
  all-gather -> w1/w3, w2 -> reduce-scatter;
  backward: all-gather(dY) -> dX matmul of wo and of w2.
The backward's two reduce-scatters of dX (inputs of wq/wk/wv and of w1/w3) stay exposed:
`fuse_matmul_reduce_scatter` needs a matmul producer (`_find_producer_matmul`) and there the
reduce-scatter's input is the sum of two or three matmuls (torchtitan's separate wq, wk, wv and
w1, w3 linears). The profile's `overlap_async_tp` is the share of each pair's min() hidden by the
fused op (pipeline fill of the local chunk, copy-engine traffic contending for HBM, the final
reduction of matmul-reduce-scatter). Check: the PyTorch post "[Distributed w/ TorchTitan]
Introducing Async Tensor Parallelism in PyTorch" (Aug 2024) reports ~8% end-to-end speedup on
Llama 3 8B and 70B (up to ~29% / ~20% forward only), i.e. far from all TP time hidden.
"""

from __future__ import annotations

import numpy as np

from planner import flops, parallel_block
from planner.model import ModelSpec

# per block: fused pairs in forward (qkv, o, up, down); in backward only o and down (see above);
# a parallel attention+MLP block has one collective per direction and pass (parallel_block.py)


def exposed_s(spec: ModelSpec, layout, tp_raw, block_gemm_s, layers, block, linear_share,
              efficiency) -> np.ndarray:
    """Exposed TP seconds per micro batch under micro-pipelined async TP.

    tp_raw: the TP collectives' seconds per micro batch (2 collectives per all-reduce equivalent,
    4 + 2*block all-reduce equivalents per block, half in a parallel block); block_gemm_s: the blocks' GEMM seconds per micro
    batch (output layer excluded); block/linear_share: the recompute shares of
    planner.flops.recompute_share."""
    tokens = layout.micro_batch * layout.seq_len / layout.cp
    per_op = [ft for ft, _ in flops.block_gemms(spec, tokens, layout.tp)]
    total = np.maximum(sum(per_op), 1e-300)  # a pure Mamba stack has no attention/MLP GEMMs
    passes = 3.0 + block + linear_share  # forward + backward (2x) + what recompute repeats
    fwd_block_s = np.asarray(block_gemm_s) / (passes * np.maximum(layers, 1.0))
    collectives = 2.0 * parallel_block.tp_calls_per_block(spec, block)  # all-gathers + reduce-scatters
    c = np.asarray(tp_raw) / (collectives * np.maximum(layers, 1.0))
    hidden = 0.0
    for ops, fwd, bwd in parallel_block.async_tp_fused(spec):
        pair = np.minimum(c, fwd_block_s * sum(per_op[i] for i in ops) / total)
        hidden = hidden + pair * (fwd * (1.0 + block) + bwd)
    return np.maximum(np.asarray(tp_raw) - efficiency * layers * hidden, 0.0)
