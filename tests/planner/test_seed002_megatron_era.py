"""Seed 002's Megatron-LM rows ran the Megatron-LM of May 2021, which had no sequence parallelism.

The seed's own log (bigscience experiments/gpt2-meg/meg_gpt2_perf_n16.out, the 64-GPU 52B run of its
"Megatron Performance" table) prints "[after megatron is initialized] datetime: 2021-05-26" and an argument
list without any sequence-parallel flag; sequence parallelism came with Megatron-LM in 2022 (Korthikanti et
al., planner/run_text.py SP_FIRST_YEAR). The rows say so in their notes ("SP off: Megatron-LM of May 2021"),
so the reader must not give them the megatron stack's default (SP on with tp > 1).
"""

from pathlib import Path

import numpy as np

from planner.layout import Layout
from planner.runs import load_runs
from planner.settings import Settings
from planner.throughput import performance

DATA = Path(__file__).resolve().parents[2] / "validation" / "data"


def _seed002_megatron():
    return [r for r in load_runs(DATA / "seed_runs.csv") if r.id.startswith("s002-") and r.plan.stack == "megatron"]


def test_every_seed002_megatron_row_reads_sequence_parallelism_off():
    rows = _seed002_megatron()
    assert len(rows) == 30
    assert all(r.plan.tp == 4 for r in rows)
    assert not any(r.plan.sequence_parallel for r in rows)
    assert not any("sequence parallelism not stated" in a for a in sum((r.assumptions for r in rows), []))


def test_sequence_parallelism_off_costs_the_replicated_elementwise_work():
    run = next(r for r in _seed002_megatron() if r.id == "s002-22")  # 52B, tp 4, pp 16 on 64 V100

    def elementwise(plan):
        perf = performance(run.spec, Layout.from_plan(plan), run.system, Settings())
        return float(np.asarray(perf["raw_elementwise_s"]).reshape(-1)[0])

    off = elementwise(run.plan)
    on = elementwise(run.plan.model_copy(update={"sequence_parallel": True}))
    # without SP every tp rank runs the layer norms and dropouts on the whole sequence
    assert off > 1.2 * on
