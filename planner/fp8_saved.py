"""Activation bytes a Transformer Engine fp8 recipe keeps less than planner/memory.py counts in 16 bits.

Under fp8, TE's Linear / LayerNormLinear save for backward the fp8 copy of their input that the
forward GEMM read, not the 16-bit input (transformer_engine/pytorch/module/linear.py `_Linear.forward`,
TE 1.x: "if fp8 and not fp8_meta['recipe'].override_linear_precision.wgrad: saved_inputmat = inputmat"
(the fp8 cast, or its fp8 transpose `inputmat_t`), else `inputmat_no_fp8`; layernorm_linear.py keeps
`ln_out` as the fp8 output of `layernorm_fwd_fp8` / `rmsnorm_fwd_fp8` the same way). A recipe's
`saved_input_bytes` (catalog/fp8_recipes/*.toml) states it; torchao's Float8Linear keeps the
high-precision input instead (None). Per block (Korthikanti et al. 2022's tensors, memory.layer_activation_bytes):
- the norm outputs (the qkv and fc1 inputs, 2 sbh, /t with sequence parallelism) are held in fp8 only:
  nothing else needs the normed 16-bit tensor (the norms' backward keeps their inputs and statistics);
- the fc2 input (the activation's output, sbf/t) likewise: the activation's backward keeps its own
  input (the fc1 output), which stays 16-bit;
- the attention output stays 16-bit (the fused attention kernel keeps it with its log-sum-exp for its
  backward, Dao et al. 2022), and the proj linear keeps its fp8 copy on top: sbh/t more.
Dense, non-MLA, non-hybrid blocks only; DeepSeek-V3's fp8 activation cache (planner/memory_savings.py)
counts its own fp8 tensors and supersedes this.
"""

from __future__ import annotations

import numpy as np

from planner import mla
from planner.layout import PREC, Layout
from planner.model import ModelSpec


def saved_input_bytes(layout: Layout, settings) -> np.ndarray:
    """Bytes per element a linear keeps of its input under each plan's fp8 recipe; NaN where the plan
    is not fp8 or its recipe keeps the 16-bit input."""
    from planner.fp8 import per_candidate, recipes

    rec = per_candidate(recipes(settings), layout)["saved_input_bytes"]
    return np.where(np.asarray(layout.precision) == PREC["fp8"], rec, np.nan)


def block_bytes_less(spec: ModelSpec, layout: Layout, settings, dense: bool = True) -> np.ndarray:
    """Bytes per micro batch one block keeps less than memory.layer_activation_bytes counts, under a
    recipe whose linears keep fp8 inputs (0 elsewhere). `dense`: False for a mixture-of-experts view."""
    from planner.memory import compute_dtype_bytes
    from planner.memory_savings import _norm_outputs, fp8_cached

    shape = np.shape(layout.tp)
    if not dense or mla.is_mla(spec) or spec.layer_pattern is not None:
        return np.zeros(shape)
    kept = saved_input_bytes(layout, settings)
    on = ~np.isnan(kept) & ~fp8_cached(layout, settings)
    kept = np.where(on, kept, 0.0)
    t = np.asarray(layout.tp, dtype=np.float64)
    sb = np.asarray(layout.seq_len / layout.cp * layout.micro_batch, dtype=np.float64)
    a = compute_dtype_bytes(layout).astype(np.float64)
    sp_div = np.where(layout.sequence_parallel == 1, t, 1.0)
    narrowed = _norm_outputs(spec) * spec.hidden / sp_div + spec.ffn / t  # norm outputs, fc2 input
    copied = spec.q_dim / t  # proj's fp8 copy of the attention output
    return np.where(on, sb * (narrowed * (a - kept) - copied * kept), 0.0)


__all__ = ["block_bytes_less", "saved_input_bytes"]
