"""Transformer Engine fp8 linears keep the fp8 cast of their input for backward (planner/fp8_saved.py):
the norm outputs and the fc2 input at 1 byte, proj's fp8 copy of the attention output on top; torchao's
recipes keep the 16-bit input. And the NeMo 24.07 fp8 rows that ran (validation/data/published_dev.csv)
are no longer called out of memory for these terms."""

from pathlib import Path

import pytest

from planner import fp8_saved, memory, validate
from planner.layout import Layout
from planner.resolve import resolve_model, resolve_system
from planner.runs import load_runs
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings, with_catalog

SETTINGS = with_catalog(Settings())
H, F, S, TP = 4096, 14336, 4096, 4


def _case(precision, recipe="delayed", sp=True, stack="megatron"):
    spec = resolve_model(Scenario(n_layers=8, hidden=H, n_heads=32, n_kv_heads=8, ffn_hidden=F, vocab=32000,
                                  mlp="swiglu"))
    system = resolve_system(Scenario(cluster="dgx-h100", gpus=8))
    plan = ExecutionPlan(tp=TP, pp=1, dp=2, micro_batch=1, grad_accum=1, seq_len=S, stack=stack,
                         sharding="zero1", precision=precision, fp8_recipe=recipe, sequence_parallel=sp)
    return spec, Layout.from_plan(plan), system


@pytest.mark.parametrize("sp", [True, False])
def test_te_fp8_block_keeps_one_byte_inputs(sp):
    spec, lay, _ = _case("fp8", sp=sp)
    less = float(fp8_saved.block_bytes_less(spec, lay, SETTINGS)[0])
    sp_div = TP if sp else 1
    # 2 norm outputs (h/sp_div) and the fc2 input (f/tp) go 2 -> 1 byte; proj's 1-byte copy (h/tp) on top
    assert less == pytest.approx(S * (2 * H / sp_div + F / TP) * 1.0 - S * H / TP * 1.0)
    full = float(memory.layer_activation_bytes(spec, lay)[0])
    assert 0 < less < full


def test_torchao_recipes_and_16_bit_plans_keep_16_bit_inputs():
    for precision, recipe in (("fp8", "tensorwise"), ("fp8", "rowwise"), ("bf16", "delayed")):
        spec, lay, _ = _case(precision, recipe, stack="torchtitan" if recipe != "delayed" else "megatron")
        assert float(fp8_saved.block_bytes_less(spec, lay, SETTINGS)[0]) == 0.0


def test_activation_term_shrinks_by_the_saved_bytes_per_block():
    spec, lay, system = _case("fp8")
    te = float(memory.memory_arrays(spec, lay, system, SETTINGS)["activations_bytes"][0])
    spec_b, lay_b, _ = _case("fp8", "tensorwise")
    ao = float(memory.memory_arrays(spec_b, lay_b, system, SETTINGS)["activations_bytes"][0])
    per_block = float(fp8_saved.block_bytes_less(spec, lay, SETTINGS)[0])
    assert ao - te == pytest.approx(spec.n_layers * per_block, rel=1e-9)


ROWS = Path(__file__).resolve().parents[2] / "validation" / "data" / "published_dev.csv"


@pytest.mark.parametrize("rid", ["nemo_perf_004", "nemo_perf_011"])
def test_nemo_fp8_rows_that_ran_fit(rid):
    run = next(r for r in load_runs(ROWS) if r.id == rid)
    pred = validate.predict(run, SETTINGS)
    assert pred.verdict == "" and pred.fits
