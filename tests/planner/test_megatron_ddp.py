"""Megatron-LM local DDP: the gradient all-reduce follows backward, hidden by nothing (planner/megatron_ddp.py)."""

from pathlib import Path

import numpy as np
import pytest

from planner import megatron_ddp
from planner.errors import PlanError
from planner.layout import Layout
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.runs import load_runs
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from planner.throughput import performance

DATA = Path(__file__).resolve().parents[2] / "validation" / "data"


@pytest.mark.parametrize("row, local", [
    ({"notes": "end-to-end; DDP-impl local (run_table_1.sh: DDP=local)"}, True),
    ({"notes": "--DDP-impl torch"}, False),
    ({"framework": "Megatron-LM (2020)", "notes": ""}, True),  # the default of the time
    ({"framework": "Megatron-LM (2020)", "notes": "DDP-impl torch"}, False),  # stated wins over the default
    ({"framework": "Megatron-LM (2024)", "notes": ""}, False),
    ({"framework": "Megatron-LM", "notes": "interleaved"}, False),  # nothing stated: nothing assumed
    ({"ddp_impl": "local", "notes": "DDP-impl torch"}, True),  # the column wins
])
def test_local_ddp_read_from_the_row(row, local):
    notes: list[str] = []
    assert megatron_ddp.after_backward_of(row, notes) is local
    assert bool(notes) is local


def test_bad_ddp_impl_cell_is_a_clear_error():
    with pytest.raises(PlanError, match="ddp_impl"):
        megatron_ddp.after_backward_of({"id": "x", "ddp_impl": "fsdp"}, [])


def _perf(after_backward: bool):
    plan = ExecutionPlan(stack="megatron", tp=1, pp=1, dp=32, micro_batch=4, grad_accum=1,
                         activation_checkpointing="full", precision="fp16", seq_len=2048)
    system = resolve_system(Scenario(cluster="dgx-a100", gpus=32)).model_copy(
        update={"ddp_after_backward": after_backward})
    perf = performance(resolve_model("gpt2-7.5b"), Layout.from_plan(plan), system, Settings())
    return {k: float(np.asarray(v).reshape(-1)[0]) for k, v in perf.items() if k != "bottleneck"}


def test_local_ddp_pays_the_whole_all_reduce():
    torch_ddp, local = _perf(False), _perf(True)
    # fp32 grads of 7.5B parameters all-reduced over 4 nodes: well over a tenth of a second
    assert local["dp_comm_s"] > 0.1
    # torch DDP hides most of it behind the last backward; local DDP none of it
    assert torch_ddp["dp_comm_s"] < 0.5 * local["dp_comm_s"]
    assert local["step_time_s"] - torch_ddp["step_time_s"] == pytest.approx(
        local["dp_comm_s"] - torch_ddp["dp_comm_s"], rel=1e-6)


def test_published_rows_read_their_ddp_impl():
    runs = {r.id: r for r in load_runs(DATA / "published_dev.csv")}
    assert not runs["megatron_sc21_001"].system.ddp_after_backward  # run_table_1.sh: DDP=torch
    assert runs["megatron_sc21_006"].system.ddp_after_backward  # DDP=local
    assert runs["megatron_2020_012"].system.ddp_after_backward  # Megatron-LM 2020 default
    assert not runs["megatron_core_h100_001"].system.ddp_after_backward
