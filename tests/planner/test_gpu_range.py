"""`--gpus LO:HI[:STEP]` (planner/units.py parse_gpu_range): counts above one node are whole nodes, and a
sweep is at most 256 searches; a range that breaks either is one line naming the sweep, the first count
at fault and a range that works (it said "13 is not a multiple of gpus_per_node" for 8:64:5, and
8:100000 started 12,500 searches)."""

import pytest

from planner.errors import PlanError
from planner.units import MAX_SWEEP_COUNTS, parse_gpu_range


def test_whole_node_sweeps_and_counts_inside_one_node():
    assert parse_gpu_range("48", 8) == [48]
    assert parse_gpu_range("8:32", 8) == [8, 16, 24, 32]
    assert parse_gpu_range("1:8:1", 8) == list(range(1, 9))  # inside one node any count
    assert parse_gpu_range("4:16:4", 4) == [4, 8, 12, 16]
    assert len(parse_gpu_range("8:2048:8", 8)) == MAX_SWEEP_COUNTS


@pytest.mark.parametrize("text, words", [
    ("8:64:5", ["'8:64:5' reaches 13 GPUs", "multiples of 8", "8:64:8"]),
    ("8:100", ["reaches 100 GPUs", "8:96:8"]),
    ("2:64", ["reaches 10 GPUs", "8:64:8"]),
    ("8:100000", ["12,500 GPU counts", "at most 256", "8:100000:400"]),
    ("1:100000", ["12,501 GPU counts", "8:100000:400"]),
])
def test_a_sweep_that_cannot_run_says_what_would(text, words):
    with pytest.raises(PlanError) as e:
        parse_gpu_range(text, 8)
    assert e.value.field == "gpus"
    for w in words:
        assert w in str(e.value), (w, str(e.value))


@pytest.mark.parametrize("text", ["8:100000", "1:100000"])
def test_the_suggested_range_is_accepted(text):
    with pytest.raises(PlanError) as e:
        parse_gpu_range(text, 8)
    suggested = str(e.value).rsplit("e.g. ", 1)[1]
    assert len(parse_gpu_range(suggested, 8)) <= MAX_SWEEP_COUNTS
