"""The nemo_perf rows state the TP communication overlap NeMo's own configs for those models set
(validation/data/README.md "TP communication overlap"): the planner reads it as `async_tp`."""

import csv
import re
from pathlib import Path

from planner.runs import load_runs

DATA = Path(__file__).resolve().parents[2] / "validation" / "data"
# tp > 1 rows whose NeMo launcher config / NeMo 2.0 recipe for that model sets the overlap
STATED = {"nemo_perf_002", "nemo_perf_003", "nemo_perf_004", "nemo_perf_008", "nemo_perf_009", "nemo_perf_010",
          "nemo_perf_012"}


def test_nemo_rows_read_the_overlap_their_configs_set():
    runs = {r.id: r for r in load_runs(DATA / "published_dev.csv") if r.id.startswith("nemo_perf_")}
    assert len(runs) == 12
    assert {rid for rid, r in runs.items() if r.plan.async_tp} == STATED
    with open(DATA / "published_dev.csv", newline="") as f:
        notes = {r["id"]: r["notes"] for r in csv.DictReader(f)}
    for rid in STATED:
        assert runs[rid].plan.tp > 1 and runs[rid].plan.sequence_parallel
        # each row cites the config file and the commit it was read at
        assert re.search(r"\.(yaml|py) @[0-9a-f]{8}", notes[rid]), rid
