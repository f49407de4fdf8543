"""The bundled trainer refuses a full-width q/k norm (OLMo 2, OLMoE) and a parallel block with post-norms under tp
(trainer/config.py validate_layout); the planner's rule says so before the tuner proposes such a trial."""

import pytest

from hardware.catalog import load_catalog
from planner import rules
from planner.errors import PlanError
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import Scenario

CATALOG = load_catalog()
SYSTEM = resolve_system(Scenario(gpu="h100-80gb", gpus=64), CATALOG)


def test_full_width_qk_norm_under_tp_is_refused_for_the_bundled_stack_only():
    olmoe = resolve_model("olmoe-1b-7b")
    assert olmoe.qk_norm == "full"
    with pytest.raises(PlanError) as e:
        rules.check({"stack": "bundled", "tp": 2}, spec=olmoe, system=SYSTEM)
    assert e.value.field == "tp" and "qk_norm full" in str(e.value) and "allowed: tp 1" in str(e.value)
    rules.check({"stack": "bundled", "tp": 1}, spec=olmoe, system=SYSTEM)
    rules.check({"stack": "megatron", "tp": 2}, spec=olmoe, system=SYSTEM)
    rules.check({"stack": "bundled", "tp": 2}, spec=resolve_model("llama2-7b"), system=SYSTEM)


def test_parallel_block_with_post_norms_under_tp():
    spec = resolve_model("llama2-7b").model_copy(update={"parallel_block": True, "norms_per_layer": 4})
    with pytest.raises(PlanError) as e:
        rules.check({"stack": "bundled", "tp": 2}, spec=spec, system=SYSTEM)
    assert "parallel block with post-norms" in str(e.value)
