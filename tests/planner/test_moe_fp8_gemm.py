"""fp8 expert GEMMs (planner/moe_time.py, planner/moe_gemm.py): the grouped GEMMs of an fp8 plan read
1-byte operands and write bf16 (planner/fp8_gemm.py's roofline bytes; torchao roofline_utils "read in float8,
output in bfloat16"), exactly the pass checked against DeepGEMM's FP8 figures; the view's routed-expert share
is removed with the fp8 rules the view was charged with; the size-curve shift of the dense fp8 GEMMs is
left out for grouped GEMMs because DeepGEMM's figures reject it."""

import numpy as np
import pytest

from planner import flops, fp8_gemm, gemm_shape, moe, moe_gemm, moe_time
from planner.layout import Layout
from planner.scenario import ExecutionPlan
from tests.planner.moe_models import MIXTRAL_8X7B, OLMOE_1B_7B
from tests.planner.test_moe_microbench import CONTIGUOUS, FP8_PEAK, GPU, HBM_BPS, MASKED, PTS, SHAPE

PEAK16 = GPU.peak_tflops("bf16") * 1e12


def _layout(precision, micro_batch=1, seq_len=4096, ep=8):
    return Layout.from_plan(ExecutionPlan(tp=1, dp=64, ep=ep, sharding="zero1", activation_checkpointing="none",
                                          precision=precision, micro_batch=micro_batch, grad_accum=4, seq_len=seq_len))


@pytest.mark.parametrize("precision, operand_bytes", [("fp8", 1.0), ("bf16", 2.0)])
def test_plan_expert_gemms_are_the_deepgemm_checked_pass_at_the_plan_operand_bytes(precision, operand_bytes):
    spec, lay = OLMOE_1B_7B, _layout(precision, seq_len=1024)
    got = moe_time.expert_passes_s_per_token(spec, lay, GPU, PTS, FP8_PEAK, HBM_BPS)
    m = moe_time.LOAD_IMBALANCE * moe_time.tokens_per_expert(spec, lay)
    want = moe_gemm.expert_passes_s(m, moe.mlp_matrices(spec), spec.hidden, moe.expert_ffn(spec), spec.moe_experts / 8,
                                    SHAPE, PTS, FP8_PEAK, HBM_BPS, operand_bytes)
    for k in ("fwd", "dgrad", "wgrad"):
        assert float(np.ravel(got[k])[0]) * 1024 == pytest.approx(float(np.ravel(want[k])[0]), rel=1e-12)


def test_few_tokens_per_expert_in_fp8_gain_from_one_byte_operands():
    """OLMoE (64 experts of 2048 x 1024, top 8), 1 x 64 tokens on ep 8: 80 rows per expert, the grouped
    GEMM memory-bound; its fp8 operands halve the weight reads that bound it (at 320 rows it is compute-bound)."""
    spec, lay = OLMOE_1B_7B, _layout("fp8", seq_len=64)
    fp8 = moe_time.expert_passes_s_per_token(spec, lay, GPU, PTS, FP8_PEAK, HBM_BPS)["fwd"]
    m = moe_time.LOAD_IMBALANCE * moe_time.tokens_per_expert(spec, lay)
    two_byte = moe_gemm.expert_passes_s(m, 3, spec.hidden, moe.expert_ffn(spec), 8, SHAPE, PTS, FP8_PEAK, HBM_BPS,
                                        2.0)["fwd"] / 64
    assert float(np.ravel(fp8)[0]) < 0.6 * float(np.ravel(two_byte)[0])


def test_the_view_share_is_removed_with_the_fp8_rules_it_was_charged():
    """Mixtral (no shared experts): the view's routed share of an fp8 plan is the dense fp8 GEMM time
    (planner/fp8_gemm.py: size curve at the fp8 peak, roofline), not the plain curve's; bf16 plans unchanged."""
    view = moe.dense_view(MIXTRAL_8X7B)
    ratio = PEAK16 / FP8_PEAK

    def in_view(lay, hbm, r):
        return float(np.ravel(moe_time.view_expert_gemm_s_per_token(MIXTRAL_8X7B, view, lay, GPU, PTS, FP8_PEAK,
                                                                     hbm, r))[0])

    fp8, bf16 = _layout("fp8", seq_len=512), _layout("bf16", seq_len=512)
    plain = in_view(fp8, np.inf, 1.0)  # the former charge: the curve at the plain size, no roofline
    assert in_view(fp8, HBM_BPS, ratio) > 1.02 * plain
    tokens = 512.0
    q = gemm_shape.plan_factors(view, fp8, GPU)[0][2:]
    dims = gemm_shape.block_linear_dims(view, 1)[2:]
    want = sum(float(np.ravel(fp8_gemm.gemm_s_per_token(pt, size, tokens, n, k, qq, FP8_PEAK, ratio, PTS, HBM_BPS,
                                                        True))[0])
               for (pt, size), qq, (n, k) in zip(flops.block_gemms(view, tokens, 1)[2:], q, dims))
    assert in_view(fp8, HBM_BPS, ratio) == pytest.approx(want, rel=1e-12)
    assert in_view(bf16, HBM_BPS, ratio) == pytest.approx(in_view(bf16, np.inf, 1.0), rel=1e-12)


def _mean_abs_err(rows, pts):
    errs = []
    for g, m, n, k, measured in rows:
        t = float(moe_gemm.pass_s(m, n, k, g, SHAPE, pts, FP8_PEAK, HBM_BPS, 1.0, 2.0))
        errs.append(abs(g * 2.0 * m * n * k / t / 1e12 / measured - 1.0))
    return np.mean(errs), max(errs)


def test_deepgemm_figures_reject_the_fp8_size_curve_shift_for_grouped_gemms():
    """The dense rule (the curve at size x bf16 peak / fp8 peak = the curve's points at 2x the GFLOPs) makes
    DeepGEMM's FP8 grouped GEMMs (H800, README of Feb 2025) worse fits: the grouped model keeps the plain curve."""
    shifted = [(gflop / (PEAK16 / FP8_PEAK), f) for gflop, f in PTS]
    for rows in (MASKED, CONTIGUOUS):
        plain_mean, plain_max = _mean_abs_err(rows, PTS)
        shifted_mean, shifted_max = _mean_abs_err(rows, shifted)
        assert plain_mean < shifted_mean and plain_max <= shifted_max
    assert _mean_abs_err(MASKED, shifted)[1] > 0.20 > _mean_abs_err(MASKED, PTS)[1]
