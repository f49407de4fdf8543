"""The per-plan gradient-reduction dtype (ExecutionPlan.grad_reduce_dtype: default | fp32 | bf16): the gradient
buffer (planner/main_grads.py) and the bytes of the data-parallel reduction (planner/dp_comm.py grad_bytes) follow
it on a small case computed by hand; the runs CSV's optional column is read, a bad cell names the field."""

import csv
from pathlib import Path

import numpy as np
import pytest

from planner import dp_comm, memory
from planner.errors import PlanError
from planner.layout import Layout
from planner.resolve import resolve_model, resolve_system
from planner.runs import load_runs
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from validation.sanity_plans import catalog

SETTINGS = Settings(stacks=catalog().stacks)  # the catalog's megatron profile: main_grads_fp32 false
DATA = Path(__file__).resolve().parents[2] / "validation" / "data"


def _case(dtype, sharding="zero1", precision="bf16", dp=8):
    spec = resolve_model(Scenario(n_layers=8, hidden=1024, n_heads=16, ffn_hidden=4096, vocab=32000))
    system = resolve_system(Scenario(cluster="dgx-h100", gpus=dp))
    lay = Layout.from_plan(ExecutionPlan(stack="megatron", dp=dp, seq_len=1024, sharding=sharding, precision=precision,
                                         grad_reduce_dtype=dtype))
    mem = memory.memory_arrays(spec, lay, system, SETTINGS)
    return float(mem["grads_bytes"][0]) / float(memory.params_per_gpu(spec, lay)[0]), mem, lay


def test_the_knob_sets_the_gradient_buffer_by_hand():
    """ZeRO-1 bf16 over dp 8, P parameters a GPU: the profile (bf16 buffer) holds 2P of 16-bit grads plus the
    fp32 partition 4P/8 = 2.5 B a parameter, no bucket buffers (Megatron-Core's buckets are views); fp32 asks for
    Megatron-LM's fp32 main-gradient buffer, 4 B a parameter and nothing else; bf16 is the profile's here."""
    default, d_mem, _ = _case("default")
    fp32, f_mem, _ = _case("fp32")
    bf16, _, _ = _case("bf16")
    assert default == pytest.approx(2 + 4 / 8) == bf16
    assert fp32 == pytest.approx(4.0)
    assert float(f_mem["comm_buffers_bytes"][0]) == 0.0
    # DDP: timed as an fp32 all-reduce by default (dp_comm.grad_bytes) and exported with Megatron-LM's fp32
    # accumulation, so the default holds the fp32 buffer as fp32 does (round 38; it counted 2 B before); bf16: 2 B
    assert _case("default", "none")[0] == pytest.approx(4.0) == _case("fp32", "none")[0]
    assert _case("bf16", "none")[0] == pytest.approx(2.0)


def test_the_knob_sets_the_dp_bytes_by_hand():
    """Bytes per gradient element reduced: ZeRO-1 bf16 reduce-scatters 2 B by default, 4 B in fp32; DDP under AMP
    all-reduces fp32 gradients (4 B) by default, 2 B with bf16 (--grad-reduce-in-bf16); an fp32 plan stays 4."""
    bytes_of = lambda *a: float(dp_comm.grad_bytes(_case(*a)[2])[0])  # noqa: E731
    assert bytes_of("default") == 2.0 and bytes_of("fp32") == 4.0 and bytes_of("bf16") == 2.0
    assert bytes_of("default", "none") == 4.0 and bytes_of("bf16", "none") == 2.0
    assert bytes_of("bf16", "none", "fp32") == 4.0
    # a run's stated bytes (Megatron-LM fp16: 2) give way to a plan that names its dtype
    lay = _case("fp32", "none", "fp16")[2]
    assert float(dp_comm.grad_bytes(lay, np.array([2.0]))[0]) == 4.0


def test_torchtitan_reduces_fsdp_gradients_in_fp32_by_default():
    """torchtitan's mixed_precision_reduce accepts only "float32" (the catalog's torchtitan profile:
    fsdp_reduce_fp32): an FSDP bf16/fp8 plan reduce-scatters 4 B a gradient there, 2 B on the fsdp profile
    (llm-foundry's PURE mixed precision); bf16_pure and a plan naming bf16 stay 2 B."""
    stacks = catalog().stacks
    assert stacks["torchtitan"].fsdp_reduce_fp32 and stacks["bundled"].fsdp_reduce_fp32
    assert not stacks["fsdp"].fsdp_reduce_fp32

    def bytes_of(stack, precision="bf16", dtype="default", sharding="fsdp_full_shard"):
        lay = Layout.from_plan(ExecutionPlan(stack=stack, dp=8, sharding=sharding, precision=precision,
                                             grad_reduce_dtype=dtype))
        return float(dp_comm.grad_bytes(lay, None, np.array([float(stacks[stack].fsdp_reduce_fp32)]))[0])

    assert bytes_of("torchtitan") == 4.0 == bytes_of("torchtitan", "fp8")
    assert bytes_of("fsdp") == 2.0 == bytes_of("torchtitan", "bf16_pure") == bytes_of("torchtitan", dtype="bf16")
    assert bytes_of("torchtitan", sharding="zero1") == 2.0  # only FSDP's reduce-scatter


def test_the_estimate_carries_the_knob_and_its_slower_reduction():
    """Through the API: the plan shows the knob, and 4-byte gradients over 4 nodes cost more DP time than 2."""
    from planner.api import evaluate

    base = dict(model="7b", gpu="h100-80gb", gpus=32, tp=1, pp=1, cp=1, stack="megatron", sharding="zero1",
                micro_batch=1, grad_accum=1, internode_gbps=100, activation_checkpointing="full")
    d, f = (evaluate(Scenario(**base, grad_reduce_dtype=g), settings=SETTINGS) for g in ("default", "fp32"))
    assert f.plan.grad_reduce_dtype == "fp32"
    assert f.memory.grads_bytes == pytest.approx(4.0 / (2 + 4 / 32) * d.memory.grads_bytes)  # dp 32
    assert f.time.dp_comm_s > d.time.dp_comm_s


def _rows(tmp_path, cell):
    with open(DATA / "published_dev.csv") as fh:
        rows = [r for r in csv.DictReader(fh) if r["id"].startswith("megatron_core_h100")][:1]
    rows[0]["grad_reduce_dtype"] = cell
    path = tmp_path / "runs.csv"
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def test_the_runs_column_is_read(tmp_path):
    run, = load_runs(_rows(tmp_path, "fp32"), catalog())
    assert run.plan.grad_reduce_dtype == "fp32"
    assert any("grad_reduce_dtype" in n for n in run.assumptions)
    blank, = load_runs(_rows(tmp_path, ""), catalog())
    assert blank.plan.grad_reduce_dtype == "default"


def test_a_bad_cell_names_the_field_and_the_allowed_values(tmp_path):
    with pytest.raises(PlanError) as e:
        load_runs(_rows(tmp_path, "fp64"), catalog())
    assert e.value.field == "grad_reduce_dtype"
    assert "allowed: default, fp32, bf16" in str(e.value) and "\n" not in str(e.value)
