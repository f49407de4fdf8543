"""DeepSpeed before 0.6: ZeRO-3 fetches block the device and hide behind no compute (planner/deepspeed_era.py)."""

from pathlib import Path

import numpy as np
import pytest

from planner import deepspeed_era
from planner.errors import PlanError
from planner.layout import Layout
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.runs import load_runs
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from planner.throughput import performance

DATA = Path(__file__).resolve().parents[2] / "validation" / "data"
GPT2_52B = resolve_model("gpt2-52b")


def _perf(version, sharding="zero3", offload="none"):
    plan = ExecutionPlan(stack="hf", sharding=sharding, offload=offload, dp=64, micro_batch=8,
                         activation_checkpointing="full", precision="fp16", seq_len=1024)
    system = resolve_system(Scenario(cluster="jean-zay-v100-32gb", gpus=64)).model_copy(
        update={"deepspeed_version": version})
    perf = performance(GPT2_52B, Layout.from_plan(plan), system, Settings())
    return {k: float(np.asarray(v).reshape(-1)[0]) for k, v in perf.items() if k != "bottleneck"}


@pytest.mark.parametrize("text, version", [
    ("DeepSpeed 0.3.17 (log)", "0.3"),
    ('prints ""DeepSpeed info: version=0.3.17+unknown""', "0.3"),
    ("deepspeed v0.9.5", "0.9"),
    ("DeepSpeed ZeRO-3, stage 3", None),  # no version: nothing assumed
])
def test_version_read_from_the_notes(text, version):
    notes: list[str] = []
    assert deepspeed_era.version_of({"notes": text}, notes) == version
    assert bool(notes) == deepspeed_era.blocking_fetch(version)


def test_version_column_wins_and_bad_cell_is_a_clear_error():
    assert deepspeed_era.version_of({"deepspeed_version": "0.12.6", "notes": "DeepSpeed 0.3.17"}, []) == "0.12"
    with pytest.raises(PlanError, match="deepspeed_version"):
        deepspeed_era.version_of({"id": "x", "deepspeed_version": "recent"}, [])


def test_boundary_is_0_6():
    assert deepspeed_era.blocking_fetch("0.5")
    assert not deepspeed_era.blocking_fetch("0.6")
    assert not deepspeed_era.blocking_fetch("1.0")
    assert not deepspeed_era.blocking_fetch(None)


def test_old_deepspeed_exposes_the_zero3_fetches():
    new, old = _perf(None), _perf("0.3")
    # the hf profile's overlap hides the 52B gathers behind micro batch 8's compute today...
    assert new["dp_comm_s"] < 0.1 * old["dp_comm_s"]
    # ...DeepSpeed 0.3 pays them in full: three 104 GB passes over 16 nodes, not hidden
    assert old["step_time_s"] - new["step_time_s"] > 0.5 * (old["dp_comm_s"] - new["dp_comm_s"])
    assert old["compute_s"] == pytest.approx(new["compute_s"])


def test_other_shardings_do_not_change():
    for sharding in ("zero1", "zero2", "fsdp_full_shard"):
        assert _perf("0.3", sharding)["step_time_s"] == pytest.approx(_perf(None, sharding)["step_time_s"])


def test_seed_002_hf_zero3_rows_carry_their_logs_version():
    runs = {r.id: r for r in load_runs(DATA / "seed_runs.csv")}
    for i in range(38, 47):
        assert deepspeed_era.blocking_fetch(runs[f"s002-{i}"].system.deepspeed_version), i
    # seed 003 (BLOOM-7b1, 2023) states none: the hf profile's overlap holds
    assert not any(r.system.deepspeed_version for k, r in runs.items() if k.startswith("s003"))
