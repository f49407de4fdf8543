"""validation/megatron_split.py: the Megatron rows' step split at the fitted comm factor and at 1.0."""

import pytest

from hardware.catalog import load_catalog
from validation import megatron_split as ms
from validation.fit_profiles import load_all


@pytest.fixture(scope="module")
def rows():
    return {r.id: r for r in load_all() if r.id.startswith(("megatron_core_h100", "megatron_2020"))}


def test_parts_cover_the_step_and_only_dp_moves_with_the_comm_factor(rows):
    fitted = load_catalog().stacks
    unit = ms.with_comm_factor(fitted, "megatron", 1.0)
    run = rows["megatron_core_h100_004"]  # 32B, tp 8, dp 48 across 48 nodes: ZeRO-1 traffic on InfiniBand
    err, sh = ms.split(run, fitted)
    err1, sh1 = ms.split(run, unit)
    assert sum(sh.values()) == pytest.approx(1.0, abs=1e-6)
    assert sh1["dp"] > sh["dp"] > 0.02
    assert err1 < err  # a larger comm factor: a longer predicted step, a lower predicted speed
    # a row with no data parallelism does not see the factor
    solo = rows["megatron_2020_001"]
    (e0, s0), (e1, s1) = ms.split(solo, fitted), ms.split(solo, unit)
    assert e0 == pytest.approx(e1) and s0 == pytest.approx(s1)


def test_unstated_micro_batch_is_reread_and_tokens_per_step_kept(rows):
    run = rows["megatron_core_h100_004"]
    assert run.plan.micro_batch == 1
    two = ms.with_micro_batch(run, 2)
    assert (two.plan.micro_batch, two.plan.grad_accum) == (2, run.plan.grad_accum // 2)
    assert two.plan.micro_batch * two.plan.grad_accum * two.plan.dp == run.plan.global_batch
    assert ms.with_micro_batch(run, 5) is run  # 192 / (48 x 5) is not whole
