"""Golden test: predicted peak memory against the published runs that measured it.

Issue 10's memory target: within 10% where measured (MAPE over the measured peaks, each compared
in its source's convention, planner/peak_memory.py), every OOM run flagged, false alarms <= 2% of
the runs that ran. Measured when written: MAPE 6.9% over 49 peaks (BLOOM nvidia-smi snapshots
7-10% per table, torchtitan reserved 0-4%); the tolerance guards against regressions.
"""

from pathlib import Path

import pytest

from planner.runs import load_runs
from planner.validate import validate

DATA = Path(__file__).resolve().parents[2] / "validation" / "data"
MEMORY_MAPE = 10.0
SOURCE_MEMORY_MAPE = 15.0


@pytest.fixture(scope="module")
def report():
    return validate(load_runs(DATA / "published_dev.csv"))


def test_memory_within_ten_percent_where_measured(report):
    assert report.memory_rows == 49
    assert report.memory_mape_pct <= MEMORY_MAPE, report.memory_mape_pct
    worst = {m.source: m.mape_pct for m in report.memory_sources if m.mape_pct > SOURCE_MEMORY_MAPE}
    assert not worst, worst


def test_most_peaks_within_ten_percent(report):
    # measured when written: 41 of 49 (BLOOM's snapshots: the same configuration read 38 and 44 GB,
    # bloom_prequel_057/058; one mb 2 row above its mb 4 twin, bloom_prequel_016)
    assert report.memory_within_10pct >= 40, report.memory_within_10pct
    assert report.memory_within_10pct == sum(
        abs(p.predicted_mem_gib / p.measured_mem_gib - 1) <= 0.10 for p in report.runs if p.measured_mem_gib)


def test_no_source_is_biased_beyond_the_target(report):
    assert all(abs(m.bias_pct) <= MEMORY_MAPE for m in report.memory_sources), report.memory_sources


def test_every_oom_flagged_and_few_false_alarms(report):
    assert report.oom_runs == report.oom_flagged == 3
    assert report.false_alarms_memory <= 0.02 * report.ran
