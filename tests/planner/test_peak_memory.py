"""Peak memory by how it was measured (planner/peak_memory.py): nvidia-smi, reserved, allocated."""

from pathlib import Path

import numpy as np
import pytest

from planner.errors import PlanError
from planner.peak_memory import CONVENTIONS, convention_of, peak_bytes
from planner.runs import load_runs

DATA = Path(__file__).resolve().parents[2] / "validation" / "data"
GIB = 2**30


def _terms():
    return {"total_bytes": np.array([50.0 * GIB]), "runtime_bytes": np.array([1.5 * GIB]),
            "fragmentation_bytes": np.array([4.0 * GIB])}


def test_each_convention_counts_what_its_tool_counts():
    mem = _terms()
    assert peak_bytes(mem, "nvidia-smi")[0] == 50.0 * GIB  # context and NCCL included
    assert peak_bytes(mem, "reserved")[0] == 48.5 * GIB  # the caching allocator's pool only
    assert peak_bytes(mem, "allocated")[0] == 44.5 * GIB  # live tensors: no cached free blocks
    with pytest.raises(ValueError, match="nvidia-smi, reserved, allocated"):
        peak_bytes(mem, "smi")


def test_convention_from_the_column_the_source_or_a_stated_default():
    notes: list[str] = []
    assert convention_of({"id": "torchtitan_004", "measured_peak_mem_GB": "83.9"}, notes) == "reserved"
    assert convention_of({"id": "bloom_prequel_009", "measured_peak_mem_GB": "49"}, notes) == "nvidia-smi"
    assert not notes
    row = {"id": "mine_1", "measured_peak_mem_GB": "30", "measured_peak_mem_convention": "Allocated"}
    assert convention_of(row, notes) == "allocated" and not notes
    assert convention_of({"id": "mine_2", "measured_peak_mem_GB": "30"}, notes) == "nvidia-smi"
    assert notes == ["peak memory convention not stated: nvidia-smi (device total)"]
    with pytest.raises(PlanError) as e:
        convention_of({"id": "mine_3", "measured_peak_mem_convention": "max_rss"}, [])
    assert e.value.field == "measured_peak_mem_convention" and all(c in str(e.value) for c in CONVENTIONS)


def test_published_runs_carry_their_sources_convention():
    runs = {r.id: r for r in load_runs(DATA / "published_dev.csv")}
    measured = [r for r in runs.values() if r.measured_peak_mem_gib]
    assert {r.mem_convention for r in measured if r.id.startswith("torchtitan")} == {"reserved"}
    assert {r.mem_convention for r in measured if r.id.startswith("bloom")} == {"nvidia-smi"}
    assert not any("convention not stated" in a for r in measured for a in r.assumptions)
