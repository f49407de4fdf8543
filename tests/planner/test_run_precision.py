"""A Hugging Face DDP run that states no precision and could not have fitted as AMP over fp32
weights (fp32 weights + grads + DDP buckets) is read as 16-bit weights (planner/run_precision.py)."""

import csv
from pathlib import Path

import numpy as np
import pytest

from planner import dp_comm
from planner.layout import Layout
from planner.run_precision import amp_ddp_bytes
from planner.runs import load_runs

DATA = Path(__file__).resolve().parents[2] / "validation" / "data"


def _seed_row(rid: str) -> dict:
    with open(DATA / "seed_runs.csv", newline="", encoding="utf-8") as f:
        return next(r for r in csv.DictReader(f) if r["id"] == rid)


def _load(tmp_path, **changes):
    row = {**_seed_row("s003-07"), **changes}  # bloom-7b1, DDP + Adafactor, 16 x A100 80GB
    path = tmp_path / "runs.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(row))
        w.writeheader()
        w.writerow(row)
    return load_runs(path)[0]


def test_bloom_7b_ddp_that_ran_had_16_bit_weights(tmp_path):
    run = _load(tmp_path)
    assert run.plan.precision == "bf16_pure"
    assert any("bf16_pure" in a for a in run.assumptions)
    assert amp_ddp_bytes(run.spec, run.plan, run.system) > run.system.gpu.hbm_gib * 2**30
    # its gradients cross the network in 16 bit: half the bytes of AMP's fp32 gradients
    assert float(np.asarray(dp_comm.grad_bytes(Layout.from_plan(run.plan))).reshape(-1)[0]) == 2.0
    assert float(np.asarray(dp_comm.grad_bytes(Layout.from_plan(run.plan.model_copy(
        update={"precision": "bf16"})))).reshape(-1)[0]) == 4.0


@pytest.mark.parametrize("changes", [
    {"precision": "bf16"},  # stated: kept
    {"outcome": "OOM"},  # did not run: nothing to infer
    {"sharding": "zero1", "framework": "deepspeed"},  # DeepSpeed keeps 16-bit weights anyway
    {"model_name": "gpt2-xl", "n_params_B": "1.56", "n_layers": "48", "hidden": "1600", "n_heads": "25",
     "vocab": "50257"},  # fits as AMP: no evidence either way
], ids=["stated", "oom", "zero1", "small-model"])
def test_left_as_stated_or_default(tmp_path, changes):
    run = _load(tmp_path, **changes)
    assert run.plan.precision != "bf16_pure"
    assert not any("bf16_pure" in a for a in run.assumptions)
