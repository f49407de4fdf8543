"""Run rows that name ZeRO++ (planner/run_zeropp.py): its spellings become the plan's zeropp_* knobs."""

import pytest

from planner.errors import PlanError
from planner.run_zeropp import zeropp_of

ALL8 = (True, 8, True)


def _read(text, sharding="zero3", column="notes", dp=64, per_node=8):
    notes: list[str] = []
    z = zeropp_of({"id": "p", column: text}, sharding, per_node, dp, notes)
    return (z["zeropp_qwz"], z["zeropp_hpz_partition_size"], z["zeropp_qgz"]), notes


@pytest.mark.parametrize("text,expected", [
    ("ZeRO++", ALL8), ("zero++ on 100 Gbps", ALL8), ("DeepSpeed ZeRO ++", ALL8), ("zeropp", ALL8),
    ("hpZ 8", (False, 8, False)), ("hpZ=16", (False, 16, False)), ("hpz(4)", (False, 4, False)),
    ("qwZ+qgZ", (True, 1, True)), ("qwZ", (True, 1, False)), ("ZeRO++ (qwZ + hpZ)", (True, 8, False)),
    ("ZeRO++ without qgZ", (True, 8, False)), ("ZeRO++, no hpZ", (True, 1, True)),
    ('"zero_quantized_weights": true, "zero_hpz_partition_size": 16', (True, 16, False)),
    ("zero_quantized_gradients=true", (False, 1, True)),
    ("zero_quantized_weights: false", (False, 1, False)),
    ("ZeRO-3 with the usual prefetch", (False, 1, False)), ("", (False, 1, False)),
])
def test_spellings(text, expected):
    assert _read(text)[0] == expected


def test_the_sharding_cell_counts_and_assumptions_are_noted():
    got, notes = _read("ZeRO++", column="zero_stage_or_fsdp")
    assert got == ALL8 and any("hpZ" in n for n in notes)
    got, notes = _read("hpZ", dp=4)  # a group smaller than a node: hpZ over the GPUs it has there
    assert got == (False, 4, False) and any("partition size not stated: 4" in n for n in notes)


def test_zeropp_below_stage_3_is_an_error_naming_the_column():
    with pytest.raises(PlanError) as e:
        _read("qwZ", sharding="zero2")
    assert e.value.field == "zero_stage_or_fsdp" and "\n" not in str(e.value)


def test_a_row_loads_with_zeropp(tmp_path):
    from tests.planner.test_run_spellings import load

    run = load(tmp_path, zero_stage_or_fsdp="ZeRO++", framework="DeepSpeed", tp="1", pp="1", dp="64")
    p = run.plan
    assert (p.sharding, p.zeropp_qwz, p.zeropp_hpz_partition_size, p.zeropp_qgz) == ("zero3", True, 8, True)


@pytest.mark.parametrize("text,on", [("ZeRO-3", False), ("ZeRO++", True)])
def test_a_row_without_its_layout_gets_zeropp_only_if_it_says_so(tmp_path, text, on):
    """Where a row states no layout the planner picks one (planner/validate.py resolved_plan): on a
    100 Gbps network the search would propose ZeRO++, but a row that does not name it ran without."""
    from planner.settings import Settings
    from planner.validate import resolved_plan
    from tests.planner.test_run_spellings import load

    run = load(tmp_path, zero_stage_or_fsdp=text, framework="DeepSpeed", tp="", pp="", dp="",
               internode_network="100 Gbps", n_gpus="256", global_batch="512")
    assert not run.layout_stated
    p = resolved_plan(run, Settings())
    assert p.sharding == "zero3" and (p.zeropp_qwz, p.zeropp_qgz) == (on, on)
