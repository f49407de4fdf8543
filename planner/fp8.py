"""fp8 scaling recipes in the analytic model (data: catalog/fp8_recipes/<id>.toml, hardware/fp8.py).

For a plan with `precision fp8`, its `fp8_recipe` sets
- the fp8 GEMM speed: the recipe's `gemm_efficiency` x the 16-bit GEMM efficiency curve read at
  the fp8 peak's size, under the fp8 memory roofline (planner/fp8_gemm.py, planner/throughput.py);
- the quantisation traffic of every block linear (bytes per element of its input, weight and
  output gradient; a rescale pass over backward GEMM outputs), at HBM speed: `cast_s_per_token`;
- the bytes of the TP all-gathers the recipe gathers in fp8 (`tp_bytes_factor`: forward inputs,
  and with `tp_fp8_grad_allgather` the backward output gradients);
- the fp8 weight copies a recipe caches between micro batches (`weight_cache_bytes`).
A recipe whose TP all-gather stays 16-bit (torchao rowwise under torchtitan) has every linear
cast its whole gathered input itself: q, k and v (and gate and up) are separate linears in the
torchao-converted models, each with its own cast.
"""

from __future__ import annotations

import numpy as np

from hardware.fp8 import FP8Recipe
from planner import flops
from planner.errors import PlanError
from planner.layout import PREC, Layout
from planner.model import ModelSpec
from planner.scenario import FP8_RECIPES

NUMERIC = tuple(n for n, f in FP8Recipe.model_fields.items() if f.annotation in (float, bool, float | None))


def recipes(settings) -> dict[str, FP8Recipe]:
    """The settings' recipes, or the catalog's (catalog/fp8_recipes/*.toml)."""
    given = getattr(settings, "fp8_recipes", None)
    if given is not None:
        return given
    from hardware.catalog import load_catalog

    return load_catalog().fp8_recipes


def per_candidate(table: dict[str, FP8Recipe], layout: Layout) -> dict[str, np.ndarray]:
    """Each numeric recipe field as an array, by each candidate's fp8_recipe."""
    missing = [name for name in FP8_RECIPES if name not in table]
    if missing:
        raise PlanError("fp8_recipe", f"no catalog/fp8_recipes/{missing[0]}.toml (recipes in the catalog: "
                        f"{', '.join(sorted(table)) or 'none'})")
    rows = [table[name] for name in FP8_RECIPES]
    code = np.asarray(layout.fp8_recipe)
    return {k: np.array([np.nan if getattr(r, k) is None else float(getattr(r, k)) for r in rows])[code]
            for k in NUMERIC}


def _elements_per_token(spec: ModelSpec, layout: Layout, rec) -> dict[str, np.ndarray]:
    """Elements per token of one block on one GPU that a recipe quantises: linear inputs and output
    gradients (those a norm or activation kernel produces, which can write fp8 itself, apart:
    `fused_*`), backward GEMM outputs (grad_input), and the block's weights (per micro batch)."""
    h, q, kv, f = spec.hidden, spec.q_dim, spec.kv_dim, spec.ffn
    gates = flops._ffn_matrices(spec) - 1  # gate + up (SwiGLU) or up
    tp = np.asarray(layout.tp, dtype=np.float64)
    sp = np.asarray(layout.sequence_parallel) > 0
    gathered = rec["tp_fp8_allgather"] > 0
    # column-parallel linears (qkv, up) read the normed hidden input: cast once per module on the
    # sequence-parallel shard when the all-gather carries fp8, else once per linear, whole
    col_input = np.where(gathered, 2.0 * h / np.where(sp, tp, 1.0), h * (3.0 + gates))
    # output gradients: column-parallel outputs are split by tp; row-parallel ones are the hidden
    # size, sharded by sequence parallelism before the gather when it carries fp8
    row_grad = 2.0 * h / np.where(gathered & sp, tp, 1.0)
    grad_input = h * (3.0 + gates) + (q + f) / tp  # backward outputs of the per-linear GEMMs
    return {
        "fused_input": col_input + f / tp,  # after the norms; down's input after the activation
        "input": q / tp,  # o's input: the attention output
        "fused_grad_output": gates * f / tp,  # gate/up output gradients: the activation's backward
        "grad_output": (q + 2 * kv) / tp + row_grad,  # qkv's (attention backward), o's and down's (residual)
        "grad_input": np.where(rec["output_rescale_bytes_per_element"] > 0, grad_input, 0.0),
        "weights": spec.params_per_layer / tp,
    }


def cast_s_per_token(spec: ModelSpec, layout: Layout, rec, hbm_Bps, recompute) -> np.ndarray:
    """Seconds per token of one block's fp8 quantisation (forward + backward, plus the input
    casts of recomputed forwards), 0 for plans not in fp8. A recipe with fused norm/activation
    kernels (`producer_fused_bytes_per_element`) pays that for the tensors they produce."""
    n = _elements_per_token(spec, layout, rec)
    tokens = np.asarray(layout.micro_batch * layout.seq_len / layout.cp, dtype=np.float64)
    per_weight_cast = tokens * np.where(rec["weight_cast_per_step"] > 0, layout.grad_accum, 1.0)
    rescale = rec["output_rescale_bytes_per_element"]
    in_b, grad_b = rec["input_bytes_per_element"], rec["grad_output_bytes_per_element"]
    fused = rec["producer_fused_bytes_per_element"]
    fused_in_b = np.where(np.isnan(fused), in_b, fused)
    fused_grad_b = np.where(np.isnan(fused), grad_b, fused)
    bytes_ = ((n["input"] * in_b + n["fused_input"] * fused_in_b) * (1.0 + recompute)
              + n["grad_output"] * grad_b + n["fused_grad_output"] * fused_grad_b
              + n["grad_input"] * rescale
              + n["weights"] / per_weight_cast * (rec["weight_bytes_per_element"] + rescale))
    return (np.asarray(layout.precision) == PREC["fp8"]) * bytes_ / hbm_Bps


def tp_bytes_factor(layout: Layout, rec, block_recompute) -> np.ndarray:
    """Share of the TP collective bytes left when all-gathers carry fp8: of the 4 (+2 recomputed)
    all-reduce-sized collectives per block, the 2 (+2) forward all-gathers, and with
    `tp_fp8_grad_allgather` the 2 backward all-gathers of the row-parallel output gradients
    (torchao Float8RowwiseParallel casts the gradient before its gather), are half of an
    all-reduce's traffic each, and fp8 halves a 16-bit one."""
    prec = np.asarray(layout.precision) == PREC["fp8"]
    fwd = prec & (rec["tp_fp8_allgather"] > 0)
    bwd = prec & (rec["tp_fp8_grad_allgather"] > 0)
    gathers = fwd * (2.0 + 2.0 * block_recompute) + bwd * 2.0
    return 1.0 - gathers / (4.0 + 2.0 * block_recompute) * 0.5 * 0.5


def weight_cache_bytes(spec: ModelSpec, layout: Layout, settings) -> np.ndarray:
    """fp8 copies of the block weights of the heaviest stage kept between micro batches (weight
    and its transpose, 1 byte each) by recipes that cast weights once per step."""
    from planner.memory import stage_layers

    rec = per_candidate(recipes(settings), layout)
    linear = stage_layers(spec, layout)[0] * spec.params_per_layer / np.asarray(layout.tp, dtype=np.float64)
    fp8 = np.asarray(layout.precision) == PREC["fp8"]
    return fp8 * (rec["weight_cast_per_step"] > 0) * 2.0 * linear
